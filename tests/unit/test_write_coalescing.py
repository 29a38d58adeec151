"""Coalesced run writes (operator/coalesce.py): which engine checkpoints are written at once,
which wait for the flush window, and that a flush never lands after the run ended."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from ordo.engine.events import Checkpoint, RunFinished, StepFinished
from ordo.engine.state import RunResult, RunState
from ordo.engine.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from ordo.operator.checkpoint import CheckpointStore, decode
from ordo.operator.coalesce import RunWrites, side_effect_pending


class Store:
    """Records the states written, in order (the CheckpointStore surface RunWrites uses)."""

    def __init__(self) -> None:
        self.saved: list[RunState] = []

    async def save_encoded(self, payload: bytes) -> None:
        import base64

        body = {"binaryData": {"state.json.gz": base64.b64encode(payload).decode()}}
        state = decode(body)
        assert state is not None
        self.saved.append(state)


def started(call_id: str, *, answered: bool) -> RunState:
    call = ToolCall(call_id, "place-order", {})
    items: list[Any] = [UserMessage("go"), AssistantMessage("", (call,))]
    if answered:
        items.append(ToolResult(call_id, "place-order", "ok", False))
    return RunState(items=items, step=1, started_calls={call_id})


def test_only_a_started_call_without_a_result_needs_a_write_at_once() -> None:
    assert side_effect_pending(started("c1", answered=False))
    assert not side_effect_pending(started("c1", answered=True))
    assert not side_effect_pending(RunState(items=[UserMessage("go")]))


def run_writes(flush_seconds: float) -> tuple[Store, list[int], RunWrites]:
    store = Store()
    progress: list[int] = []

    async def write(state: RunState) -> None:
        progress.append(state.step)

    return (
        store,
        progress,
        RunWrites(cast(CheckpointStore, store), write, flush_seconds=flush_seconds),
    )


def finished(state: RunState) -> RunFinished:
    return RunFinished(RunResult("Succeeded", "Succeeded", "", "", None, state))


def test_a_fast_run_writes_only_the_checkpoints_before_side_effects() -> None:
    async def scenario() -> tuple[Store, list[int]]:
        store, progress, writes = run_writes(flush_seconds=60)
        before = started("c1", answered=False)
        await writes(Checkpoint(before))  # before the non-idempotent call: at once
        after = started("c1", answered=True)
        await writes(Checkpoint(after))  # end of step: deferred
        await writes(StepFinished(after))
        await writes(finished(after))  # the run ends inside the window: nothing more
        return store, progress

    store, progress = asyncio.run(scenario())
    assert [sorted(s.started_calls) for s in store.saved] == [["c1"]]
    assert side_effect_pending(store.saved[0])
    assert progress == []


def test_a_slow_step_is_flushed_checkpoint_first_from_the_boundary_copy() -> None:
    async def scenario() -> tuple[Store, list[int]]:
        store, progress, writes = run_writes(flush_seconds=0.01)
        state = started("c1", answered=True)
        await writes(Checkpoint(state))
        await writes(StepFinished(state))
        state.step = 2  # the next step starts while the flush waits: not in the copy
        state.items.append(AssistantMessage("thinking", ()))
        await asyncio.sleep(0.1)
        await writes(finished(state))
        return store, progress

    store, progress = asyncio.run(scenario())
    assert [s.step for s in store.saved] == [1]
    assert not side_effect_pending(store.saved[0])
    assert progress == [1]  # after the checkpoint it describes


def test_a_write_before_a_side_effect_supersedes_an_older_boundary() -> None:
    async def scenario() -> tuple[Store, list[int]]:
        store, progress, writes = run_writes(flush_seconds=0.05)
        first = started("c1", answered=True)
        await writes(StepFinished(first))
        second = started("c2", answered=False)
        second.step = 2
        await writes(Checkpoint(second))  # newer, written at once
        await asyncio.sleep(0.2)  # the flush of step 1 finds a newer checkpoint written
        await writes(finished(second))
        return store, progress

    store, progress = asyncio.run(scenario())
    assert [s.step for s in store.saved] == [2]
    assert progress == [1]


def test_zero_window_writes_every_step_inline() -> None:
    async def scenario() -> tuple[Store, list[int]]:
        store, progress, writes = run_writes(flush_seconds=0)
        state = started("c1", answered=True)
        await writes(StepFinished(state))
        return store, progress

    store, progress = asyncio.run(scenario())
    assert [s.step for s in store.saved] == [1] and progress == [1]


def test_a_stopped_run_flushes_its_last_step_instead_of_dropping_it() -> None:
    async def scenario() -> tuple[Store, list[int]]:
        store, progress, writes = run_writes(flush_seconds=60)
        state = started("c1", answered=True)
        await writes(StepFinished(state))
        await writes.close(flush=True)  # a shutdown: the next process resumes from it
        return store, progress

    store, progress = asyncio.run(scenario())
    assert [s.step for s in store.saved] == [1] and progress == [1]
