"""In-process memory: lives as long as the process (one `ordo run`, or the operator).

Each Memory's data is a `MemoryStore`: the values, and an inverted index from each word to
the entries holding it with its count there (built when an entry is written, from its key and
value). A search adds up the counts of the query's words (at most MAX_QUERY_TERMS, each held
by at most MAX_INMEMORY_ENTRIES entries), so it costs at most their product in dictionary
steps, whatever the texts hold; a write costs what its text does. The store is capped
(MAX_INMEMORY_ENTRIES, MAX_INMEMORY_CHARS): it is the operator's own memory.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from ..engine.tooling import ToolFailure
from .base import (
    MAX_INMEMORY_CHARS,
    MAX_INMEMORY_ENTRIES,
    Entry,
    query_terms,
    result_limit,
    word_counts,
)


@dataclass
class MemoryStore:
    """One Memory's data; backends opened on the same store share it."""

    values: dict[str, str] = field(default_factory=dict)
    postings: dict[str, dict[str, int]] = field(default_factory=dict)
    """word -> {key: occurrences of the word in that entry's key and value}"""
    indexed: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """key -> the words indexed for it (to take them out when it is overwritten)"""
    chars: int = 0

    def put(self, key: str, value: str) -> None:
        old = self.values.get(key)
        if old is None and len(self.values) >= MAX_INMEMORY_ENTRIES:
            raise ToolFailure(
                f"the in-memory Memory holds {MAX_INMEMORY_ENTRIES} entries, its most; "
                "overwrite an existing key, or use a redis or postgres Memory for more"
            )
        chars = self.chars + len(key) + len(value) - (0 if old is None else len(key) + len(old))
        if chars > MAX_INMEMORY_CHARS:
            raise ToolFailure(
                f"the in-memory Memory holds at most {MAX_INMEMORY_CHARS} characters; "
                "write less, or use a redis or postgres Memory"
            )
        for word in self.indexed.pop(key, ()):
            keys = self.postings[word]
            del keys[key]
            if not keys:
                del self.postings[word]
        counts = word_counts(key, value)
        for word, n in counts.items():
            self.postings.setdefault(word, {})[key] = n
        self.indexed[key] = tuple(counts)
        self.values[key] = value
        self.chars = chars


class InMemoryBackend:
    """Memory in a MemoryStore of this process."""

    def __init__(self, store: MemoryStore | None = None) -> None:
        self._store = store if store is not None else MemoryStore()

    async def read(self, key: str) -> str | None:
        return self._store.values.get(key)

    async def write(self, key: str, value: str) -> None:
        self._store.put(key, value)

    async def search(self, query: str, limit: int = 5) -> list[Entry]:
        scores: dict[str, int] = {}
        for term in query_terms(query):
            for key, n in self._store.postings.get(term, {}).items():
                scores[key] = scores.get(key, 0) + n
        best = heapq.nsmallest(result_limit(limit), scores.items(), key=_rank)
        values = self._store.values
        return [Entry(key, values[key]) for key, _ in best]

    async def list(self, prefix: str = "", limit: int = 50) -> list[str]:
        keys = (k for k in self._store.values if k.startswith(prefix))
        return heapq.nsmallest(result_limit(limit), keys)

    async def close(self) -> None:
        return None


def _rank(item: tuple[str, int]) -> tuple[int, str]:
    """Most occurrences first, then by key."""
    return -item[1], item[0]


_SHARED: dict[str, MemoryStore] = {}


def shared_backend(scope: str) -> InMemoryBackend:
    """A backend over the process-wide store of one Memory object (`namespace/name`)."""
    return InMemoryBackend(_SHARED.setdefault(scope, MemoryStore()))
