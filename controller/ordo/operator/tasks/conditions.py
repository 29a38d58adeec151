"""metav1.Condition helpers (pure)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: list[dict[str, Any]] | None,
    type_: str,
    status: str,
    reason: str,
    message: str,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """A new list with `type_` set; lastTransitionTime changes only when the status does."""
    out = [dict(c) for c in conditions or [] if c.get("type") != type_]
    previous = next((c for c in conditions or [] if c.get("type") == type_), None)
    changed = previous is None or previous.get("status") != status
    cond: dict[str, Any] = {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": now() if changed else previous.get("lastTransitionTime", now()),  # type: ignore[union-attr]
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    out.append(cond)
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
