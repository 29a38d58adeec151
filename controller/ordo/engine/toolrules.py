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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..api.celexpr import EvaluationError, evaluate
from .governance import ApprovalRule, BoundRule, Governance
from .transcript import Usage

__all__ = ["RuleEvaluation", "RuleSubject", "RuleVerdict", "applicable", "check"]

RuleResult = Literal["matched", "notMatched", "error"]


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


def check(
    gov: Governance,
    names: tuple[str, ...],
    arguments: dict[str, Any],
    subject: RuleSubject,
    step: int,
    usage: Usage,
) -> RuleVerdict:
    """Evaluate the rules that apply to a call of the tool spelled `names`."""
    rules = applicable(gov, names)
    if not rules:
        return RuleVerdict()
    values = variables(arguments, subject, step, usage)
    notes: list[str] = []
    evaluations: list[RuleEvaluation] = []
    approval: ApprovalRule | None = None
    for bound in rules:
        rule = bound.rule
        error: str | None = None
        try:
            matched = evaluate(rule.program, values)
        except EvaluationError as exc:
            matched, error = True, str(exc)  # fail closed: an error counts as a match
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
