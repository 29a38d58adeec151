"""The step verdict: what one step of the loop decided, as a frozen value from a closed union
(the Agents SDK's `NextStep` is the model). engine/loop.py acts on it in one place.

- `Continue`: every tool call of the step has its result; checkpoint, call the model again.
- `AwaitApproval`: calls wait for a human decision (engine/approvals.py); checkpoint and
  stop, not terminal.
- `AwaitChildren`: calls wait for their child Tasks (engine/delegating.py), none for a human;
  checkpoint and stop, not terminal.
- `Finished(phase, reason, message, structured, error)`: the run ends here.

The functions below decide the `Finished` of each exit, so that every Task reason the engine
writes is a value chosen where the decision is made; none is recovered from a message or a
record's text. A refused tool call that ends the run (`onToolDenied: Fail`) travels as a
`Denial`, which carries the reason its refusal chose (engine/screening.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..api.task import Reason
from ..errors import OrdoError
from . import output as output_mod
from .jsonsize import MAX_STRUCTURED_OUTPUT_BYTES, json_size
from .livepolicy import stopped
from .state import RunConfig, RunState, TerminalPhase, ToolCallRecord

__all__ = [
    "AWAIT_APPROVAL",
    "AWAIT_CHILDREN",
    "CONTINUE",
    "AwaitApproval",
    "AwaitChildren",
    "Continue",
    "Denial",
    "Finished",
    "StepVerdict",
    "answered",
    "cancelled",
    "denied",
    "failed",
    "guardrail_violation",
    "out_of_steps",
    "over_budget",
    "suspended",
    "timed_out",
]


@dataclass(frozen=True, slots=True)
class Continue:
    """Every tool call of the step has its result: checkpoint, then the next step."""


@dataclass(frozen=True, slots=True)
class AwaitApproval:
    """Calls wait for a human decision (`RunState.approvals`): checkpoint and stop; the run
    resumes once they are decided (not terminal)."""


@dataclass(frozen=True, slots=True)
class AwaitChildren:
    """Calls wait for their child Tasks (`RunState.children`), none for a human: checkpoint
    and stop; the run resumes once a child ends (not terminal)."""


@dataclass(frozen=True, slots=True)
class Finished:
    """The run ends: its phase, Task reason and status message; the structured output of a
    valid answer; the ordo error that ended it, if one did."""

    phase: TerminalPhase
    reason: Reason
    message: str
    structured: dict[str, Any] | None = None
    error: OrdoError | None = field(default=None, compare=False)


StepVerdict = Continue | AwaitApproval | AwaitChildren | Finished
CONTINUE = Continue()
AWAIT_APPROVAL = AwaitApproval()
AWAIT_CHILDREN = AwaitChildren()


@dataclass(frozen=True, slots=True)
class Denial:
    """A refused call that ends the run (`onToolDenied: Fail`): its record, and the Task
    reason its refusal chose (ToolDenied, GuardrailViolation, ApprovalRejected,
    ApprovalTimedOut, DelegationCycle, DelegationDepthExceeded)."""

    record: ToolCallRecord
    ends_as: Reason


def cancelled(step: int) -> Finished:
    """A cancel request (spec.cancel, the Task deleted) seen at a step boundary, during a model
    call or while calls wait for approval."""
    return Finished("Cancelled", "Cancelled", f"cancelled after {step} step(s)")


def out_of_steps(config: RunConfig, state: RunState) -> Finished | None:
    """`maxSteps` model calls were made without a final answer, else None."""
    if state.step < config.max_steps:
        return None
    return Finished(
        "Failed",
        "MaxStepsExceeded",
        f"no final answer after {config.max_steps} model call(s) (maxSteps)",
    )


def over_budget(config: RunConfig, state: RunState) -> Finished | None:
    """The model's tokens so far took the run over its budget, else None."""
    if config.token_budget is None or state.usage.total_tokens <= config.token_budget:
        return None
    return Finished(
        "Failed",
        "TokenBudgetExceeded",
        f"used {state.usage.total_tokens} tokens, budget {config.token_budget}",
    )


def suspended(policy: str, step: int) -> Finished:
    """A policy re-read found the Agent suspended (engine/livepolicy.py)."""
    return Finished("Failed", "AgentSuspended", stopped(policy, step))


def guardrail_violation(message: str) -> Finished:
    """A guardrail denied the Task input or the final answer (engine/guardsteps.py)."""
    return Finished("Failed", "GuardrailViolation", message)


def denied(denial: Denial, tool: str, step: int | None = None) -> Finished:
    """A refused call ends the run; `tool` is its name as status may show it (events.py
    `public_tool_name`), `step` the step it was refused at (None: completing the calls a
    restart left without results)."""
    at = f" at step {step}" if step is not None else ""
    return Finished("Failed", denial.ends_as, f"tool {tool!r} denied{at}: {denial.record.reason}")


def timed_out(timeout: float | None) -> Finished:
    """The run's deadline passed (it cancels an in-flight model or tool call)."""
    return Finished(
        "Failed", "Timeout", f"the run did not finish within {timeout or 0:g}s (timeout)"
    )


def failed(exc: OrdoError) -> Finished:
    """An ordo error ended the run (a model call that failed for good, an interrupted
    non-idempotent call, a checkpoint that cannot be written, a policy that cannot be
    re-read, a judge over the token budget): its own reason and message."""
    return Finished("Failed", exc.reason, str(exc), error=exc)


async def answered(config: RunConfig, text: str) -> Finished:
    """A final answer that passed the output guardrails: Succeeded, with its structured output
    when the run has an output schema and the answer satisfies it (and fits status), else
    `InvalidOutput`."""
    if config.output_schema is None:
        return Finished("Succeeded", "Succeeded", "the agent answered")
    try:
        structured = await output_mod.parse_answer(text, config.output_schema)
        if json_size(structured, MAX_STRUCTURED_OUTPUT_BYTES) > MAX_STRUCTURED_OUTPUT_BYTES:
            raise output_mod.InvalidOutput(
                "the answer satisfies the output schema but is over "
                f"{MAX_STRUCTURED_OUTPUT_BYTES} bytes as JSON, the most "
                "status.structuredOutput holds; bound it in the outputSchema (maxItems, "
                "maxLength) or ask for a shorter answer"
            )
    except output_mod.InvalidOutput as exc:
        return failed(exc)
    return Finished(
        "Succeeded", "Succeeded", "the agent answered with valid structured output", structured
    )
