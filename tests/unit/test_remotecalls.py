"""An `a2a` Tool call in the engine (engine/remotecalls.py), against an in-memory remote agent:
the call is checkpointed as started before the send and the remote task id right after it,
before the run waits; a run resumed from that checkpoint polls the task and never sends
again; the Tool's timeout cancels the remote task; a Task at its delegation depth limit sends
nothing; the chain of Agents goes with the message."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ordo.engine.delegation import Lineage
from ordo.engine.events import Checkpoint, Event
from ordo.engine.loop import run_agent
from ordo.engine.remote import RemoteTarget, RemoteTask
from ordo.engine.state import RunState
from ordo.engine.tooling import ToolBinding, ToolOutput
from support.engine_fakes import (
    ScriptedModel,
    call,
    open_governance,
    result_for,
    run_config,
    tools_turn,
)


class FakeRemote:
    """A remote agent whose tasks end when the test says so (`finish`)."""

    def __init__(self, checkpoints: list[RunState] | None = None) -> None:
        self.sent: list[tuple[str, Any, tuple[str, ...], int]] = []
        self.gets: list[str] = []
        self.cancels: list[str] = []
        self.done: dict[str, RemoteTask] = {}
        self._checkpoints = checkpoints if checkpoints is not None else []

    def finish(self, task_id: str, state: str = "completed", text: str = "remote answer") -> None:
        self.done[task_id] = RemoteTask(task_id, state, text)

    async def send(self, key: str, message: Any, chain: tuple[str, ...]) -> RemoteTask:
        self.sent.append((key, message, chain, len(self._checkpoints)))
        return RemoteTask(f"task-{key}", "submitted")

    async def get(self, task_id: str) -> RemoteTask:
        self.gets.append(task_id)
        return self.done.get(task_id, RemoteTask(task_id, "working"))

    async def cancel(self, task_id: str) -> None:
        self.cancels.append(task_id)


async def _unused(arguments: dict[str, object]) -> ToolOutput:
    raise AssertionError("an a2a Tool's executor is never called")


def remote_tool(remote: FakeRemote, timeout: float = 60.0) -> ToolBinding:
    schema = {"type": "object", "properties": {"input": {"type": "string"}}}
    return ToolBinding(
        "ask_remote",
        "ask_remote",
        "ask",
        schema,
        _unused,
        timeout=timeout,
        remote=RemoteTarget(remote),
    )


def config(**kw: Any) -> Any:
    kw.setdefault("lineage", Lineage("root", ("boss",)))
    return run_config(open_governance("ask_remote"), **kw)


def recorder(checkpoints: list[RunState]) -> Any:
    async def listen(event: Event) -> None:
        if isinstance(event, Checkpoint):
            checkpoints.append(RunState.from_dict(json.loads(json.dumps(event.state.to_dict()))))

    return listen


async def die_while_waiting(
    cfg: Any, model: ScriptedModel, remote: FakeRemote, checkpoints: list[RunState]
) -> None:
    """Run until the call waits for its remote task, then stop the run as a crash would (its
    checkpoints are in `checkpoints`)."""
    running = asyncio.ensure_future(
        run_agent(cfg, model, [remote_tool(remote)], listeners=[recorder(checkpoints)])
    )
    while not remote.gets:
        await asyncio.sleep(0.01)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)


async def test_the_call_is_durable_before_the_send_and_the_task_id_before_the_wait() -> None:
    checkpoints: list[RunState] = []
    remote = FakeRemote(checkpoints)
    remote.finish("task-c1")
    model = ScriptedModel([tools_turn(call("ask_remote", "c1", input="hello"))])
    result = await run_agent(
        config(), model, [remote_tool(remote)], listeners=[recorder(checkpoints)]
    )
    assert (result.phase, result.reason) == ("Succeeded", "Succeeded")
    assert result_for(result.state, "c1").content == "remote answer"
    [(key, message, chain, seen)] = remote.sent
    assert (key, message, chain) == ("c1", "hello", ("boss",))
    assert seen == 1  # one checkpoint before the send ...
    assert "c1" in checkpoints[0].started_calls
    assert checkpoints[0].remote_tasks["c1"].task_id == ""  # recorded, not sent yet
    assert checkpoints[1].remote_tasks["c1"].task_id == "task-c1"  # ... and one before the wait
    assert remote.gets == ["task-c1"]


async def test_a_resumed_run_polls_the_recorded_task_and_never_sends_again() -> None:
    checkpoints: list[RunState] = []
    first = FakeRemote(checkpoints)
    model = ScriptedModel([tools_turn(call("ask_remote", "c1", input="hello"))])
    await die_while_waiting(config(), model, first, checkpoints)
    assert first.cancels == []  # not the deadline: the remote task keeps running
    second = FakeRemote()
    second.finish("task-c1", text="answer after the restart")
    resumed = await run_agent(
        config(),
        ScriptedModel([]),
        [remote_tool(second)],
        state=checkpoints[-1],
        fresh=False,
    )
    assert resumed.phase == "Succeeded"
    assert second.sent == []
    assert second.gets == ["task-c1"]
    assert result_for(resumed.state, "c1").content == "answer after the restart"
    assert len(first.sent) == 1


async def test_the_tools_timeout_cancels_the_remote_task() -> None:
    remote = FakeRemote()
    model = ScriptedModel([tools_turn(call("ask_remote", "c1", input="slow"))])
    result = await run_agent(config(), model, [remote_tool(remote, timeout=0.3)])
    seen = result_for(result.state, "c1")
    assert seen.is_error and "did not finish within 0.3s" in seen.content
    assert remote.cancels == ["task-c1"]
    assert result.tool_calls[0].error == "Timeout"


async def test_a_remote_failure_is_an_error_result_naming_the_state() -> None:
    remote = FakeRemote()
    remote.finish("task-c1", state="failed", text="out of paper")
    model = ScriptedModel([tools_turn(call("ask_remote", "c1", input="print"))])
    result = await run_agent(config(), model, [remote_tool(remote)])
    seen = result_for(result.state, "c1")
    assert seen.is_error and "ended failed: out of paper" in seen.content
    assert result.tool_calls[0].error == "Remote failed"


async def test_a_task_asking_for_input_is_an_error_and_is_cancelled() -> None:
    remote = FakeRemote()
    remote.finish("task-c1", state="input-required", text="which printer?")
    model = ScriptedModel([tools_turn(call("ask_remote", "c1", input="print"))])
    result = await run_agent(config(), model, [remote_tool(remote)])
    assert result_for(result.state, "c1").is_error
    assert remote.cancels == ["task-c1"]


async def test_a_task_at_the_depth_limit_sends_nothing() -> None:
    remote = FakeRemote()
    model = ScriptedModel([tools_turn(call("ask_remote", "c1", input="hello"))])
    deep = Lineage("root", ("a", "b", "boss"))
    result = await run_agent(
        config(lineage=deep, max_delegation_depth=2), model, [remote_tool(remote)]
    )
    assert remote.sent == []
    assert result.tool_calls[0].error == "DelegationDepthExceeded"
    assert "delegation depth 2, the limit is 2" in result_for(result.state, "c1").content


async def test_a_run_resumed_before_the_task_id_was_recorded_sends_under_the_same_key() -> None:
    checkpoints: list[RunState] = []
    first = FakeRemote(checkpoints)
    model = ScriptedModel([tools_turn(call("ask_remote", "c1", input="hello"))])
    await die_while_waiting(config(), model, first, checkpoints)
    before_send = checkpoints[0]  # the process died between the send and the next write
    second = FakeRemote()
    second.finish("task-c1")
    resumed = await run_agent(
        config(), ScriptedModel([]), [remote_tool(second)], state=before_send, fresh=False
    )
    assert resumed.phase == "Succeeded"
    assert [s[0] for s in second.sent] == ["c1"]  # the same key: the same message id
    assert resumed.tool_calls[0].reason == before_send.remote_tasks["c1"].decided


async def test_an_approved_call_is_not_asked_again_after_a_restart_and_keeps_its_approval() -> None:
    from ordo.engine.approvals import ApprovalDecision, ApprovalRule, PendingApproval
    from ordo.engine.governance import Governance

    asked: list[str] = []

    async def decider(
        pending: PendingApproval, arguments: dict[str, object]
    ) -> list[ApprovalDecision]:
        asked.append(pending.call_id)
        return [ApprovalDecision("Approve", "alice", approver="alice")]

    gov = Governance(
        candidate_tools=frozenset({"ask_remote"}),
        approvals={"ask_remote": ApprovalRule("Tool ask_remote")},
    )
    cfg = run_config(gov, lineage=Lineage("root", ("boss",)), approval_decider=decider)
    checkpoints: list[RunState] = []
    first = FakeRemote(checkpoints)
    model = ScriptedModel([tools_turn(call("ask_remote", "c1", input="deploy"))])
    await die_while_waiting(cfg, model, first, checkpoints)
    assert asked == ["c1"] and len(first.sent) == 1
    second = FakeRemote()
    second.finish("task-c1")
    done = await run_agent(
        cfg, ScriptedModel([]), [remote_tool(second)], state=checkpoints[-1], fresh=False
    )
    assert done.phase == "Succeeded"
    assert asked == ["c1"]  # not asked again: the call was sent
    assert second.sent == []
    record = done.tool_calls[0]
    assert (record.reason, record.approved_by) == ("Approved: alice", ("alice",))


async def test_a_cancel_request_ends_the_wait_and_cancels_the_remote_task() -> None:
    remote = FakeRemote()
    cancel = asyncio.Event()
    model = ScriptedModel([tools_turn(call("ask_remote", "c1", input="slow"))])
    running = asyncio.ensure_future(
        run_agent(config(), model, [remote_tool(remote)], cancel=cancel)
    )
    while not remote.gets:
        await asyncio.sleep(0.01)
    cancel.set()
    result = await running
    assert (result.phase, result.reason) == ("Cancelled", "Cancelled")
    assert remote.cancels == ["task-c1"]
    assert result.tool_calls[0].error == "Cancelled"
