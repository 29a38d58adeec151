"""Coalesced run writes (operator/tasks/coalesce.py): which engine checkpoints are written at once,
which wait for the flush window, and that a flush never lands after the run ended."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any, cast

import pytest

from ordo.engine.events import Checkpoint, RunFinished, StepFinished, ToolFinished
from ordo.engine.loop import run_agent
from ordo.engine.model import ModelRequest, ModelResponse
from ordo.engine.state import RunConfig, RunResult, RunState
from ordo.engine.tooling import ToolBinding
from ordo.engine.transcript import AssistantMessage, ToolCall, ToolResult, UserMessage
from ordo.errors import LeaseLost
from ordo.operator.kube.errors import ApiError, Fenced
from ordo.operator.tasks.checkpoint import CheckpointStore
from ordo.operator.tasks.coalesce import RunWrites, side_effect_pending
from support.engine_fakes import (
    ScriptedModel,
    Toolbox,
    answer,
    call,
    open_governance,
    run_config,
    tools_turn,
)


class Store:
    """Records the states written, in order (the CheckpointStore surface RunWrites uses)."""

    def __init__(self) -> None:
        self.saved: list[RunState] = []
        self.anchored: list[int] = []
        """Indexes in `saved` of the writes anchored in the status (before a side effect)."""

    async def save_encoded(self, payload: bytes, *, anchor: bool = False) -> None:
        self.saved.append(RunState.from_dict(json.loads(gzip.decompress(payload))))
        if anchor:
            self.anchored.append(len(self.saved) - 1)


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


def test_a_fast_run_writes_only_the_checkpoints_around_side_effects() -> None:
    async def scenario() -> tuple[Store, list[int]]:
        store, progress, writes = run_writes(flush_seconds=60)
        before = started("c1", answered=False)
        await writes(Checkpoint(before))  # before the non-idempotent call: at once
        await writes(ToolFinished(1, "place-order", "succeeded", 0.01, "c1"))
        after = started("c1", answered=True)
        await writes(Checkpoint(after))
        await writes(StepFinished(after))  # its result, before the next model call: at once
        idle = started("c1", answered=True)
        idle.step = 2
        await writes(ToolFinished(2, "lookup", "succeeded", 0.01, "c2"))  # idempotent
        await writes(StepFinished(idle))  # deferred
        await writes(finished(idle))  # the run ends inside the window: nothing more
        return store, progress

    store, progress = asyncio.run(scenario())
    assert [sorted(s.started_calls) for s in store.saved] == [["c1"], ["c1"]]
    assert side_effect_pending(store.saved[0])
    assert not side_effect_pending(store.saved[1])
    assert store.anchored == [0]  # only the write before the side effect is anchored
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


# --------------------------------------------------------------------------------------
# A non-idempotent result is durable before the next model call (issue 23, item 5): the
# real engine loop with the listener, and a model that looks at the store when it is called.


class GatedStore(Store):
    """A Store whose writes after the first `free` ones wait for `release` (the API server
    has not acknowledged them yet); `fail` makes them raise instead."""

    def __init__(self, free: int = 1_000, fail: Exception | None = None) -> None:
        super().__init__()
        self.free = free
        self.fail = fail
        self.release = asyncio.Event()
        self.waiting = 0

    async def save_encoded(self, payload: bytes, *, anchor: bool = False) -> None:
        if len(self.saved) >= self.free:
            if self.fail is not None:
                raise self.fail
            self.waiting += 1
            await self.release.wait()
        await super().save_encoded(payload, anchor=anchor)


def looking_model(store: Store, seen: list[list[RunState]]) -> ScriptedModel:
    """Calls place-order, then answers; records the states written when each call starts."""

    def second(request: ModelRequest, index: int) -> ModelResponse:
        seen.append(list(store.saved))
        return answer("ordered")

    return ScriptedModel([tools_turn(call("place-order", "c1")), second])


def effect_run(
    store: Store, *, idempotent: bool = False
) -> tuple[RunConfig, list[ToolBinding], RunWrites, list[int]]:
    progress: list[int] = []

    async def write(state: RunState) -> None:
        progress.append(state.step)

    box = Toolbox().add("place-order", idempotent=idempotent)
    writes = RunWrites(cast(CheckpointStore, store), write, flush_seconds=60)
    return run_config(open_governance("place-order")), box.bindings, writes, progress


async def test_a_non_idempotent_result_is_written_before_the_next_model_call() -> None:
    store = Store()
    seen: list[list[RunState]] = []
    config, tools, writes, progress = effect_run(store)
    result = await run_agent(config, looking_model(store, seen), tools, listeners=[writes])
    assert result.phase == "Succeeded"
    (at_call,) = seen
    assert [s.step for s in at_call] == [1, 1]  # before the call, then with its result
    assert side_effect_pending(at_call[0])
    last = at_call[-1]
    assert not side_effect_pending(last) and last.started_calls == {"c1"}
    assert [i.call_id for i in last.items if isinstance(i, ToolResult)] == ["c1"]
    assert progress == []  # the progress patch stays coalesced: one write per side effect


async def test_the_next_model_call_waits_until_the_result_write_is_acknowledged() -> None:
    store = GatedStore(free=1)
    seen: list[list[RunState]] = []
    config, tools, writes, _ = effect_run(store)
    model = looking_model(store, seen)
    run = asyncio.create_task(run_agent(config, model, tools, listeners=[writes]))
    for _ in range(200):
        if store.waiting:
            break
        await asyncio.sleep(0.01)
    assert store.waiting == 1  # the result's write is in flight ...
    await asyncio.sleep(0.1)
    assert model.calls == 1  # ... and the step-2 model call was not sent
    store.release.set()
    result = await asyncio.wait_for(run, 5)
    assert (result.phase, model.calls) == ("Succeeded", 2)
    assert len(seen[0]) == 2


async def test_idempotent_only_steps_keep_the_coalescing() -> None:
    store = Store()
    seen: list[list[RunState]] = []
    config, tools, writes, progress = effect_run(store, idempotent=True)
    result = await run_agent(config, looking_model(store, seen), tools, listeners=[writes])
    assert result.phase == "Succeeded"
    assert seen == [[]] and store.saved == [] and progress == []


async def test_a_resumed_run_does_not_rewrite_results_its_checkpoint_holds() -> None:
    """Results loaded from a checkpoint are durable already: only calls that ran in this
    execution (ToolFinished) are written at once."""
    store = Store()
    writes = RunWrites(cast(CheckpointStore, store), _no_progress, flush_seconds=60)
    box = Toolbox().add("place-order").add("lookup", idempotent=True)
    config = run_config(open_governance("place-order", "lookup"))
    resumed = started("c1", answered=True)  # step 1's result, loaded from the checkpoint
    model = ScriptedModel([tools_turn(call("lookup", "c2")), answer("ordered")])
    result = await run_agent(config, model, box.bindings, listeners=[writes], state=resumed)
    assert (result.phase, model.calls) == ("Succeeded", 2)
    assert store.saved == []


async def _no_progress(state: RunState) -> None:
    return None


async def test_a_failed_result_write_does_not_end_the_run() -> None:
    """An API error after the client's retries: the call ran, so the run goes on (a crash
    later ends `Interrupted`, as before the write); the flush or the end carries the step."""
    store = GatedStore(free=1, fail=ApiError(503, "ServiceUnavailable", "down"))
    seen: list[list[RunState]] = []
    config, tools, writes, _ = effect_run(store)
    result = await run_agent(config, looking_model(store, seen), tools, listeners=[writes])
    assert result.phase == "Succeeded"
    assert [len(s) for s in seen] == [1]


async def test_a_fenced_result_write_stops_the_run_before_the_next_model_call() -> None:
    store = GatedStore(free=1, fail=Fenced("ConfigMap", "ordo-checkpoint"))
    seen: list[list[RunState]] = []
    config, tools, writes, _ = effect_run(store)
    model = looking_model(store, seen)
    with pytest.raises(LeaseLost):
        await run_agent(config, model, tools, listeners=[writes])
    assert model.calls == 1


def test_a_boundary_copy_keeps_its_children_when_the_run_goes_on() -> None:
    """The flush writes the state taken at the step boundary: a child that starts or ends
    after it must not leak into (or out of) that copy."""
    from ordo.engine.delegation import ChildRecord
    from ordo.operator.tasks.coalesce import copy_state

    state = RunState()
    state.children["c1"] = ChildRecord("c1", "p-1", "helper", "ask", 1, None, "Running")
    copy = copy_state(state)
    state.children["c2"] = ChildRecord("c2", "p-2", "helper", "ask", 2, None, "Running")
    assert list(copy.children) == ["c1"]
