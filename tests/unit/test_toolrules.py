"""AgentPolicy toolRules (issue 26 §6): CEL compiled when the policy is read (errors, limits,
unknown names), evaluated within a budget, and applied by the loop after governance and before
approvals: Deny, RequireApproval, Audit, and fail-closed evaluation errors."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from ordo.api import Agent, AgentPolicy
from ordo.api.celexpr import (
    MAX_EXPRESSION_CHARS,
    MAX_INPUT_VALUES,
    CelError,
    EvaluationError,
    compile_expression,
    count_values,
    evaluate,
)
from ordo.engine.approvals import ApprovalDecision, ApprovalRule, PendingApproval
from ordo.engine.events import Event, ToolRuleEvaluated
from ordo.engine.governance import BoundRule, Governance
from ordo.engine.loop import run_agent
from ordo.engine.state import RunState
from ordo.engine.toolrules import ON_LOOP_BUDGET, ON_LOOP_VALUES, RuleSubject, check
from ordo.engine.transcript import Usage
from ordo.errors import PolicyUnavailable
from ordo.runtime.policies import selecting_policies, tool_rules
from ordo.runtime.resolve import resolve
from support.engine_fakes import (
    DictStore,
    ScriptedModel,
    agent,
    answer,
    call,
    mock_endpoint,
    mock_tool,
    policy,
    result_for,
    run_config,
    task,
    toolbox,
    tools_turn,
)

# --------------------------------------------------------------------------------------
# The expression language: compile-time checks


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("args.amount >", "does not parse"),
        ("argz.amount > 1", "unknown variable 'argz'"),
        ("lower(args.x) == 'a'", "unknown function lower()"),
        ("args.x.lowerAscii() == 'a'", "unknown function .lowerAscii()"),
        ("args.l.all(x, args.l.all(y, args.l.all(z, x == y)))", "nest more than 2"),
        ("(" * 40 + "true" + ")" * 40, "nests too deeply"),
        ("x.all(x, true)", "unknown variable 'x'"),
        ("Msg{a: 1}", "message construction"),
        (".args.a", "root-scoped"),
        ("a" * (MAX_EXPRESSION_CHARS + 1), "longer than"),
    ],
)
def test_an_expression_that_cannot_be_used_does_not_compile(source: str, problem: str) -> None:
    with pytest.raises(CelError, match=problem):
        compile_expression(source)


def test_too_many_parse_nodes_do_not_compile() -> None:
    with pytest.raises(CelError, match="too large"):
        compile_expression("size([" + "1," * 400 + "1]) > 0")


VARS: dict[str, Any] = {
    "args": {"amount": 150, "note": "hello", "items": [1, 2, 3], "ratio": 0.5},
    "agent": {"name": "payer", "labels": {"team": "finance"}},
    "task": {"name": "t1", "labels": {}},
    "step": 2,
    "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
}


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("args.amount > 100", True),
        ("args.amount > 1000", False),
        ("has(args.currency)", False),
        ("args.note.startsWith('he') && args.note.matches('^h.*o$')", True),
        ("args.items.exists(i, i == 3) && size(args.items) == 3", True),
        ("args.items.all(i, args.items.exists(j, j >= i))", True),
        ("agent.labels['team'] == 'finance' && step == 2 && usage.totalTokens < 100", True),
        ("double(args.amount) > 100.5 && args.ratio < 1.0", True),
        ("'amount' in args", True),
    ],
)
def test_expressions_evaluate_over_the_call(source: str, value: bool) -> None:
    assert evaluate(compile_expression(source), VARS) is value


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("args.currency == 'EUR'", "NoSuchField"),
        ("args.note > 100", "NoMatchingOverload"),
        ("args.amount", "NotABool"),
        ("args.amount / 0 == 1", "DivisionByZero"),
        ("'a' * 3 == 'aaa'", "NoMatchingOverload"),  # CEL has no string repetition
    ],
)
def test_evaluation_errors_name_their_kind_never_a_value(source: str, kind: str) -> None:
    with pytest.raises(EvaluationError) as info:
        evaluate(compile_expression(source), VARS)
    assert str(info.value) == kind


def test_the_budget_stops_a_quadratic_rule() -> None:
    program = compile_expression("args.l.exists(x, args.l.exists(y, x == y + 100000))")
    with pytest.raises(EvaluationError, match="CostLimitExceeded"):
        evaluate(program, {"args": {"l": list(range(2000))}})
    # the same rule on small arguments is fine
    assert evaluate(program, {"args": {"l": list(range(10))}}) is False


def test_built_strings_are_charged_by_size() -> None:
    program = compile_expression("args.l.map(x, args.s + args.s).size() > 0")
    with pytest.raises(EvaluationError, match="CostLimitExceeded"):
        evaluate(program, {"args": {"l": list(range(500)), "s": "a" * 500_000}})


def test_arguments_with_too_many_values_are_an_error() -> None:
    program = compile_expression("size(args.l) > 0")
    with pytest.raises(EvaluationError, match="ArgumentsTooLarge"):
        evaluate(program, {"args": {"l": [0] * MAX_INPUT_VALUES}})


def deepest_allowed() -> str:
    """The most nested parentheses the depth limit lets compile."""
    n = 0
    while True:
        try:
            compile_expression("(" * (n + 1) + "args.a == 1" + ")" * (n + 1))
        except CelError:
            return "(" * n + "args.a == 1" + ")" * n
        n += 1


def test_the_deepest_rule_evaluates_under_the_default_recursion_limit() -> None:
    assert sys.getrecursionlimit() != 2500  # celpy's own setting was undone on import
    program = compile_expression(deepest_allowed())

    def nested(frames: int) -> bool:  # the engine's own stack below the evaluation
        return nested(frames - 1) if frames else evaluate(program, {"args": {"a": 1}})

    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # Python's default
    try:
        assert nested(300) is True
    finally:
        sys.setrecursionlimit(before)


def test_matches_is_linear_time_re2() -> None:
    # a pattern that backtracks exponentially in Python's re; RE2 answers at once
    program = compile_expression("args.s.matches('^(a+)+$')")
    assert evaluate(program, {"args": {"s": "a" * 5000 + "b"}}) is False


# --------------------------------------------------------------------------------------
# The policy: compiled when read, fail closed


def rule(name: str, when: str, action: str = "Deny", **kw: Any) -> dict[str, Any]:
    return {"name": name, "tools": kw.pop("tools", ["pay"]), "when": when, "action": action, **kw}


def test_a_rule_that_does_not_compile_makes_the_policy_invalid() -> None:
    body = policy("limits", toolRules=[rule("big", "args.amount >")])
    with pytest.raises(ValueError, match="toolRule 'big': when: does not parse"):
        AgentPolicy.model_validate(body)


def test_rule_names_are_unique_in_a_policy() -> None:
    body = policy("limits", toolRules=[rule("big", "true"), rule("big", "false")])
    with pytest.raises(ValueError, match="big"):
        AgentPolicy.model_validate(body)


async def test_an_uncompilable_rule_fails_the_run_policy_unavailable() -> None:
    store = DictStore(
        agent(tools=["pay"]), policy("limits", toolRules=[rule("big", "argz.amount > 1")])
    )
    with pytest.raises(PolicyUnavailable, match=r"toolRule 'big'.*unknown variable 'argz'"):
        await selecting_policies(store, Agent.model_validate(agent(tools=["pay"])))


# --------------------------------------------------------------------------------------
# Decisions on one call


def governed(*rules: dict[str, Any], within: Governance | None = None) -> Governance:
    parsed = AgentPolicy.model_validate(policy("limits", toolRules=list(rules)))
    return Governance(
        candidate_tools=frozenset({"pay", "read"}), tool_rules=tool_rules([parsed]), within=within
    )


async def decide(gov: Governance, amount: Any, tool: str = "pay") -> Any:
    return await check(gov, (tool,), {"amount": amount}, RuleSubject(), 1, Usage())


async def test_deny_denies_only_when_the_expression_holds() -> None:
    gov = governed(rule("big", "args.amount > 100"))
    assert (await decide(gov, 500)).denied == "ToolRuleDenied: limits/big"
    assert (await decide(gov, 50)).denied is None
    assert (await decide(gov, 500, tool="read")).evaluations == ()  # not a tool of the rule


async def test_an_erroring_deny_rule_denies() -> None:
    verdict = await decide(governed(rule("big", "args.amount > 100")), "lots")
    assert verdict.denied == "ToolRuleDenied: limits/big (EvaluationError: NoMatchingOverload)"
    assert verdict.evaluations[0].result == "error"


async def test_require_approval_and_its_error_both_require_approval() -> None:
    gov = governed(rule("big", "args.amount > 100", "RequireApproval"))
    assert (await decide(gov, 500)).approval == ApprovalRule("AgentPolicy limits toolRule big")
    assert (await decide(gov, 500)).notes == ("ToolRuleApproval: limits/big",)
    assert (await decide(gov, 50)).approval is None
    assert (await decide(gov, None)).approval is not None  # null > 100: an error, fail closed


async def test_audit_only_notes() -> None:
    gov = governed(rule("big", "args.amount > 100", mode="Audit"))
    verdict = await decide(gov, 500)
    assert verdict.denied is None and verdict.approval is None
    assert verdict.notes == ("ToolRuleAudit: limits/big would Deny",)
    assert (await decide(gov, "x")).notes == (
        "ToolRuleAudit: limits/big would Deny (EvaluationError: NoMatchingOverload)",
    )


async def test_rules_of_the_start_time_governance_still_apply_after_a_re_read() -> None:
    start = governed(rule("big", "args.amount > 100"))
    fresh = Governance(candidate_tools=frozenset({"pay"}), within=start)
    assert (await decide(fresh, 500)).denied == "ToolRuleDenied: limits/big"


async def test_memory_tools_are_named_as_in_blocked_tools() -> None:
    gov = governed(rule("no-secrets", "args.key.startsWith('secret')", tools=["memory.write"]))
    verdict = await check(
        gov, ("memory.write", "memory_write"), {"key": "secret/x"}, RuleSubject(), 1, Usage()
    )
    assert verdict.denied == "ToolRuleDenied: limits/no-secrets"


async def test_the_rule_sees_the_agent_and_the_task() -> None:
    gov = governed(rule("team", "'team' in agent.labels && task.name == 't'"))
    subject = RuleSubject("a", {"team": "ops"}, "t", {})
    assert (await check(gov, ("pay",), {}, subject, 1, Usage())).denied is not None
    assert (
        await check(gov, ("pay",), {}, RuleSubject("a", {}, "t", {}), 1, Usage())
    ).denied is None


async def test_a_rule_over_the_on_loop_budget_is_evaluated_off_the_loop_in_full() -> None:
    # 200 items cost about 3,400 units: over ON_LOOP_BUDGET, within EVAL_BUDGET
    gov = governed(rule("all-positive", "args.l.all(x, x >= 0)"))
    items = list(range(200))
    assert count_values({"l": items}) <= ON_LOOP_VALUES
    with pytest.raises(EvaluationError, match="CostLimitExceeded"):
        evaluate(gov.tool_rules[0].rule.program, {"args": {"l": items}}, ON_LOOP_BUDGET)
    verdict = await check(gov, ("pay",), {"l": items}, RuleSubject(), 1, Usage())
    assert verdict.denied == "ToolRuleDenied: limits/all-positive"  # matched, not an error
    assert verdict.evaluations[0].result == "matched"


async def test_rules_share_the_on_loop_budget_and_the_rest_finish_off_the_loop() -> None:
    # each rule costs a few hundred units: together over ON_LOOP_BUDGET
    rules = [rule(f"r{i}", f"args.l.exists(x, x == {i})", mode="Audit") for i in range(6)]
    gov = governed(*rules)
    verdict = await check(gov, ("pay",), {"l": list(range(3, 40))}, RuleSubject(), 1, Usage())
    assert [e.result for e in verdict.evaluations] == ["notMatched"] * 3 + ["matched"] * 3


async def test_large_arguments_are_evaluated_off_the_loop() -> None:
    gov = governed(rule("many", "size(args.l) > 600"), rule("any-7", "7 in args.l", mode="Audit"))
    verdict = await check(gov, ("pay",), {"l": list(range(1000))}, RuleSubject(), 1, Usage())
    assert [e.result for e in verdict.evaluations] == ["matched"]  # the Deny decided
    assert verdict.denied == "ToolRuleDenied: limits/many"
    verdict = await check(gov, ("pay",), {"l": list(range(500))}, RuleSubject(), 1, Usage())
    assert verdict.notes == ("ToolRuleAudit: limits/any-7 would Deny",)


# --------------------------------------------------------------------------------------
# The loop


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)


async def test_a_deny_and_an_allow_of_the_same_tool_in_one_run() -> None:
    gov = governed(
        rule("big", "args.amount > 100", message="payments over 100 need a person"),
        rule("watch", "args.amount > 10", mode="Audit"),
    )
    box = toolbox("pay")
    model = ScriptedModel(
        [
            tools_turn(call("pay", "c1", amount=500)),
            tools_turn(call("pay", "c2", amount=50)),
            answer("paid 50"),
        ]
    )
    events = Recorder()
    result = await run_agent(
        run_config(gov, on_tool_denied="ReturnError"), model, box.bindings, listeners=[events]
    )
    assert (result.phase, result.output) == ("Succeeded", "paid 50")
    assert box.executors["pay"].seen == [{"amount": 50}]
    first, second = result.tool_calls
    assert (first.decision, first.reason, first.outcome) == (
        "denied",
        "ToolRuleDenied: limits/big",  # the first enforced Deny decides; later rules not run
        "skipped",
    )
    assert "payments over 100 need a person" in result_for(result.state, "c1").content
    assert (second.decision, second.outcome) == ("allowed", "succeeded")
    assert second.reason == "NoPermissionRequired; ToolRuleAudit: limits/watch would Deny"
    evaluated = [e for e in events.events if isinstance(e, ToolRuleEvaluated)]
    assert [(e.rule, e.result) for e in evaluated] == [
        ("big", "matched"),
        ("big", "notMatched"),
        ("watch", "matched"),
    ]


async def test_a_rule_denial_fails_the_task_tool_denied() -> None:
    box = toolbox("pay")
    model = ScriptedModel([tools_turn(call("pay", "c1", amount=500))])
    result = await run_agent(
        run_config(governed(rule("big", "args.amount > 100"))), model, box.bindings
    )
    assert (result.phase, result.reason) == ("Failed", "ToolDenied")
    assert result.tool_calls[0].reason == "ToolRuleDenied: limits/big"
    assert box.calls("pay") == 0


class Decider:
    def __init__(self, verdict: str) -> None:
        self.verdict = verdict
        self.asked: list[PendingApproval] = []

    async def __call__(
        self, p: PendingApproval, arguments: dict[str, Any]
    ) -> list[ApprovalDecision]:
        self.asked.append(p)
        return [ApprovalDecision(self.verdict, "alice")]  # type: ignore[arg-type]


async def test_require_approval_feeds_the_approval_machinery_for_that_call_only() -> None:
    gov = governed(rule("big", "args.amount > 100", "RequireApproval"))
    box = toolbox("pay")
    model = ScriptedModel([tools_turn(call("pay", "c1", amount=500))])
    first = await run_agent(run_config(gov), model, box.bindings)
    assert first.phase == "AwaitingApproval" and box.calls("pay") == 0
    assert first.state.approvals["c1"].required_by == "AgentPolicy limits toolRule big"
    restored = RunState.from_dict(first.state.to_dict())
    decider = Decider("Approve")
    second = await run_agent(
        run_config(gov, approval_decider=decider),
        ScriptedModel([answer("done")]),
        box.bindings,
        state=restored,
    )
    assert second.phase == "Succeeded" and box.calls("pay") == 1
    assert second.tool_calls[0].reason == "Approved: alice; ToolRuleApproval: limits/big"
    # a small payment needs no approval
    small = await run_agent(
        run_config(gov),
        ScriptedModel([tools_turn(call("pay", "c9", amount=5)), answer("ok")]),
        toolbox("pay").bindings,
    )
    assert small.phase == "Succeeded" and not small.state.approvals


async def test_ordo_resolution_carries_the_rules_and_the_subject() -> None:
    store = DictStore(
        agent(tools=["pay"]),
        mock_endpoint(),
        mock_tool("pay"),
        policy("limits", toolRules=[rule("big", "args.amount > 100")]),
    )
    snapshot = await resolve(task(), store)
    assert [b.label for b in snapshot.governance.tool_rules] == ["limits/big"]
    assert isinstance(snapshot.governance.tool_rules[0], BoundRule)
