"""Argument-aware tool rules (AgentPolicy `spec.toolRules[]`, issue 26 §6): what the rules
say about one call that governance (engine/governance.py) allowed and whose arguments are
valid, before guardrails and approvals (engine/screening.py).

Every rule of every selecting policy whose `tools` names the call's tool is evaluated (the
start-time policies' too, after a mid-run re-read: a rule can be added, never removed), by
policy name and position, until an enforced `Deny` decides:

| rule | `when` true | `when` false | evaluation error |
|---|---|---|---|
| `Deny`, `Enforce` | denied | nothing | denied (fail closed) |
| `RequireApproval`, `Enforce` | needs approval | nothing | needs approval (fail closed) |
| any action, `Audit` | noted | nothing | noted, with the error |

An error is a type error, a missing field, a result that is not a bool, or the cost budget
spent (api/celexpr.py); its kind (`NoSuchField`, `NoMatchingOverload`, `CostLimitExceeded`,
...) is recorded, never a value. Decisions go into `status.toolCalls[].reason` as
`ToolRuleDenied: <policy>/<rule>` (a denial) or, appended to an allowed call's reason after
`; `, as `ToolRuleApproval: <policy>/<rule>` and `ToolRuleAudit: <policy>/<rule> would
<action>`; every evaluation is an event (`ToolRuleEvaluated`, counted in a metric).

Evaluation holds the event loop for little: small inputs are evaluated on it within
ON_LOOP_BUDGET shared by the call's rules, the rest in a thread (engine/offloop.py) with the
full budget each, within RULES_SECONDS (past it: `Timeout`, fail closed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..api.celexpr import (
    EVAL_BUDGET,
    EvaluationError,
    Inputs,
    Meter,
    count_values,
    evaluate,
    prepare,
)
from .governance import ApprovalRule, BoundRule, Governance
from .offloop import OffLoop
from .transcript import Usage

__all__ = ["RuleEvaluation", "RuleSubject", "RuleVerdict", "applicable", "check"]

RuleResult = Literal["matched", "notMatched", "error"]

ON_LOOP_VALUES = 500
"""Calls whose rule variables hold more values are converted and evaluated off the loop."""
ON_LOOP_BUDGET = 1_000
"""Cost units all the rules of one call may spend together on the event loop (tens of ms at
most, bench/celrules.py); the rule that runs out, and those after it, are evaluated off the
loop, each with the full budget (api/celexpr.py)."""
RULES_SECONDS = 5.0
"""Deadline of the off-loop evaluation of one call's rules, waiting for a thread included;
past it the rules count as failed (fail closed)."""
_OFF_LOOP = OffLoop("ordo-toolrules", threads=2, seconds=RULES_SECONDS)


@dataclass(frozen=True, slots=True)
class RuleSubject:
    """Who calls: the Agent and the Task, as rules read them (`agent`, `task`)."""

    agent: str = ""
    agent_labels: Mapping[str, str] = field(default_factory=dict)
    task: str = ""
    task_labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RuleEvaluation:
    """One rule evaluated on one call: names and the result, never the arguments."""

    policy: str
    rule: str
    action: str
    mode: str
    result: RuleResult


@dataclass(frozen=True, slots=True)
class RuleVerdict:
    """What the rules say about one call."""

    denied: str | None = None
    """The record reason of an enforced denial (`ToolRuleDenied: <policy>/<rule>`)."""
    message: str | None = None
    """The denying rule's `message` for the model, if it has one."""
    approval: ApprovalRule | None = None
    """Set when an enforced RequireApproval rule matched (or failed)."""
    notes: tuple[str, ...] = ()
    """What to append to an allowed call's record reason."""
    evaluations: tuple[RuleEvaluation, ...] = ()


def applicable(gov: Governance, names: tuple[str, ...]) -> list[BoundRule]:
    """The rules of `gov` and the governances it narrows that name one of `names`, each once."""
    found: list[BoundRule] = []
    seen: set[tuple[str, str, str, str, str]] = set()
    level: Governance | None = gov
    while level is not None:
        for bound in level.tool_rules:
            r = bound.rule
            key = (bound.policy, r.name, r.when, r.action, r.mode)
            if key not in seen and any(t in names for t in r.tools):
                seen.add(key)
                found.append(bound)
        level = level.within
    return found


def variables(
    arguments: dict[str, Any], subject: RuleSubject, step: int, usage: Usage
) -> dict[str, Any]:
    """What `when` reads (api/celexpr.py VARIABLES)."""
    return {
        "args": arguments,
        "agent": {"name": subject.agent, "labels": dict(subject.agent_labels)},
        "task": {"name": subject.task, "labels": dict(subject.task_labels)},
        "step": step,
        "usage": {
            "inputTokens": usage.input_tokens,
            "outputTokens": usage.output_tokens,
            "totalTokens": usage.input_tokens + usage.output_tokens,
        },
    }


