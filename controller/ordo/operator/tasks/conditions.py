"""metav1.Condition helpers (pure), built from the api `Condition` model.

A condition that is set is a validated `Condition` dumped with its aliases (camelCase); the
other conditions of the object are carried over as the API server returned them (a
re-parse would cost some 4 us each per write and could only drop what the server stored).
`lastTransitionTime` changes only when the status does (metav1.Condition semantics)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from pydantic import ValidationError

from ...api.base import Condition, ConditionStatus

MAX_MESSAGE_CHARS = 1024
"""Most characters of a condition message ordo writes (the CRD allows more)."""


def now() -> str:
    """The time now as the API server writes it (RFC 3339, whole seconds, `Z`); `time.gmtime`
    formats it in a quarter of the time of `datetime.now(UTC)` (a terminal write takes 6)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def condition(
    previous: Mapping[str, Any] | None,
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int | None = None,
) -> dict[str, Any]:
    """Condition `type_` as it is written after `previous` (the one the object has, if any):
    its lastTransitionTime is kept unless the status changes."""
    changed = previous is None or previous.get("status") != status
    stamp = now() if changed else previous.get("lastTransitionTime", now())  # type: ignore[union-attr]
    message = message[:MAX_MESSAGE_CHARS]
    try:
        model = Condition(
            type=type_,
            status=status,
            reason=reason,
            message=message,
            last_transition_time=stamp,
            observed_generation=generation,
        )
    except ValidationError:
        if not (_lone_surrogate(message) or _lone_surrogate(reason)):
            raise
        # Text that JSON cannot carry as UTF-8: the API server's decoder would replace each
        # lone surrogate with U+FFFD, so the condition says the same with them replaced.
        return condition(previous, type_, status, _replaced(reason), _replaced(message), generation)
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def _lone_surrogate(text: str) -> bool:
    return _replaced(text) != text


def _replaced(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """A new list with `type_` set, sorted by type; lastTransitionTime changes only when the
    status does. `status` is validated by the model (`True`, `False` or `Unknown`)."""
    out = [dict(c) for c in conditions or [] if c.get("type") != type_]
    previous = next((c for c in conditions or [] if c.get("type") == type_), None)
    out.append(
        condition(previous, type_, cast(ConditionStatus, status), reason, message, generation)
    )
    out.sort(key=lambda c: c["type"])
    return out


def same_conditions(a: list[dict[str, Any]] | None, b: list[dict[str, Any]] | None) -> bool:
    """Equal ignoring lastTransitionTime."""

    def strip(cs: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        return sorted(
            ({k: v for k, v in c.items() if k != "lastTransitionTime"} for c in cs or []),
            key=lambda c: c["type"],
        )

    return strip(a) == strip(b)
