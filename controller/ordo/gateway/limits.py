"""A token bucket per key: `rate` requests a second, bursts of `burst`. The gateway keeps
one per client address (checked before the TokenReview) and one per authenticated caller
(before any other Kubernetes API request of the call); it answers 429 past either."""

from __future__ import annotations

import time
from collections.abc import Callable

MAX_CALLERS = 10000
"""Buckets kept; past it the fullest (idle) ones are dropped first."""


class CallerLimits:
    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}

    def admit(self, caller: str) -> bool:
        """Take one token of `caller`'s bucket; False when it is empty (rate 0: no limit)."""
        if self._rate <= 0:
            return True
        now = self._clock()
        tokens, then = self._buckets.get(caller, (self._burst, now))
        tokens = min(self._burst, tokens + (now - then) * self._rate)
        if len(self._buckets) >= MAX_CALLERS and caller not in self._buckets:
            self._buckets = dict(
                sorted(self._buckets.items(), key=lambda kv: kv[1][0])[: MAX_CALLERS // 2]
            )
        if tokens < 1.0:
            self._buckets[caller] = (tokens, now)
            return False
        self._buckets[caller] = (tokens - 1.0, now)
        return True
