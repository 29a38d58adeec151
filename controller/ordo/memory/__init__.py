"""Memory backends (in-memory, redis, postgres) behind one contract."""

from __future__ import annotations

from ..api import Memory
from .base import Entry, MemoryBackend, chunk_text
from .inmemory import InMemoryBackend, shared_backend


def default_prefix(memory: Memory) -> str:
    return memory.spec.prefix or f"{memory.namespace}/{memory.name}"


async def open_backend(memory: Memory, password: str | None) -> MemoryBackend:
    """Connect to the backend a Memory object names."""
    prefix = default_prefix(memory)
    provider = memory.spec.provider
    if provider == "in-memory":
        return shared_backend(prefix)
    if provider == "redis":
        from .redis import RedisBackend

        return await RedisBackend.connect(
            memory.spec.url or "", password, prefix, owner=f"Memory {memory.name!r}"
        )
    if provider == "postgres":
        from .postgres import PostgresBackend

        return await PostgresBackend.connect(
            memory.spec.url or "", password, prefix, owner=f"Memory {memory.name!r}"
        )
    raise ValueError(f"unknown memory provider {provider!r}")


__all__ = [
    "Entry",
    "InMemoryBackend",
    "MemoryBackend",
    "chunk_text",
    "default_prefix",
    "open_backend",
]
