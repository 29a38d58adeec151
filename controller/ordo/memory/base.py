"""The memory backend contract shared by in-memory, redis and postgres."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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
    return [w for w in "".join(ch.lower() if ch.isalnum() else " " for ch in text).split() if w]
