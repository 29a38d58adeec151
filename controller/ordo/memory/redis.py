"""The `redis` memory backend (redis.asyncio), same contract as InMemoryBackend.

Layout, per Memory prefix P (the `{P}` hash tag keeps one memory in one Redis Cluster slot):

    ordo:mem:{P}:v          hash   key -> value
    ordo:mem:{P}:w          hash   key -> the words indexed for it (space-separated)
    ordo:mem:{P}:k          zset   every key, score 0 (lexicographic listing)
    ordo:mem:{P}:z:<word>   zset   key -> occurrences of <word> in the entry's key and value
    ordo:mem:{P}:i:<word>   set    keys with <word>, as written before the z: index (an entry
                                   there counts one occurrence; rewriting it moves it to z:)
    ordo:mem:{P}:s          zset   scratch of a search (inside its script only)

A write runs as one Lua script (value, word list, index sets and key set change together).
A search is one Lua script too: it adds up the query words' index entries on the server
(ZUNIONSTORE) and returns the best `limit` keys with their values, ranked exactly as the
in-memory backend ranks (occurrences of the query words, then key), so ordo's event loop
handles at most MAX_SEARCH_RESULTS entries whatever the memory holds. A query word held by more
than MAX_TERM_ENTRIES entries is ignored (a stop word), which bounds the server's work too.
Failures reach the model as error tool results naming the error kind only.
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
from .base import MAX_TERM_ENTRIES, Entry, query_terms, result_limit, word_counts

_WRITE = """
local old = redis.call('HGET', KEYS[2], ARGV[1])
if old then
  for w in string.gmatch(old, '%S+') do
    redis.call('SREM', ARGV[3] .. w, ARGV[1])
    redis.call('ZREM', ARGV[4] .. w, ARGV[1])
  end
end
local indexed = {}
for i = 5, #ARGV, 2 do
  redis.call('ZADD', ARGV[4] .. ARGV[i], ARGV[i + 1], ARGV[1])
  indexed[#indexed + 1] = ARGV[i]
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], table.concat(indexed, ' '))
redis.call('ZADD', KEYS[3], 0, ARGV[1])
return 1
"""
# KEYS: scratch zset, values hash. ARGV: limit, most entries per word, then the index keys of
# each query word (z:<word>, i:<word>). Returns {keys, values}, best first.
_SEARCH = """
local sources = {}
for i = 3, #ARGV, 2 do
  local held = redis.call('ZCARD', ARGV[i]) + redis.call('SCARD', ARGV[i + 1])
  if held > 0 and held <= tonumber(ARGV[2]) then
    sources[#sources + 1] = ARGV[i]
    sources[#sources + 1] = ARGV[i + 1]
  end
end
if #sources == 0 then return {{}, {}} end
local args = {KEYS[1], #sources}
for _, key in ipairs(sources) do args[#args + 1] = key end
args[#args + 1] = 'WEIGHTS'
for _ = 1, #sources do args[#args + 1] = -1 end
redis.call('ZUNIONSTORE', unpack(args))
local found = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
redis.call('DEL', KEYS[1])
if #found == 0 then return {{}, {}} end
return {found, redis.call('HMGET', KEYS[2], unpack(found))}
"""


def _failure(exc: Exception) -> ToolFailure:
    return ToolFailure(f"the memory backend failed ({type(exc).__name__})")


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
        self._search = client.register_script(_SEARCH)

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
        counts = word_counts(key, value)
        pairs = [str(part) for word in sorted(counts) for part in (word, counts[word])]
        try:
            await self._write(
                keys=[self._key("v"), self._key("w"), self._key("k")],
                args=[key, value, self._key("i:"), self._key("z:"), *pairs],
            )
        except RedisError as exc:
            raise _failure(exc) from None

    async def search(self, query: str, limit: int = 5) -> list[Entry]:
        terms = query_terms(query)
        limit = result_limit(limit)
        if not terms or not limit:
            return []
        sources = [self._key(f"{kind}:{term}") for term in terms for kind in ("z", "i")]
        try:
            keys, values = await self._search(
                keys=[self._key("s"), self._key("v")],
                args=[limit, MAX_TERM_ENTRIES, *sources],
            )
        except RedisError as exc:
            raise _failure(exc) from None
        return [Entry(str(k), str(v)) for k, v in zip(keys, values, strict=True) if v is not None]

    async def list(self, prefix: str = "", limit: int = 50) -> list[str]:
        low: str | bytes = f"[{prefix}" if prefix else "-"
        high: str | bytes = b"[" + prefix.encode() + b"\xff" if prefix else "+"
        try:
            keys = await self._redis.zrangebylex(
                self._key("k"), low, high, start=0, num=result_limit(limit)
            )
        except RedisError as exc:
            raise _failure(exc) from None
        return [str(k) for k in keys]

    async def close(self) -> None:
        await self._redis.aclose()
