"""Wiring a snapshot to live parts: the model client, tool executors and the memory backend."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..engine.model import ModelClient
from ..engine.state import RunConfig
from ..engine.tooling import ToolBinding
from ..engine.toolrules import RuleSubject
from .prompt import system_prompt, user_message
from .snapshot import Snapshot

ModelFactory = Callable[[Snapshot], ModelClient]


def default_model_factory(snapshot: Snapshot) -> ModelClient:
    from ..providers import build_model_client

    return build_model_client(snapshot.endpoint, snapshot.api_key)


def run_config(snapshot: Snapshot, *, elapsed: float = 0.0) -> RunConfig:
    """The loop's configuration; `elapsed` seconds of the deadline are already spent."""
    return RunConfig(
        system_prompt=system_prompt(snapshot),
        user_message=user_message(snapshot.task),
        governance=snapshot.governance,
        max_steps=snapshot.max_steps,
        timeout=snapshot.timeout,
        token_budget=snapshot.token_budget,
        output_schema=snapshot.output_schema,
        on_tool_denied=snapshot.on_tool_denied,
        elapsed=elapsed,
        policy_refresh=snapshot.policy_refresh,
        rule_subject=RuleSubject(
            snapshot.agent.name,
            dict(snapshot.agent.metadata.labels or {}),
            snapshot.task.name,
            dict(snapshot.task.metadata.labels or {}),
        ),
    )


async def tool_bindings(snapshot: Snapshot) -> tuple[list[ToolBinding], list[Any]]:
    """Bindings for the snapshot's tools and memory; also the resources to close afterwards."""
    from ..memory import open_backend
    from ..tools import binding
    from ..tools.memory_tools import memory_bindings

    bindings = [await binding(t) for t in snapshot.tools.values()]
    closers: list[Any] = []
    if snapshot.memory is not None:
        backend = await open_backend(snapshot.memory, snapshot.memory_secret)
        closers.append(backend)
        bindings.extend(
            memory_bindings(backend, snapshot.memory_operations, snapshot.memory.spec.ingest)
        )
    return bindings, closers


async def close_quietly(resource: object) -> None:
    """Close a client or backend; a failure to close never changes how a run ended."""
    close = getattr(resource, "close", None)
    if close is None:
        return
    try:
        outcome = close()
        if asyncio.iscoroutine(outcome):
            await outcome
    except Exception:
        return
