"""The phases of a Task, in one place: what `status.phase` may say, which of them end a Task,
and what a run can end in (the engine's `RunResult.phase`, `TaskOutcome.phase`).

A run ends in a terminal phase or stops `AwaitingApproval` (not terminal: it waits for a human
decision, the Task stays `Running` with condition `AwaitingApproval`) or `AwaitingChildren`
(not terminal: it waits for child Tasks, docs/concepts.md#trees; when both wait, the phase is
`AwaitingApproval`); `Pending` and `Running` are the operator's, before and while a run
executes.
"""

from __future__ import annotations

from typing import Literal, get_args

TerminalPhase = Literal["Succeeded", "Failed", "Cancelled"]
"""The phases a Task ends in."""
Phase = Literal["Pending", "Running", TerminalPhase]
"""`status.phase`."""
RunPhase = Literal[TerminalPhase, "AwaitingApproval", "AwaitingChildren"]
"""How a run stops: a terminal phase, or `AwaitingApproval` / `AwaitingChildren` (not
terminal, not a `Phase`)."""

TERMINAL_PHASES: frozenset[str] = frozenset(get_args(TerminalPhase))
