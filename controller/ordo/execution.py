"""Run one Task end to end: resolve, wire providers/tools/memory, run the loop, and shape the
result as Task status. The local runner (`ordo run`) and the operator both call `execute`;
only the object store and the listeners differ."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .api import Task
from .api.task import MAX_OUTPUT_CHARS, MAX_TOOL_CALL_RECORDS
from .engine.events import Listener
from .engine.loop import run_agent
from .engine.model import ModelClient
from .engine.resolve import ResolutionError, Snapshot, resolve, system_prompt, user_message
from .engine.state import RunConfig, RunResult, RunState
from .engine.store import ObjectStore
from .engine.tooling import ToolBinding

ModelFactory = Callable[[Snapshot], ModelClient]


def default_model_factory(snapshot: Snapshot) -> ModelClient:
    from .providers import build_model_client

    return build_model_client(snapshot.endpoint, snapshot.api_key)


@dataclass
class TaskOutcome:
    """How a Task ended, in the shape of its status (DESIGN §5)."""

    phase: str
    reason: str
    message: str
    result: RunResult | None = None
    snapshot: Snapshot | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def status(self) -> dict[str, Any]:
        """The status fields this outcome sets (camelCase, ready to patch)."""
        status: dict[str, Any] = {
            "phase": self.phase,
            "reason": self.reason,
            "message": self.message[:4096],
        }
        if self.snapshot is not None:
            status["snapshotHash"] = self.snapshot.content_hash
            if self.snapshot.agent_generation is not None:
                status["agentGeneration"] = self.snapshot.agent_generation
        result = self.result
        status["step"] = result.step if result else 0
        if result is None:
            status["usage"] = {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
            return status
        status.update(progress_fields(result.state))
        output = result.output
        if output:
            status["output"] = output[:MAX_OUTPUT_CHARS]
            if len(output) > MAX_OUTPUT_CHARS:
                status["outputTruncated"] = True
        if result.structured_output is not None:
            status["structuredOutput"] = result.structured_output
        return status


def progress_fields(state: RunState) -> dict[str, Any]:
    """`step`, `usage` and the bounded `toolCalls` of a run, as status fields."""
    fields: dict[str, Any] = {"step": state.step, "usage": state.usage.to_dict()}
    if state.records:
        fields["toolCalls"] = [r.to_dict() for r in state.records[-MAX_TOOL_CALL_RECORDS:]]
        if len(state.records) > MAX_TOOL_CALL_RECORDS:
            fields["toolCallsTruncated"] = True
    return fields


def run_config(snapshot: Snapshot) -> RunConfig:
    return RunConfig(
        system_prompt=system_prompt(snapshot),
        user_message=user_message(snapshot.task),
        governance=snapshot.governance,
        max_steps=snapshot.max_steps,
        timeout=snapshot.timeout,
        token_budget=snapshot.token_budget,
        output_schema=snapshot.output_schema,
        on_tool_denied=snapshot.on_tool_denied,
    )


async def tool_bindings(snapshot: Snapshot) -> tuple[list[ToolBinding], list[Any]]:
    """Bindings for the snapshot's tools and memory; also the resources to close afterwards."""
    from .memory import open_backend
    from .tools import binding
    from .tools.memory_tools import memory_bindings

    bindings = [await binding(t) for t in snapshot.tools.values()]
    closers: list[Any] = []
    if snapshot.memory is not None:
        backend = await open_backend(snapshot.memory, snapshot.memory_secret)
        closers.append(backend)
        bindings.extend(
            memory_bindings(backend, snapshot.memory_operations, snapshot.memory.spec.ingest)
        )
    return bindings, closers


async def execute(
    task: Task,
    store: ObjectStore,
    *,
    listeners: Iterable[Listener] = (),
    state: RunState | None = None,
    cancel: asyncio.Event | None = None,
    model_factory: ModelFactory = default_model_factory,
    on_resolved: Callable[[Snapshot], Any] | None = None,
) -> TaskOutcome:
    """Resolve and run one Task. Resolution failures end it with zero model calls."""
    try:
        snapshot = await resolve(task, store)
    except ResolutionError as exc:
        return TaskOutcome("Failed", exc.reason, exc.message)
    if on_resolved is not None:
        maybe = on_resolved(snapshot)
        if asyncio.iscoroutine(maybe):
            await maybe
    return await run_snapshot(
        snapshot, listeners=listeners, state=state, cancel=cancel, model_factory=model_factory
    )


async def _close(resource: object) -> None:
    close = getattr(resource, "close", None)
    if close is not None:
        outcome = close()
        if asyncio.iscoroutine(outcome):
            await outcome


async def run_snapshot(
    snapshot: Snapshot,
    *,
    listeners: Iterable[Listener] = (),
    state: RunState | None = None,
    cancel: asyncio.Event | None = None,
    model_factory: ModelFactory = default_model_factory,
) -> TaskOutcome:
    """Run a resolved snapshot (the operator resolves first to compare with a checkpoint)."""
    model = model_factory(snapshot)
    try:
        tools, closers = await tool_bindings(snapshot)
    except Exception as exc:  # an MCP server or memory backend that cannot be reached
        await _close(model)
        return TaskOutcome(
            "Failed",
            "ToolError",
            f"a tool or the memory backend could not be set up: {type(exc).__name__}: {exc}"[:1024],
            snapshot=snapshot,
        )
    try:
        result = await run_agent(
            run_config(snapshot), model, tools, listeners=listeners, state=state, cancel=cancel
        )
    finally:
        for closer in closers:
            await closer.close()
        await _close(model)
    return TaskOutcome(result.phase, result.reason, result.message, result, snapshot)
