"""The retry policy's pure parts: Retry-After parsing, backoff, status classification."""

from __future__ import annotations

import email.utils
import time

import pytest

from ordo.providers.retry import (
    MAX_BACKOFF,
    RetryPolicy,
    parse_retry_after,
    safe_token,
    status_failure,
)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        (None, None),
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"Retry-After": "-4"}, 0.0),
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "nan"}, None),
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
        ({"retry-after-ms": "junk", "Retry-After": "2"}, 2.0),
    ],
)
def test_parse_retry_after(headers: dict[str, str] | None, expected: float | None) -> None:
    assert parse_retry_after(headers) == expected


def test_parse_retry_after_http_date() -> None:
    now = time.time()
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after({"Retry-After": date}, now=now) == pytest.approx(30, abs=1)
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert parse_retry_after({"Retry-After": past}, now=now) == 0.0


def test_backoff_doubles_with_bounded_jitter_and_a_cap() -> None:
    policy = RetryPolicy(max_attempts=10, backoff=1.0, timeout=5)
    for attempt, base in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0)]:
        wait = policy.backoff_before(attempt)
        assert base <= wait <= base * 1.2
    assert policy.backoff_before(20) <= MAX_BACKOFF * 1.2


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        *[(status, False) for status in (400, 401, 404, 408, 409, 422)],
        *[(status, True) for status in (429, 500, 502, 503, 529)],
    ],
)
def test_only_429_and_5xx_are_retryable(status: int, retryable: bool) -> None:
    assert status_failure(status, None, None).retryable is retryable


def test_safe_token_keeps_identifiers_only() -> None:
    assert safe_token("rate_limit_exceeded") == "rate_limit_exceeded"
    assert safe_token(429) == "429"
    assert safe_token("Incorrect API key provided: sk-123") is None
    assert safe_token(None) is None
    assert safe_token("x" * 65) is None
