"""`execute`: the one place where a Task run begins and ends, for `ordo run` and the operator.

Resolve the Task, let the caller prepare (the operator loads its checkpoint and builds its
listeners), wire the model, tools and memory, run the step loop, and return a TaskOutcome
whose `status()` is the `api` TaskStatus. Whatever happens inside, a run ends with a
documented reason: ordo's own errors carry theirs, anything unexpected becomes
`InternalError` naming only the exception type. Every exit, an exception included, keeps
how far the run got: `execute` owns the RunState the loop works on, so the status of a run
that ended in error still has its step, usage and tool calls. The deadline is anchored at
`started_at` (the Task's first claim), so resolution, tool set-up and resumes all count
against it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..api import Task
from ..engine.approvals import ApprovalDecider, resume_pause
from ..engine.delegation import Delegator
from ..engine.events import Listener
from ..engine.loop import initial_state, run_agent
from ..engine.state import RunState
from ..errors import OrdoError, ToolSetupError
from . import tracing
from .guardrails import guardrail_bindings
from .outcome import OutcomePhase, TaskOutcome, TerminalPhase, internal_error
from .resolve import resolve
from .snapshot import Snapshot
from .store import ObjectStore
from .team import TeamRun, resolve_team, run_team
from .wiring import ModelFactory, close_quietly, default_model_factory, run_config, tool_bindings

__all__ = [
    "OutcomePhase",
    "Prepare",
    "Prepared",
    "TaskOutcome",
    "TeamPrepare",
    "TerminalPhase",
    "execute",
    "internal_error",
]


@dataclass
class Prepared:
    """What the caller adds once the snapshot is known: a state to resume from, listeners."""

    state: RunState | None = None
    listeners: Sequence[Listener] = ()
    approval_decider: ApprovalDecider | None = None
    """Finds human decisions on calls that need approval (engine/approvals.py)."""
    approval_timeout: float | None = None
    """Default seconds a call waits for a decision (None: the engine's default, 24h)."""
    delegator: Delegator | None = None
    """Starts the run's child Tasks (`agent` Tool calls): the operator's makes Task objects,
    `ordo run`'s runs them in process. None: such a call gets an error result."""
    max_delegation_depth: int | None = None
    """The front end's delegation depth limit (the operator's `--max-delegation-depth`;
    None: `DEFAULT_MAX_DEPTH`); the policies' `maxDelegationDepth` narrows it."""


Prepare = Callable[[Snapshot], Awaitable[Prepared]]
TeamPrepare = Callable[[TeamRun], Awaitable[Prepared]]
"""What the caller adds to a Team Task's run (runtime/team.py): its `delegator` and
`max_delegation_depth`; the rest of `Prepared` is an Agent run's."""


async def execute(
    task: Task,
    store: ObjectStore,
    *,
    listeners: Iterable[Listener] = (),
    prepare: Prepare | None = None,
    cancel: asyncio.Event | None = None,
    model_factory: ModelFactory = default_model_factory,
    started_at: float | None = None,
    snapshot: Snapshot | None = None,
    prepare_team: TeamPrepare | None = None,
) -> TaskOutcome:
    """Resolve and run one Task to a terminal outcome. Never raises but for cancellation of
    the calling task. `started_at` (epoch seconds) anchors the deadline; default now. The run
    is one invoke_agent span (runtime/tracing.py), whose trace the outcome names.

    `snapshot`: the Task already resolved by the caller (the operator's scheduler resolves
    once for its GitOps pre-check, operator/tasks/references.py); the run uses it as is and
    does not read the Task's references again. None: resolve here.

    A Task with `spec.teamRef` runs its Team (runtime/team.py) under an invoke_workflow span:
    `prepare_team` gives it the front end's delegator; `prepare` and `snapshot` are an Agent
    run's."""
    anchor = started_at if started_at is not None else time.time()
    if task.spec.team_ref is not None:
        with tracing.run_span(task) as run:
            outcome = await _execute_team(task, store, prepare_team, cancel, anchor)
            run.finish(outcome)
        return dataclasses.replace(outcome, trace_id=run.ids.trace_id)
    with tracing.run_span(task) as run:

        async def traced(snapshot: Snapshot) -> Prepared:
            prepared = await prepare(snapshot) if prepare is not None else Prepared()
            return dataclasses.replace(
                prepared,
                listeners=[*prepared.listeners, *run.listeners(snapshot)],
                delegator=run.delegator(prepared.delegator),
            )

        outcome = await _execute(
            task, store, listeners, traced, cancel, model_factory, anchor, snapshot
        )
        run.finish(outcome)
    return dataclasses.replace(outcome, trace_id=run.ids.trace_id)


async def _execute(
    task: Task,
    store: ObjectStore,
    listeners: Iterable[Listener],
    prepare: Prepare,
    cancel: asyncio.Event | None,
    model_factory: ModelFactory,
    anchor: float,
    snapshot: Snapshot | None,
) -> TaskOutcome:
    try:
        if snapshot is None:
            snapshot = await resolve(task, store)
        return await _run(snapshot, listeners, prepare, cancel, model_factory, anchor)
    except asyncio.CancelledError:
        raise
    except OrdoError as exc:
        return TaskOutcome("Failed", exc.reason, exc.message, snapshot=snapshot, error=exc)
    except Exception as exc:
        return internal_error(exc, snapshot)


async def _execute_team(
    task: Task,
    store: ObjectStore,
    prepare: TeamPrepare | None,
    cancel: asyncio.Event | None,
    anchor: float,
) -> TaskOutcome:
    try:
        team = await resolve_team(task, store)
        prepared = await prepare(team) if prepare is not None else Prepared()
        return await run_team(
            team,
            prepared.delegator,
            anchor=anchor,
            max_depth=prepared.max_delegation_depth,
            cancel=cancel,
        )
    except asyncio.CancelledError:
        raise
    except OrdoError as exc:
        return TaskOutcome("Failed", exc.reason, exc.message, error=exc)
    except Exception as exc:
        return internal_error(exc)


async def _run(
    snapshot: Snapshot,
    listeners: Iterable[Listener],
    prepare: Prepare | None,
    cancel: asyncio.Event | None,
    model_factory: ModelFactory,
    anchor: float,
) -> TaskOutcome:
    prepared = await prepare(snapshot) if prepare is not None else Prepared()
    sinks = [*listeners, *prepared.listeners]
    resumed = prepared.state
    if resumed is not None:  # waiting for a human is not run time (approvals.py)
        anchor += resume_pause(resumed, time.time())
    remaining = snapshot.timeout - (time.time() - anchor)
    model = model_factory(snapshot)
    closers: list[Any] = [model]
    try:
        try:
            async with asyncio.timeout(max(remaining, 0.0)):
                tools, opened = await tool_bindings(snapshot)
            closers.extend(opened)
            guards, judges = guardrail_bindings(snapshot.guardrails)
            closers.extend(judges)
        except TimeoutError:
            return TaskOutcome(
                "Failed",
                "Timeout",
                f"tools and memory were not set up within the run's timeout ({snapshot.timeout:g}s)",
                snapshot=snapshot,
                state=resumed,
            )
        except OrdoError as exc:
            return TaskOutcome(
                "Failed", exc.reason, exc.message, snapshot=snapshot, error=exc, state=resumed
            )
        except Exception as exc:  # an MCP server or memory backend that cannot be reached
            error = ToolSetupError(
                f"a tool or the memory backend could not be set up ({type(exc).__name__})"
            )
            return TaskOutcome(
                "Failed", error.reason, error.message, snapshot=snapshot, error=error, state=resumed
            )
        config = run_config(
            snapshot,
            elapsed=time.time() - anchor,
            delegator=prepared.delegator,
            max_delegation_depth=prepared.max_delegation_depth,
        )
        if prepared.approval_timeout is not None:
            config = dataclasses.replace(config, approval_timeout=prepared.approval_timeout)
        config = dataclasses.replace(config, approval_decider=prepared.approval_decider)
        # The loop works on this object in place: whatever ends the run, it says how far it got.
        state = resumed if resumed is not None else initial_state(config)
        try:
            result = await run_agent(
                config,
                model,
                tools,
                listeners=sinks,
                state=state,
                fresh=resumed is None,
                cancel=cancel,
                guardrails=guards,
            )
        except OrdoError as exc:  # LeaseLost: the outcome is abandoned, nothing is written
            return TaskOutcome(
                "Failed", exc.reason, exc.message, snapshot=snapshot, error=exc, state=state
            )
        except Exception as exc:  # a provider, listener or validator bug: keep the progress
            return internal_error(exc, snapshot, state)
    finally:
        for closer in reversed(closers):
            await close_quietly(closer)
    return TaskOutcome(result.phase, result.reason, result.message, result, snapshot, result.error)
