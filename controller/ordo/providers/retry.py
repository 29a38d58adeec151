"""Bounded retries of one model call (DESIGN §6), shared by the openai and anthropic adapters.

The SDKs are built with `max_retries=0`: this module owns every retry, so the count of
requests a provider sees is exactly what the endpoint's `retry.maxAttempts` says.

- 429, 5xx, connection errors and attempts slower than the endpoint `timeout` are retried,
  with exponential backoff (`retry.backoff`, doubling), or after the server's `Retry-After`
  (`retry-after-ms`, or `Retry-After` in seconds or as an HTTP date) when it sends one.
- Any other 4xx, or a response that cannot be read, ends the call at once: `ModelError`.
- When the attempts run out, or the wait before the next one would pass the Task deadline or
  exceed `MAX_RETRY_AFTER`, the call ends with `ModelUnavailable`.
- Each attempt is bounded by the endpoint `timeout` and by the Task deadline. An attempt cut
  short by the Task deadline raises `TimeoutError`, so the run ends `Timeout`.

Messages name the status code and the provider's error type, never the request, the
response body or the key.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from ..api import ModelEndpoint, parse_duration
from ..errors import ModelError, ModelUnavailable

log = logging.getLogger("ordo.providers")

T = TypeVar("T")

MAX_BACKOFF = 30.0
"""Longest wait ordo chooses by itself between attempts."""
MAX_RETRY_AFTER = 120.0
"""Longest `Retry-After` honoured; a server asking for more ends the call (ModelUnavailable)."""
DEADLINE_GRACE = 0.1
"""An attempt bounded by the Task deadline gets this much longer, so that the run's own
deadline (which ends the run `Timeout`) fires first."""
_SAFE_TOKEN = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How one endpoint's model calls are bounded and retried."""

    max_attempts: int = 3
    backoff: float = 1.0
    timeout: float = 60.0

    @classmethod
    def from_endpoint(cls, endpoint: ModelEndpoint) -> RetryPolicy:
        spec = endpoint.spec
        return cls(
            max_attempts=spec.retry.max_attempts,
            backoff=parse_duration(spec.retry.backoff),
            timeout=parse_duration(spec.timeout),
        )

    def backoff_before(self, attempt: int) -> float:
        """The wait before attempt `attempt + 1` when the server gave no Retry-After:
        exponential, with up to 20% jitter so that many Tasks do not retry in step."""
        base = min(self.backoff * float(2 ** (attempt - 1)), MAX_BACKOFF)
        return base * (1 + 0.2 * random.random())


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed attempt, described without content."""

    retryable: bool
    description: str
    retry_after: float | None = None


def safe_token(value: Any) -> str | None:
    """A provider error type or code, if it is a short identifier (never free text)."""
    if isinstance(value, str | int) and _SAFE_TOKEN.match(str(value)):
        return str(value)
    return None


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms) / 1000
            if math.isfinite(value):
                return max(0.0, value)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        value = float(raw)
        return max(0.0, value) if math.isfinite(value) else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def status_failure(status: int, error_type: str | None, retry_after: float | None) -> Failure:
    """The failure of an HTTP error answer: 429 and 5xx are retryable, other codes are not."""
    detail = f"HTTP {status}" + (f" ({error_type})" if error_type else "")
    return Failure(status == 429 or status >= 500, detail, retry_after)


async def call_with_retries(
    attempt: Callable[[float], Awaitable[T]],
    classify: Callable[[Exception], Failure | None],
    policy: RetryPolicy,
    deadline: float | None,
    what: str,
) -> T:
    """Run `attempt(timeout)` until it returns, retrying per `policy`.

    `attempt` gets the seconds it may take (for the SDK's own timeout, a backstop);
    `classify` turns an exception into a Failure, or None to let it propagate.
    `deadline` is event-loop time (`loop.time()`), as in ModelRequest.
    """
    loop = asyncio.get_running_loop()
    attempts = max(1, policy.max_attempts)
    for n in range(1, attempts + 1):
        limit = policy.timeout
        by_deadline = False
        if deadline is not None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError(f"{what}: the Task deadline passed before attempt {n}")
            if remaining < limit:
                limit, by_deadline = remaining + DEADLINE_GRACE, True
        try:
            async with asyncio.timeout(limit):
                return await attempt(limit + 1.0)
        except TimeoutError:
            if by_deadline:
                raise TimeoutError(f"{what}: no answer before the Task deadline") from None
            failure = Failure(True, f"no answer within {policy.timeout:g}s (timeout)")
        except Exception as exc:
            classified = classify(exc)
            if classified is None:
                raise
            failure = classified
        if not failure.retryable:
            raise ModelError(f"{what}: {failure.description}")
        if n == attempts:
            raise ModelUnavailable(
                f"{what}: {failure.description}; gave up after {n} attempt(s) (retry.maxAttempts)"
            )
        wait = failure.retry_after
        if wait is None:
            wait = policy.backoff_before(n)
        elif wait > MAX_RETRY_AFTER:
            raise ModelUnavailable(
                f"{what}: {failure.description}; Retry-After {wait:g}s is longer than "
                f"{MAX_RETRY_AFTER:g}s, not retried ({n} attempt(s))"
            )
        if deadline is not None and loop.time() + wait >= deadline:
            raise ModelUnavailable(
                f"{what}: {failure.description}; waiting {wait:g}s for attempt {n + 1} would "
                f"pass the Task deadline ({n} attempt(s))"
            )
        log.info(
            "model call attempt %d/%d failed: %s; retrying in %.2fs",
            n,
            attempts,
            failure.description,
            wait,
            extra={"attempt": n, "maxAttempts": attempts},
        )
        await asyncio.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover
