"""The `redis` memory backend (redis.asyncio), same contract as InMemoryBackend.

Layout, per Memory prefix P (the `{P}` hash tag keeps one memory in one Redis Cluster slot):

    ordo:mem:{P}:v          hash   key -> value
    ordo:mem:{P}:w          hash   key -> the words indexed for it (space-separated)
    ordo:mem:{P}:k          zset   every key, score 0 (lexicographic listing)
    ordo:mem:{P}:i:<word>   set    keys whose key or value has <word>

A write runs as one Lua script (value, word list, index sets and key set change together).
Search takes the keys from the index sets of the query's words and ranks them exactly as the
in-memory backend does (occurrences of the query words, then key). Failures reach the model
as error tool results naming the error kind only.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError

from ..engine.tooling import ToolFailure
from ..errors import MemoryBackendError
from .base import Entry, words

_WRITE = """
local old = redis.call('HGET', KEYS[2], ARGV[1])
if old then
  for w in string.gmatch(old, '%S+') do redis.call('SREM', ARGV[3] .. w, ARGV[1]) end
end
for i = 4, #ARGV do redis.call('SADD', ARGV[3] .. ARGV[i], ARGV[1]) end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], table.concat(ARGV, ' ', 4))
redis.call('ZADD', KEYS[3], 0, ARGV[1])
return 1
"""
_MAX_QUERY_WORDS = 32
_FETCH_BATCH = 500


def _failure(exc: Exception) -> ToolFailure:
    return ToolFailure(f"the memory backend failed ({type(exc).__name__})")


def _score(key: str, value: str, terms: set[str]) -> int:
    tokens = words(value) + words(key)
    return sum(tokens.count(t) for t in terms)


def redis_host(url: str) -> str:
    """`host:port` of a redis URL (no user, password or database), or the socket path."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix socket {parts.path}"
    try:
        port = parts.port or 6379
    except ValueError:
        port = 6379
    host = parts.hostname or "localhost"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class RedisBackend:
    """Memory in Redis, scoped to one prefix."""

    def __init__(self, client: aioredis.Redis, prefix: str) -> None:
        self._redis = client
        self._base = f"ordo:mem:{{{prefix}}}"
        self._write = client.register_script(_WRITE)

    @classmethod
    async def connect(
        cls, url: str, password: str | None, prefix: str, *, owner: str | None = None
    ) -> RedisBackend:
        """Connect and ping. `owner` (e.g. "Memory 'notes'") prefixes a connection error,
        which names the host:port and never the password."""
        if not url:
            raise ValueError("a redis Memory needs spec.url")
        kwargs: dict[str, Any] = {
            "decode_responses": True,
            "socket_connect_timeout": 10,
            "socket_timeout": 30,
            # A couple of quick retries on connection errors, not the client's default ~4s.
            "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), 2),
        }
        if password:
            kwargs["password"] = password
        client = aioredis.Redis.from_url(url, **kwargs)
        try:
            await client.ping()
        except RedisError as exc:
            await client.aclose()
            who = f"{owner}: " if owner else ""
            raise MemoryBackendError(
                f"{who}cannot connect to the redis memory backend at {redis_host(url)} "
                f"({type(exc).__name__}); check spec.url and that the server is reachable"
            ) from None
        return cls(client, prefix)

    def _key(self, part: str) -> str:
        return f"{self._base}:{part}"

    async def read(self, key: str) -> str | None:
        try:
            value = await self._redis.hget(self._key("v"), key)  # type: ignore[misc]
        except RedisError as exc:
            raise _failure(exc) from None
        return None if value is None else str(value)

    async def write(self, key: str, value: str) -> None:
        indexed = sorted(set(words(key)) | set(words(value)))
        try:
            await self._write(
                keys=[self._key("v"), self._key("w"), self._key("k")],
                args=[key, value, self._key("i:"), *indexed],
            )
        except RedisError as exc:
            raise _failure(exc) from None

    async def search(self, query: str, limit: int = 5) -> list[Entry]:
        terms = set(words(query)[:_MAX_QUERY_WORDS])
        if not terms:
            return []
        try:
            candidates: set[str] = set()
            for term in terms:
                members = await self._redis.smembers(self._key(f"i:{term}"))  # type: ignore[misc]
                candidates.update(str(m) for m in members)
            keys = sorted(candidates)
            scored: list[tuple[int, str, str]] = []
            for start in range(0, len(keys), _FETCH_BATCH):
                batch = keys[start : start + _FETCH_BATCH]
                values = await self._redis.hmget(self._key("v"), batch)  # type: ignore[misc]
                for key, value in zip(batch, values, strict=True):
                    if value is None:
                        continue
                    score = _score(key, str(value), terms)
                    if score:
                        scored.append((-score, key, str(value)))
        except RedisError as exc:
            raise _failure(exc) from None
        scored.sort()
        return [Entry(k, v) for _, k, v in scored[:limit]]

    async def list(self, prefix: str = "", limit: int = 50) -> list[str]:
        low: str | bytes = f"[{prefix}" if prefix else "-"
        high: str | bytes = b"[" + prefix.encode() + b"\xff" if prefix else "+"
        try:
            keys = await self._redis.zrangebylex(self._key("k"), low, high, start=0, num=limit)
        except RedisError as exc:
            raise _failure(exc) from None
        return [str(k) for k in keys]

    async def close(self) -> None:
        await self._redis.aclose()
