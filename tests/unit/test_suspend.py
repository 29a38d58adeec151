"""AgentPolicy `suspend` and live policy (issue 16 §1): new Tasks of a suspended Agent end
`AgentSuspended` with zero model calls, a running one stops at its next step boundary, and the
run re-reads its governance at each boundary (engine/livepolicy.py), narrowing only."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ordo.cli.main import main
from ordo.engine.governance import Governance
from ordo.engine.livepolicy import PolicyUpdate, narrowed
from ordo.engine.loop import run_agent
from ordo.engine.model import ModelRequest, ModelResponse
from ordo.errors import StoreError
from ordo.runtime import execute
from ordo.runtime.resolve import ResolutionError, resolve
from support.engine_fakes import (
    DictStore,
    ModelFactory,
    ScriptedModel,
    agent,
    answer,
    call,
    mock_endpoint,
    mock_tool,
    open_governance,
    permission,
    policy,
    role,
    run_config,
    task,
    toolbox,
    tools_turn,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def store_with(*extra: dict[str, Any], tools: tuple[str, ...] = ("alpha", "beta")) -> DictStore:
    return DictStore(
        agent(tools=list(tools), labels={"tier": "intern"}),
        mock_endpoint(),
        *map(mock_tool, tools),
        *extra,
    )


def suspender(name: str = "freeze", suspend: bool = True, **spec: Any) -> dict[str, Any]:
    return policy(name, suspend=suspend, **spec)


# --------------------------------------------------------------------------------------
# New Tasks


async def test_a_suspended_agents_new_task_fails_before_any_model_call() -> None:
    store = store_with(suspender())
    with pytest.raises(ResolutionError) as info:
        await resolve(task(), store)
    assert info.value.reason == "AgentSuspended"
    assert "'freeze'" in info.value.message and "'agent'" in info.value.message
    factory = ModelFactory(lambda s: ScriptedModel([answer("no")]))
    outcome = await execute(task(), store, model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "AgentSuspended")
    assert factory.calls == 0 and outcome.status().to_dict()["step"] == 0


async def test_suspension_comes_before_every_other_check() -> None:
    # The endpoint is missing too: the kill switch is what the Task reports.
    store = DictStore(agent(modelRef="nowhere"), suspender())
    with pytest.raises(ResolutionError) as info:
        await resolve(task(), store)
    assert info.value.reason == "AgentSuspended"


async def test_only_selected_agents_are_suspended_and_unsuspending_lets_tasks_run() -> None:
    other = suspender(agentSelector={"matchLabels": {"tier": "admin"}})
    assert (await execute(task(), store_with(other))).phase == "Succeeded"
    store = store_with(suspender())
    assert (await execute(task(), store)).reason == "AgentSuspended"
    store.put(suspender(suspend=False))
    assert (await execute(task(), store)).phase == "Succeeded"


# --------------------------------------------------------------------------------------
# A running Task, through execute(): the store changes while the run is mid-way


async def test_suspending_while_the_model_thinks_stops_before_the_tool_batch() -> None:
    store = store_with()

    def suspend_now(request: ModelRequest, index: int) -> ModelResponse:
        store.put(suspender())
        return tools_turn(call("alpha", "c1"))

    factory = ModelFactory(lambda s: ScriptedModel([suspend_now, answer("late")]))
    outcome = await execute(task(), store, model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "AgentSuspended")
    assert factory.calls == 1
    status = outcome.status().to_dict()
    assert status["step"] == 1 and not status.get("toolCalls")  # alpha never ran
    assert "'freeze'" in outcome.message and "after 1 step" in outcome.message


async def test_suspending_during_a_tool_call_stops_before_the_next_model_call() -> None:
    store = store_with()

    def then_suspend(request: ModelRequest, index: int) -> ModelResponse:
        if index == 1:
            raise AssertionError("a suspended run called the model again")
        return tools_turn(call("alpha", "c1"))

    class SuspendingStore(DictStore):
        async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
            # The second re-read (before step 2) sees the policy applied during the tool call.
            if kind == "AgentPolicy":
                self.lists = getattr(self, "lists", 0) + 1
                if self.lists == 4:  # resolve, before step 1, its batch, before step 2
                    self.put(suspender())
            return await super().list(kind, namespace)

    store = SuspendingStore(*store.objects.values())
    factory = ModelFactory(lambda s: ScriptedModel([then_suspend]))
    outcome = await execute(task(), store, model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "AgentSuspended")
    assert factory.calls == 1
    (record,) = outcome.status().to_dict()["toolCalls"]
    assert (record["tool"], record["outcome"]) == ("alpha", "succeeded")


async def test_a_tool_permission_added_mid_run_applies_to_the_next_call() -> None:
    store = store_with(role("reader", "tool:alpha:invoke", "tool:beta:invoke"))
    store.put(agent(tools=["alpha", "beta"], roles=["reader"]))

    def step(request: ModelRequest, index: int) -> ModelResponse:
        if index == 0:
            return tools_turn(call("alpha", "c1"))
        store.put(permission("beta-admin", "beta", "tool:beta:admin"))
        return tools_turn(call("beta", "c2"))

    factory = ModelFactory(lambda s: ScriptedModel([step, step]))
    outcome = await execute(task(), store, model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "ToolDenied")
    records = outcome.status().to_dict()["toolCalls"]
    assert [(r["tool"], r["decision"]) for r in records] == [
        ("alpha", "allowed"),
        ("beta", "denied"),
    ]
    assert records[1]["reason"].startswith("MissingPermission: all of tool:beta:admin")


async def test_a_change_mid_run_never_widens_what_the_run_started_with() -> None:
    # At the start beta needs a permission the Agent lacks; the ToolPermission is deleted
    # mid-run, which would allow beta for a new Task — not for this one.
    store = store_with(
        role("reader", "tool:alpha:invoke"),
        permission("beta-admin", "beta", "tool:beta:admin"),
        policy("caps", maxSteps=5, onToolDenied="ReturnError"),
    )
    store.put(agent(tools=["alpha", "beta"], roles=["reader"]))

    def step(request: ModelRequest, index: int) -> ModelResponse:
        if index == 0:
            del store.objects[("ToolPermission", "default", "beta-admin")]
            store.put(role("reader", "tool:alpha:invoke", "tool:beta:invoke"))
            store.put(policy("caps", maxSteps=50, onToolDenied="ReturnError"))
            return tools_turn(call("beta", "c1"))
        return answer("done")

    factory = ModelFactory(lambda s: ScriptedModel([step, step]))
    outcome = await execute(task(), store, model_factory=factory)
    records = outcome.status().to_dict()["toolCalls"]
    assert [(r["tool"], r["decision"]) for r in records] == [("beta", "denied")]
    assert outcome.phase == "Succeeded"


async def test_policy_changes_mid_run_narrow_limits_and_on_tool_denied() -> None:
    store = store_with(policy("caps", onToolDenied="ReturnError"))

    def step(request: ModelRequest, index: int) -> ModelResponse:
        store.put(policy("caps", onToolDenied="Fail", maxSteps=1))
        return tools_turn(call("gamma", f"c{index}"))  # not a tool of the Agent: denied

    factory = ModelFactory(lambda s: ScriptedModel([step, step, step]))
    outcome = await execute(task(), store, model_factory=factory)
    # Fail now applies: the invented tool ends the run at step 1 (not an error result).
    assert (outcome.phase, outcome.reason) == ("Failed", "ToolDenied")
    assert factory.calls == 1


async def test_a_re_read_that_cannot_list_policies_fails_the_run_policy_unavailable() -> None:
    store = store_with()

    def step(request: ModelRequest, index: int) -> ModelResponse:
        store.fail_list.add("AgentPolicy")
        return tools_turn(call("alpha", "c1"))

    factory = ModelFactory(lambda s: ScriptedModel([step]))
    outcome = await execute(task(), store, model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "PolicyUnavailable")
    assert not outcome.status().to_dict().get("toolCalls")  # alpha never ran


async def test_a_re_read_that_cannot_read_permissions_denies_every_call() -> None:
    store = store_with()

    def step(request: ModelRequest, index: int) -> ModelResponse:
        store.fail_list.add("ToolPermission")
        return tools_turn(call("alpha", "c1"))

    factory = ModelFactory(lambda s: ScriptedModel([step]))
    outcome = await execute(task(), store, model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "ToolDenied")
    (record,) = outcome.status().to_dict()["toolCalls"]
    assert record["decision"] == "denied" and record["reason"].startswith("CannotDecide")


async def test_a_policy_that_no_longer_parses_mid_run_fails_closed() -> None:
    store = store_with()

    def step(request: ModelRequest, index: int) -> ModelResponse:
        store.put(policy("broken", maxSteps=0))
        return tools_turn(call("alpha", "c1"))

    factory = ModelFactory(lambda s: ScriptedModel([step]))
    outcome = await execute(task(), store, model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "PolicyUnavailable")
    assert "'broken'" in outcome.message


# --------------------------------------------------------------------------------------
# The engine hook on its own (no runtime): unit-testable, pure


async def test_the_hook_runs_before_each_model_call_and_each_tool_batch() -> None:
    seen: list[int] = []
    model = ScriptedModel([tools_turn(call("alpha", "c1")), answer("done")])

    async def refresh() -> PolicyUpdate:
        seen.append(model.calls)
        return PolicyUpdate(open_governance("alpha"))

    box = toolbox("alpha")
    config = run_config(open_governance("alpha"), policy_refresh=refresh)
    result = await run_agent(config, model, box.bindings)
    assert result.phase == "Succeeded"
    # before model call 1, before its tool batch, before model call 2
    assert seen == [0, 1, 1]


async def test_a_tool_a_re_read_blocks_is_no_longer_offered() -> None:
    model = ScriptedModel([tools_turn(call("alpha", "c1")), answer("done")])
    reads = 0

    async def refresh() -> PolicyUpdate:
        nonlocal reads
        reads += 1
        blocked = {"beta": "p"} if reads >= 2 else {}
        return PolicyUpdate(Governance(frozenset({"alpha", "beta"}), blocked_by=blocked))

    box = toolbox("alpha", "beta")
    config = run_config(open_governance("alpha", "beta"), policy_refresh=refresh)
    await run_agent(config, model, box.bindings)
    assert model.requests[0].tool_names == {"alpha", "beta"}
    assert model.requests[1].tool_names == set()  # alpha used, beta blocked


@pytest.mark.parametrize(
    ("error", "message"),
    [(StoreError("secret text"), "StoreError"), (RuntimeError("secret text"), "RuntimeError")],
)
async def test_a_hook_that_fails_ends_the_run_closed(error: Exception, message: str) -> None:
    async def refresh() -> PolicyUpdate:
        raise error

    box = toolbox("alpha")
    model = ScriptedModel([tools_turn(call("alpha", "c1"))])
    result = await run_agent(
        run_config(open_governance("alpha"), policy_refresh=refresh), model, box.bindings
    )
    assert result.phase == "Failed" and model.calls == 0 and box.total_calls == 0
    assert result.reason == "PolicyUnavailable"
    assert message in result.message and "secret text" not in result.message


async def test_suspension_on_resume_stops_before_the_pending_tool_call() -> None:
    box = toolbox("alpha")
    first = await run_agent(
        run_config(open_governance("alpha"), max_steps=1),
        ScriptedModel([tools_turn(call("alpha", "c1"))]),
        box.bindings,
    )
    assert first.reason == "MaxStepsExceeded" and box.calls("alpha") == 1

    async def suspended() -> PolicyUpdate:
        return PolicyUpdate(open_governance("alpha"), suspended_by="freeze")

    model = ScriptedModel([answer("no")])
    result = await run_agent(
        run_config(open_governance("alpha"), policy_refresh=suspended),
        model,
        box.bindings,
        state=first.state,
    )
    assert (result.phase, result.reason) == ("Failed", "AgentSuspended")
    assert model.calls == 0


limits = st.one_of(st.none(), st.integers(1, 100))


@settings(max_examples=300, deadline=None)
@given(
    steps=st.integers(1, 100),
    budget=limits,
    mode=st.sampled_from(["Fail", "ReturnError"]),
    new_steps=limits,
    new_budget=limits,
    new_mode=st.sampled_from([None, "Fail", "ReturnError"]),
)
def test_applying_an_update_only_narrows(
    steps: int,
    budget: int | None,
    mode: Any,
    new_steps: int | None,
    new_budget: int | None,
    new_mode: Any,
) -> None:
    config = run_config(
        open_governance("alpha"), max_steps=steps, token_budget=budget, on_tool_denied=mode
    )
    update = PolicyUpdate(
        open_governance("alpha", "beta"),
        max_steps=new_steps,
        token_budget=new_budget,
        on_tool_denied=new_mode,
    )
    out = narrowed(config, update)
    assert out.max_steps == min(steps, new_steps or steps)
    assert out.token_budget is not None or (budget is None and new_budget is None)
    if budget is not None:
        assert out.token_budget is not None and out.token_budget <= budget
    if new_budget is not None:
        assert out.token_budget is not None and out.token_budget <= new_budget
    assert out.on_tool_denied == ("Fail" if "Fail" in (mode, new_mode) else "ReturnError")
    assert not out.governance.decide("beta").allowed  # the update's extra tool is not added


# --------------------------------------------------------------------------------------
# `ordo run`: the same from manifest files


def test_ordo_run_applies_suspend_and_allowed_tools_from_manifests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(EXAMPLES / "governance", tmp_path / "gov")
    (tmp_path / "gov" / "bindings.yaml").write_text(
        textwrap.dedent(
            """\
            apiVersion: ordo.dev/v1alpha1
            kind: AgentPolicy
            metadata: {name: freeze-interns}
            spec:
              agentSelector: {matchLabels: {policy.ordo.dev/tier: intern}}
              suspend: true
            ---
            apiVersion: ordo.dev/v1alpha1
            kind: AgentPolicy
            metadata: {name: reads-only}
            spec:
              allowedTools: [read-records]
            """
        )
    )
    assert main(["run", "-q", "-o", "json", "-f", str(tmp_path / "gov")]) == 1
    out = capsys.readouterr().out
    docs = json.loads(out) if out.lstrip().startswith("[") else [json.loads(out)]
    status = {d["metadata"]["name"]: d["status"] for d in docs}
    intern, auditor = status["intern-cleanup"], status["auditor-cleanup"]
    assert (intern["reason"], intern["step"]) == ("AgentSuspended", 0)
    assert "'freeze-interns'" in intern["message"]
    # The auditor lists delete-records, outside reads-only's allowlist: no model call.
    assert (auditor["reason"], auditor["step"]) == ("ToolDenied", 0)
    assert "'reads-only'" in auditor["message"] and not auditor.get("toolCalls")
