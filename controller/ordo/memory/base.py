"""The memory backend contract shared by in-memory, redis and postgres, and its caps.

A search's cost is bounded the same way in every backend (docs/security.md, "Untrusted
input"): the query counts up to `MAX_QUERY_CHARS` characters and of those at most
`MAX_QUERY_TERMS` distinct words (the rest is ignored, deterministically), at most
`MAX_SEARCH_RESULTS` entries come back (`MAX_RESULT_CHARS` of their values), and an entry is scored from the word counts kept
when it was written, never by reading its text again. The in-memory backend holds at most
`MAX_INMEMORY_ENTRIES` entries and `MAX_INMEMORY_CHARS` characters per Memory (it lives in the
operator's own memory); redis and postgres rank on their server from their index.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Protocol

MAX_QUERY_CHARS = 1024
"""Characters of a search query that count; `memory_search` refuses a longer one."""
MAX_QUERY_TERMS = 32
"""Distinct words of a query that count, the first ones; later words are ignored."""
MAX_SEARCH_RESULTS = 50
"""Most entries one search or list returns (a larger `limit` is this)."""
MAX_RESULT_CHARS = 65_536
"""Characters of values one `memory_search` result carries, best entries first; a value cut
to fit is marked `"truncated": true` (`memory_read` returns it whole)."""
MAX_TERM_ENTRIES = 10_000
"""A query word found in more entries than this is too common to rank by: it is ignored,
like a stop word (redis; an in-memory Memory never holds more entries)."""
MAX_INMEMORY_ENTRIES = 10_000
"""Entries one in-memory Memory holds; writing a new key beyond it is a tool error."""
MAX_INMEMORY_CHARS = 16 * 1024 * 1024
"""Characters (keys and values) one in-memory Memory holds; a write beyond it is a tool error."""


@dataclass(frozen=True, slots=True)
class Entry:
    key: str
    value: str


class MemoryBackend(Protocol):
    """A key/value store with text search, scoped to one Memory object (its prefix)."""

    async def read(self, key: str) -> str | None: ...

    async def write(self, key: str, value: str) -> None: ...

    async def search(self, query: str, limit: int = 5) -> list[Entry]:
        """Entries whose value matches the words of `query`, best first."""
        ...

    async def list(self, prefix: str = "", limit: int = 50) -> list[str]:
        """Keys starting with `prefix`, sorted."""
        ...

    async def close(self) -> None: ...


def chunk_text(text: str, size: int, overlap: int) -> list[str]:
    """Split `text` into chunks of at most `size` characters sharing `overlap` characters,
    preferring to cut at whitespace."""
    if size <= 0 or overlap >= size:
        raise ValueError("chunk size must be positive and larger than the overlap")
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        if end < len(text):
            cut = text.rfind(" ", start + size // 2, end)
            if cut > start:
                end = cut
        chunks.append(text[start:end].strip())
        if end >= len(text):
            break
        start = max(end - overlap, start + 1)
    return [c for c in chunks if c]


def words(text: str) -> list[str]:
    """The lower-cased alphanumeric words of `text` (the index's and the query's words)."""
    return [w for w in "".join(ch.lower() if ch.isalnum() else " " for ch in text).split() if w]


def query_terms(query: str) -> list[str]:
    """The words a search looks for: the distinct words of the first MAX_QUERY_CHARS
    characters of `query`, at most MAX_QUERY_TERMS of them, in order."""
    return list(dict.fromkeys(words(query[:MAX_QUERY_CHARS])))[:MAX_QUERY_TERMS]


def word_counts(key: str, value: str) -> Counter[str]:
    """How often each word occurs in an entry's key and value: its score for a query is the
    sum of the counts of the query's words."""
    return Counter(words(value) + words(key))


def result_limit(limit: int) -> int:
    """`limit` within 0..MAX_SEARCH_RESULTS."""
    return max(0, min(int(limit), MAX_SEARCH_RESULTS))
