"""RFC 3339 timestamps: the one parser for every timestamp ordo reads from an object
(`metadata.creationTimestamp`, `status.startedAt`, a lease's `renewTime`, an approval's
deadline, ...), and the writers of the two forms ordo writes.

A timestamp without a zone (`2026-01-02T03:04:05`) is refused, never read as local time: the
API server and ordo always write a zone, so a zone-less value was written by hand and its
instant is unknown, and one read as the operator's local time would move someone's deadline
by hours depending on where the operator runs. Every caller treats None as "no timestamp"
and falls back to its documented conservative reading (an approval deadline in status that
does not parse is settled against the checkpoint's, operator/tasks/approvals.py).

Accepted: `YYYY-MM-DDTHH:MM:SS`, an optional fraction (any number of digits, cut to
microseconds), then `Z` or `±HH:MM`; `T` and `Z` in either case (RFC 3339 §5.6); a leap
second (`:60`) reads as the next second. Anything else, including the ISO 8601 forms that
`datetime.fromisoformat` also takes (basic format, week dates, a space, no seconds), is None.
Values longer than MAX_CHARS are refused before any parsing; the cost is a few microseconds.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

__all__ = ["MAX_CHARS", "epoch", "format_micros", "format_seconds", "parse"]

MAX_CHARS = 64
"""Longest value parsed (the longest RFC 3339 timestamp a Kubernetes client writes, with
nanoseconds and an offset, is 35 characters)."""

_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt](?:[01]\d|2[0-3]):[0-5]\d:(?:[0-5]\d|60)(?:\.\d{1,50})?"
    r"(?:[Zz]|[+-](?:[01]\d|2[0-3]):[0-5]\d)",
    re.ASCII,
)
"""The shape; `datetime.fromisoformat` (which reads exactly these once `T`/`Z` are upper
case) then checks the calendar, about five times faster than converting the groups here."""


def parse(value: object) -> datetime | None:
    """The instant of an RFC 3339 timestamp as an aware UTC datetime; None for anything else
    (not a string, no zone, out of range)."""
    if not isinstance(value, str) or len(value) > MAX_CHARS or _RFC3339.fullmatch(value) is None:
        return None
    text = value if value[10] == "T" and value[-1] != "z" else value.upper()
    leap = text[17:19] == "60"
    if leap:
        text = f"{text[:17]}59{text[19:]}"
    try:
        parsed = datetime.fromisoformat(text).astimezone(UTC)
        return parsed + timedelta(seconds=1) if leap else parsed
    except (ValueError, OverflowError):
        return None


def epoch(value: object) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp, or None (see `parse`)."""
    parsed = parse(value)
    return None if parsed is None else parsed.timestamp()


def format_seconds(seconds: float) -> str:
    """`seconds` (epoch) as the API server writes timestamps: whole seconds, `Z`."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micros(seconds: float) -> str:
    """`seconds` (epoch) with microseconds, `Z` (Kubernetes' MicroTime)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