Outcome = tuple[bool, str | None] | None
"""A rule's result: (matched, the evaluation error's kind; an error counts as a match), or None
when an earlier enforced Deny decided the call and the rule was not evaluated."""


def _decides(bound: BoundRule, outcome: Outcome) -> bool:
    return (
        outcome is not None
        and outcome[0]
        and bound.rule.mode == "Enforce"
        and (bound.rule.action == "Deny")
    )


def _outcomes_here(
    rules: list[BoundRule], values: dict[str, Any], budget: int | Meter
) -> list[Outcome]:
    """The rules' outcomes, evaluated in this thread (the variables converted once), up to
    the first enforced Deny that matches; with a shared Meter, also up to the first rule that
    runs out of it (its outcome and the later ones stay None)."""
    out: list[Outcome] = [None] * len(rules)
    inputs: Inputs | str
    try:
        inputs = prepare(values)
    except EvaluationError as exc:
        inputs = str(exc)  # every rule fails with it (fail closed)
    for i, bound in enumerate(rules):
        if isinstance(inputs, str):
            out[i] = (True, inputs)
        else:
            try:
                out[i] = (evaluate(bound.rule.program, inputs, budget), None)
            except EvaluationError as exc:
                if isinstance(budget, Meter) and budget.left < 0:
                    break  # the shared on-loop budget is spent: the rest goes off the loop
                out[i] = (True, str(exc))
        if _decides(bound, out[i]):
            break
    return out


async def _outcomes(rules: list[BoundRule], values: dict[str, Any]) -> list[Outcome]:
    """On the event loop within ON_LOOP_BUDGET (shared by the rules) when the input is small;
    else, or from the rule that runs out of it, off the loop (engine/offloop.py) with the full
    budget each, within RULES_SECONDS."""
    if count_values(values, ON_LOOP_VALUES) > ON_LOOP_VALUES:
        return await _off_loop(rules, values)
    here = _outcomes_here(rules, values, Meter(ON_LOOP_BUDGET))
    first = _unfinished(rules, here)
    if first is None:
        return here
    return here[:first] + await _off_loop(rules[first:], values)


def _unfinished(rules: list[BoundRule], outcomes: list[Outcome]) -> int | None:
    """The first rule left unevaluated although no Deny before it decided, if any."""
    for i, (bound, outcome) in enumerate(zip(rules, outcomes, strict=True)):
        if outcome is None:
            return i
        if _decides(bound, outcome):
            return None
    return None


async def _off_loop(rules: list[BoundRule], values: dict[str, Any]) -> list[Outcome]:
    try:
        return await _OFF_LOOP.run(lambda _stop: _outcomes_here(rules, values, EVAL_BUDGET))
    except TimeoutError:
        return [(True, "Timeout")] * len(rules)


async def check(
    gov: Governance,
    names: tuple[str, ...],
    arguments: dict[str, Any],
    subject: RuleSubject,
    step: int,
    usage: Usage,
) -> RuleVerdict:
    """Evaluate the rules that apply to a call of the tool spelled `names`, in order, until
    an enforced Deny decides (the rules after it are not evaluated, nor counted)."""
    rules = applicable(gov, names)
    if not rules:
        return RuleVerdict()
    outcomes = await _outcomes(rules, variables(arguments, subject, step, usage))
    notes: list[str] = []
    evaluations: list[RuleEvaluation] = []
    approval: ApprovalRule | None = None
    for bound, outcome in zip(rules, outcomes, strict=True):
        assert outcome is not None  # only rules after a deciding Deny are unevaluated
        matched, error = outcome
        rule = bound.rule
        result: RuleResult = "error" if error else ("matched" if matched else "notMatched")
        evaluations.append(RuleEvaluation(bound.policy, rule.name, rule.action, rule.mode, result))
        if not matched:
            continue
        why = f" (EvaluationError: {error})" if error else ""
        if rule.mode == "Audit":
            notes.append(f"ToolRuleAudit: {bound.label} would {rule.action}{why}")
        elif rule.action == "Deny":
            return RuleVerdict(
                f"ToolRuleDenied: {bound.label}{why}",
                rule.message,
                approval,
                tuple(notes),
                tuple(evaluations),
            )
        else:
            notes.append(f"ToolRuleApproval: {bound.label}{why}")
            if approval is None:
                approval = ApprovalRule(f"AgentPolicy {bound.policy} toolRule {rule.name}")
    return RuleVerdict(None, None, approval, tuple(notes), tuple(evaluations))
