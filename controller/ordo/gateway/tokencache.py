"""Successful TokenReviews remembered for a short time, so a caller's requests do not each
cost the API server a review. Keyed by the token's SHA-256 (the token itself is not kept);
an entry lives at most `ttl` seconds (≤ 60) and never past the token's own `exp` when the
token is a JWT that states one (read without verification: it can only shorten the life of
an entry the API server already accepted). Bounded: the oldest entries go first. Failed
reviews are not cached (the per-address limit bounds what a flood of bad tokens costs)."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

MAX_TTL = 60.0
MAX_ENTRIES = 4096

T = TypeVar("T")


def token_expiry(token: str) -> float | None:
    """The `exp` claim (Unix seconds) of a JWT `token`, or None (not a JWT, no `exp`)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, UnicodeDecodeError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


class TokenCache(Generic[T]):
    def __init__(
        self,
        ttl: float,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not 0 <= ttl <= MAX_TTL:
            raise ValueError(f"the token cache TTL must be 0-{MAX_TTL:g} seconds, not {ttl:g}")
        self._ttl = ttl
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[T, float]] = OrderedDict()

    @staticmethod
    def _key(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def get(self, token: str) -> T | None:
        """What `token` was reviewed as, while the entry lives."""
        if self._ttl <= 0:
            return None
        key = self._key(token)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if self._clock() >= entry[1]:
            del self._entries[key]
            return None
        return entry[0]

    def put(self, token: str, value: T) -> None:
        """Remember a successful review of `token` (not at all if the token has expired)."""
        if self._ttl <= 0:
            return
        now = self._clock()
        until = now + self._ttl
        exp = token_expiry(token)
        if exp is not None:
            until = min(until, exp)
        if until <= now:
            return
        key = self._key(token)
        self._entries.pop(key, None)
        self._entries[key] = (value, until)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
