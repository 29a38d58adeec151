"""One exception tree for everything a run can end in.

Every error ordo raises on purpose derives from `OrdoError`, whose `reason` is a documented
Task reason (docs/reasons.md, the vocabulary in `ordo.reasons`: errors import no api module,
so the api can raise these). SDK, httpx and Kubernetes errors are mapped to these at the
edge (the provider, the tool executor, the kube client), so the code that ends a run never
parses a reason out of a message. Messages never carry secrets, prompts, tool arguments or
results.
"""

from __future__ import annotations

from typing import ClassVar

from .reasons import Reason


class OrdoError(Exception):
    """Base of ordo's errors. `reason` is the Task reason a run ends with if this error ends
    it; a subclass sets a default, an instance may override it."""

    default_reason: ClassVar[Reason] = "InternalError"

    def __init__(self, message: str = "", *, reason: Reason | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason: Reason = reason or self.default_reason


class ResolutionError(OrdoError):
    """The Task cannot run (a reference is missing or invalid); no model is called."""

    default_reason: ClassVar[Reason] = "InvalidSpec"

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message, reason=reason)


class PolicyUnavailable(ResolutionError):
    """AgentPolicies could not be listed or one does not parse: governance cannot decide, so
    the run fails closed before any model call."""

    def __init__(self, message: str) -> None:
        super().__init__("PolicyUnavailable", message)


class StoreError(OrdoError):
    """An object could not be read (API error, permission): decisions that need it fail closed."""


class ModelCallError(OrdoError):
    """Base of the errors a model call ends in; messages never carry keys or content."""

    default_reason: ClassVar[Reason] = "ModelError"


class ModelError(ModelCallError):
    """The provider rejected the request (4xx other than 429): retrying will not help."""

    default_reason: ClassVar[Reason] = "ModelError"


class ModelUnavailable(ModelCallError):
    """429, 5xx or connection errors until retries or the deadline ran out."""

    default_reason: ClassVar[Reason] = "ModelUnavailable"


class ToolFailure(OrdoError):
    """A tool call failed (non-2xx, timeout, connection refused). The message goes to the
    model as an error result, so it must not carry secrets."""

    default_reason: ClassVar[Reason] = "ToolError"


class ToolSetupError(OrdoError):
    """A tool or the memory backend could not be set up before the run started."""

    default_reason: ClassVar[Reason] = "ToolError"


class MemoryBackendError(ToolSetupError):
    """The memory backend cannot be reached; the message carries no URL or password."""


class InvalidOutput(OrdoError):
    """The answer is not JSON that satisfies the schema. The message names the JSON path and
    the rule that failed, never the model's text."""

    default_reason: ClassVar[Reason] = "InvalidOutput"


class Interrupted(OrdoError):
    """The run cannot resume safely (a non-idempotent tool call may have run)."""

    default_reason: ClassVar[Reason] = "Interrupted"


class LeaseLost(OrdoError):
    """Another process took over this run's execution lease: stop before any further side
    effect."""

    default_reason: ClassVar[Reason] = "Interrupted"


class InvalidSchema(OrdoError):
    """A JSON Schema a user wrote is not a valid, safe schema (bad draft, unresolvable `$ref`,
    a pattern a linear-time engine cannot compile)."""

    default_reason: ClassVar[Reason] = "InvalidSpec"


class UntrustedInputTooLarge(OrdoError):
    """Model output or a tool result exceeds a size or nesting cap."""

    default_reason: ClassVar[Reason] = "InvalidOutput"


def validation_problem(exc: Exception) -> str:
    """`field.path: message` of the first error of a pydantic ValidationError (one place for
    the wording that status messages, conditions and logs use)."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return type(exc).__name__
    first = errors()[0]
    loc = "".join(
        f"[{p}]" if isinstance(p, int) else ("." if i else "") + str(p)
        for i, p in enumerate(first.get("loc", ()))
    )
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    return f"{loc or '(root)'}: {msg}"[:1024]
