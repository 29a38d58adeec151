"""How the step loop runs a call of an `a2a` Tool (docs/a2a.md#calling-remote-agents): the
call was screened, guarded and approved like any other (engine/toolsteps.py); here it becomes
one task of the remote agent, sent exactly once and waited for INLINE.

Exactly once across a crash of the run:
- The call is recorded (started, and in `RunState.remote_tasks` with its decision and
  approvers) and checkpointed (written at once: the call has no result yet) before anything
  is sent, so a resumed run asks under the same call id, and is not screened, guarded or
  approved again (engine/toolsteps.py): the record keeps the decision that let it be sent.
- The message id derives from the Task and the call id (the `RemoteAgent` does that), so a
  resumed run that re-sends (it died between the send and the next checkpoint) sends the SAME
  message: a server that dedupes by message id dedupes.
- The remote task id the send returns is added to that record and checkpointed
  at once, before the run waits for it; a resumed run that finds it polls that task (GetTask)
  and never sends again.

The run waits for the remote task inside the call, holding its slot: unlike a child Task,
nothing in the cluster changes when it ends, so there is no watch event that could wake a
parked run (docs/decisions.md). The wait ends at the call's own limit (the Tool's `timeout`
from the send, kept across resumes in the record) or the run's deadline, whichever is first;
either cancels the remote task (CancelTask); so does a cancel request of the Task (spec.cancel,
the Task deleted): the call ends with an error result and the run ends `Cancelled` at the
next step. A run stopped for any other reason (the operator
shutting down, the lease lost) leaves the remote task running: the resumed run polls it.

A Task at its delegation depth limit does not send (`DelegationDepthExceeded`); the chain of
Agents travels in the message metadata (`ordo.dev/delegation-chain`), so a server that is an
ordo gateway counts the depth across A2A and finds cycles.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import replace

from ..errors import LeaseLost
from .delegating import finish_call
from .events import Checkpoint, Listener
from .remote import ASKING_STATES, RemoteAgent, RemoteRecord, RemoteTarget, RemoteTask
from .screening import Screened
from .state import RunConfig, RunState, ToolCallRecord
from .tooling import MAX_CAUSE_CHARS, failure_cause
from .transcript import ToolCall, ToolResult

__all__ = ["call_remote"]

POLL_FIRST = 0.2
POLL_MAX = 2.0
CANCEL_SECONDS = 5.0
"""How long cancelling a remote task may take at most (the run is ending)."""


def _message(call: ToolCall, target: RemoteTarget) -> str:
    arguments = call.arguments or {}
    if target.whole_arguments:
        return json.dumps(arguments, ensure_ascii=False)
    value = arguments.get("input", "")
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _answer(task: RemoteTask) -> tuple[str, bool, str | None]:
    if task.state == "completed":
        return task.text, False, None
    told = f": {task.text}" if task.text else ""
    text = f"error: the remote agent's task ended {task.state}{told}"
    return text, True, f"Remote {task.state}"[:MAX_CAUSE_CHARS]


async def _cancel(agent: RemoteAgent, task_id: str) -> None:
    """Cancel the remote task, within CANCEL_SECONDS, whatever happens (best effort)."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CANCEL_SECONDS):
            await agent.cancel(task_id)


async def _wait(
    agent: RemoteAgent,
    task: RemoteTask,
    until: float,
    config: RunConfig,
    cancel: asyncio.Event | None,
) -> RemoteTask | None:
    """`task` once it ended, polled with GetTask; None when `until` (epoch) or a cancel
    request came first."""
    pause = POLL_FIRST
    while not task.ended:
        left = until - config.clock()
        if left <= 0:
            return None
        if cancel is None:
            await asyncio.sleep(min(pause, left))
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(pause, left)):
                    await cancel.wait()
            if cancel.is_set():
                return None
        pause = min(pause * 2, POLL_MAX)
        task = await agent.get(task.id)
    return task


async def call_remote(
    call: ToolCall,
    screened: Screened,
    config: RunConfig,
    state: RunState,
    emit: Listener,
    *,
    deadline: float | None,
    cancel: asyncio.Event | None = None,
) -> tuple[ToolCallRecord, ToolResult]:
    """Send (or find again) the remote task of one allowed `a2a` call and wait for it: its
    record and result. `deadline` (time.monotonic()) is the run's; `cancel` set (a cancel
    request) ends the wait and cancels the remote task."""
    binding = screened.binding
    assert binding is not None and binding.remote is not None
    agent = binding.remote.agent
    started = time.monotonic()
    known = state.remote_tasks.get(call.id)
    if known is not None:  # decided before it was sent: keep that decision's record
        record = replace(screened.record, reason=known.decided, approved_by=known.approved_by)
        screened = replace(screened, record=record)
    else:
        depth, limit = config.lineage.depth, config.max_delegation_depth
        if depth >= limit:  # refused before anything is sent, as a child Task would be
            text = f"error: this Task is at delegation depth {depth}, the limit is {limit}"
            answer = (text, True, "DelegationDepthExceeded")
            return await finish_call(call, screened, state, emit, started, answer)
        decided = screened.record
        known = RemoteRecord(call.id, decided=decided.reason, approved_by=decided.approved_by)
        state.remote_tasks[call.id] = known
        state.started_calls.add(call.id)
        await emit(Checkpoint(state))  # durable before anything is sent
    task: RemoteTask | None = None
    try:
        if not known.task_id:  # not sent, or sent without the answer recorded: same message id
            task = await agent.send(call.id, _message(call, binding.remote), config.lineage.chain)
            if not task.id:  # the agent answered with a message: no task to wait for
                return await finish_call(call, screened, state, emit, started, _answer(task))
            until = config.clock() + (binding.timeout or 0.0)
            known = replace(known, task_id=task.id, until=until)
            state.remote_tasks[call.id] = known
            await emit(Checkpoint(state))  # durable before the run waits for it
        else:
            task = await agent.get(known.task_id)
        ended = await _wait(agent, task, known.until, config, cancel)
    except LeaseLost:
        raise
    except asyncio.CancelledError:
        if known.task_id and deadline is not None and time.monotonic() >= deadline:
            await _cancel(agent, known.task_id)  # the run's deadline: the remote task too
        raise
    except Exception as exc:  # a transport or protocol failure: the model sees its kind
        cause = failure_cause(exc)
        text = f"error: the remote agent could not be reached ({cause})"
        return await finish_call(call, screened, state, emit, started, (text, True, cause))
    if ended is None and cancel is not None and cancel.is_set():
        await _cancel(agent, known.task_id)
        text = "error: the Task was cancelled, and so was the remote agent's task"
        return await finish_call(call, screened, state, emit, started, (text, True, "Cancelled"))
    if ended is None:
        await _cancel(agent, known.task_id)
        text = (
            f"error: the remote agent did not finish within {binding.timeout or 0:g}s (cancelled)"
        )
        return await finish_call(call, screened, state, emit, started, (text, True, "Timeout"))
    if ended.state in ASKING_STATES:
        await _cancel(agent, ended.id)
    return await finish_call(call, screened, state, emit, started, _answer(ended))
