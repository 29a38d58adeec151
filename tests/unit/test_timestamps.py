"""RFC 3339 timestamps (controller/ordo/timestamps.py), the one parser every reader of a
timestamp in an object uses: `Z`, offsets and fractions are read; a value without a zone is
refused (never read as the operator's local time), and so is anything that is not RFC 3339.
Then every call site, each with a zone-less value while TZ names a zone far from UTC."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from ordo import timestamps
from ordo.operator.jobmode import failures as jobfailures
from ordo.operator.jobmode import spec as jobspec
from ordo.operator.lifecycle import retention
from ordo.operator.tasks import approvals, lease, references, runner

T = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
"""2026-01-02T03:04:05Z"""


@pytest.fixture
def far_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time is UTC+05:30 (a zone-less value read as local is 5.5 h off)."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    assert time.timezone == -19800
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2026-01-02T03:04:05Z", T),
        ("2026-01-02T03:04:05z", T),
        ("2026-01-02t03:04:05Z", T),
        ("2026-01-02T03:04:05.5Z", T + 0.5),
        ("2026-01-02T03:04:05.000001Z", T + 0.000001),
        ("2026-01-02T03:04:05.123456789Z", T + 0.123456),  # nanoseconds: cut to microseconds
        ("2026-01-02T05:04:05+02:00", T),
        ("2026-01-02T00:34:05-02:30", T),
        ("2026-01-02T03:04:05+00:00", T),
        ("2026-01-02T03:04:05-00:00", T),
        ("2026-01-02T17:04:05.25+14:00", T + 0.25),
        ("2026-01-02T03:04:60Z", T + 55),  # a leap second reads as the next second
        ("0001-01-01T00:00:00Z", datetime(1, 1, 1, tzinfo=UTC).timestamp()),
        ("9999-12-31T23:59:59Z", datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()),
    ],
)
def test_rfc3339_is_read(text: str, epoch: float, far_zone: None) -> None:
    parsed = timestamps.parse(text)
    assert parsed is not None and parsed.tzinfo is UTC
    assert timestamps.epoch(text) == pytest.approx(epoch, abs=1e-6)


@pytest.mark.parametrize(
    "text",
    [
        "2026-01-02T03:04:05",  # no zone: refused, never local time
        "2026-01-02T03:04:05.5",
        "2026-01-02 03:04:05",
        "2026-01-02 03:04:05Z",  # a space is not RFC 3339's separator
        "2026-01-02",
        "20260102T030405Z",  # ISO 8601 basic format
        "2026-W01-1T00:00:00Z",
        "2026-01-02T03:04Z",  # seconds are required
        "2026-01-02T03:04:05.Z",
        "2026-01-02T03:04:05,5Z",
        "2026-01-02T03:04:05+0200",
        "2026-01-02T03:04:05+02",
        "2026-01-02T03:04:05+24:00",
        "2026-01-02T03:04:05+02:60",
        "2026-13-02T03:04:05Z",
        "2026-02-30T03:04:05Z",
        "2026-01-02T24:00:00Z",
        "2026-01-02T03:60:05Z",
        "2026-01-02T03:04:61Z",
        "0000-01-01T00:00:00Z",
        "0001-01-01T00:00:00+01:00",  # before year 1 in UTC
        "9999-12-31T23:59:59-01:00",  # after year 9999 in UTC
        "9999-12-31T23:59:60Z",
        "+2026-01-02T03:04:05Z",
        " 2026-01-02T03:04:05Z",
        "2026-01-02T03:04:05Z\n",
        "\uff12\uff10\uff12\uff16-01-02T03:04:05Z",  # non-ASCII (fullwidth) digits
        "2026-01-02T03:04:05." + "1" * 100 + "Z",  # longer than any real timestamp
        "",
        "yesterday",
    ],
)
def test_anything_else_is_refused(text: str, far_zone: None) -> None:
    assert timestamps.parse(text) is None
    assert timestamps.epoch(text) is None


@pytest.mark.parametrize("value", [None, 0, 1.5, True, [], {}, b"2026-01-02T03:04:05Z"])
def test_a_value_that_is_not_a_string_is_refused(value: Any) -> None:
    assert timestamps.parse(value) is None and timestamps.epoch(value) is None


def test_format_writes_what_parse_reads() -> None:
    assert timestamps.format_seconds(T) == "2026-01-02T03:04:05Z"
    assert timestamps.format_seconds(T + 0.9) == "2026-01-02T03:04:05Z"
    assert timestamps.format_micros(T + 0.5) == "2026-01-02T03:04:05.500000Z"
    for text in (timestamps.format_seconds(T), timestamps.format_micros(T + 0.25)):
        assert timestamps.epoch(text) is not None


def test_parsing_costs_microseconds() -> None:
    """The lease reads a timestamp on every watch event of a running Task: the parser stays in
    the microseconds (the figure: docs/security.md's untrusted-input table)."""
    worst = "9999-12-31T23:59:59." + "9" * 38 + "+23:59"  # MAX_CHARS long
    start = time.perf_counter()
    for _ in range(10_000):
        timestamps.parse(worst)
        timestamps.parse("2026-01-02T03:04:05Z")
    assert time.perf_counter() - start < 2.0  # generous: measured ~50 ms for the 20,000


# -- every call site ----------------------------------------------------------------------


def _creation(parse: Callable[[dict[str, Any], float], float]) -> Callable[[str], float | None]:
    """A call site that reads `metadata.creationTimestamp` as an age: back to the timestamp."""

    def read(text: str) -> float | None:
        now = T + 1000
        age = parse({"metadata": {"creationTimestamp": text}}, now)
        return None if age == 0.0 else now - age

    return read


def _job_age(text: str) -> float | None:
    now = datetime.fromtimestamp(T + 1000, UTC)
    age = jobfailures._age({"metadata": {"creationTimestamp": text}}, now)
    return None if age == 0.0 else T + 1000 - age


def _lease(text: str) -> float | None:
    parsed = lease._parse(text)
    return None if parsed is None else parsed.timestamp()


SITES: dict[str, Callable[[str], float | None]] = {
    "approvals.epoch": approvals.epoch,
    "retention.parse_time": retention.parse_time,
    "runner.parse_time": runner.parse_time,
    "jobspec._parse_time": jobspec._parse_time,
    "lease._parse": _lease,
    "references.age_seconds": _creation(references.age_seconds),
    "jobfailures._age": _job_age,
}


@pytest.mark.parametrize("site", sorted(SITES))
def test_every_call_site_refuses_a_zone_less_timestamp(site: str, far_zone: None) -> None:
    read = SITES[site]
    assert read("2026-01-02T03:04:05Z") == pytest.approx(T)
    assert read("2026-01-02T03:04:05") is None


@pytest.mark.parametrize("site", sorted(SITES))
def test_every_call_site_reads_offsets_and_fractions(site: str, far_zone: None) -> None:
    read = SITES[site]
    assert read("2026-01-02T05:04:05+02:00") == pytest.approx(T)
    assert read("2026-01-02T03:04:05.250Z") == pytest.approx(T + 0.25)
