"""In-process memory: lives as long as the process (one `ordo run`, or the operator)."""

from __future__ import annotations

import asyncio

from .base import Entry, words


class InMemoryBackend:
    """Dict-backed memory; instances that share a `store` dict share data."""

    def __init__(self, store: dict[str, str] | None = None) -> None:
        self._data: dict[str, str] = store if store is not None else {}
        self._lock = asyncio.Lock()

    async def read(self, key: str) -> str | None:
        return self._data.get(key)

    async def write(self, key: str, value: str) -> None:
        async with self._lock:
            self._data[key] = value

    async def search(self, query: str, limit: int = 5) -> list[Entry]:
        terms = set(words(query))
        if not terms:
            return []
        scored = []
        for key, value in self._data.items():
            tokens = words(value) + words(key)
            score = sum(tokens.count(t) for t in terms)
            if score:
                scored.append((-score, key, value))
        scored.sort()
        return [Entry(k, v) for _, k, v in scored[:limit]]

    async def list(self, prefix: str = "", limit: int = 50) -> list[str]:
        return sorted(k for k in self._data if k.startswith(prefix))[:limit]

    async def close(self) -> None:
        return None


_SHARED: dict[str, dict[str, str]] = {}


def shared_backend(scope: str) -> InMemoryBackend:
    """A backend over the process-wide store of one Memory object (`namespace/name`)."""
    return InMemoryBackend(_SHARED.setdefault(scope, {}))
