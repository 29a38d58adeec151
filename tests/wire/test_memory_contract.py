"""One contract, three memory backends: in-memory, redis and postgres (real servers).

Redis and PostgreSQL come from `scripts/services start` (ORDO_TEST_REDIS_URL,
ORDO_TEST_POSTGRES_URL, both with a password that the tests pass separately, as a Secret
would). Without them the redis/postgres cases fail in CI and skip locally.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit, urlunsplit

import pytest
from tests.support.stall import StallWatchdog
from tests.support.wire import service_url

from ordo.api import Memory
from ordo.engine.tooling import ToolFailure
from ordo.errors import MemoryBackendError
from ordo.memory import InMemoryBackend, MemoryBackend, open_backend
from ordo.memory.base import MAX_QUERY_CHARS, MAX_QUERY_TERMS, MAX_SEARCH_RESULTS, MAX_TERM_ENTRIES
from ordo.memory.inmemory import MemoryStore
from ordo.memory.postgres import TABLE, PostgresBackend
from ordo.memory.redis import RedisBackend
from ordo.tools.memory_tools import memory_bindings

Opener = Callable[[str], Awaitable[MemoryBackend]]


def split_password(url: str) -> tuple[str, str | None]:
    """The URL without its password, and the password (passed as a Secret would be)."""
    parts = urlsplit(url)
    password = parts.password
    host = parts.hostname or ""
    netloc = (f"{parts.username}@" if parts.username else "") + host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc)), password


def memory_object(provider: str, url: str | None, prefix: str) -> Memory:
    spec: dict[str, object] = {"provider": provider, "prefix": prefix}
    if url:
        spec["url"] = url
    return Memory.model_validate(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Memory",
            "metadata": {"name": "mem", "namespace": "wire"},
            "spec": spec,
        }
    )


async def _cleanup(kind: str, prefixes: list[str]) -> None:
    if kind == "redis":
        import redis.asyncio as aioredis

        url, password = split_password(service_url("ORDO_TEST_REDIS_URL"))
        client = aioredis.Redis.from_url(url, password=password)
        for prefix in prefixes:
            keys = [k async for k in client.scan_iter(match=f"ordo:mem:{{{prefix}}}:*")]
            if keys:
                await client.delete(*keys)
        await client.aclose()
    elif kind == "postgres":
        import psycopg

        url, password = split_password(service_url("ORDO_TEST_POSTGRES_URL"))
        async with await psycopg.AsyncConnection.connect(
            url, password=password, autocommit=True
        ) as conn:
            for prefix in prefixes:
                await conn.execute(f"DELETE FROM {TABLE} WHERE prefix = %s", (prefix,))


@pytest.fixture(
    params=[
        "in-memory",
        pytest.param("redis", marks=pytest.mark.services),
        pytest.param("postgres", marks=pytest.mark.services),
    ]
)
async def opener(request: pytest.FixtureRequest) -> AsyncIterator[Opener]:
    """`await opener(prefix)` connects a backend of the parametrised kind to a fresh prefix
    (the same name maps to the same prefix within one test); everything is closed and
    deleted afterwards."""
    kind: str = request.param
    url = None
    if kind == "redis":
        url = service_url("ORDO_TEST_REDIS_URL")
    elif kind == "postgres":
        url = service_url("ORDO_TEST_POSTGRES_URL")
    run = uuid.uuid4().hex[:8]
    shared: dict[str, MemoryStore] = {}
    opened: list[MemoryBackend] = []
    prefixes: list[str] = []

    async def open_(name: str) -> MemoryBackend:
        prefix = f"wire-{run}/{name}"
        prefixes.append(prefix)
        if kind == "in-memory":
            backend: MemoryBackend = InMemoryBackend(shared.setdefault(prefix, MemoryStore()))
        else:
            assert url is not None
            bare, password = split_password(url)
            backend = await open_backend(memory_object(kind, bare, prefix), password)
        opened.append(backend)
        return backend

    yield open_
    for backend in opened:
        await backend.close()
    await _cleanup(kind, prefixes)


async def test_read_missing_is_none(opener: Opener) -> None:
    memory = await opener("m")
    assert await memory.read("nothing") is None


async def test_write_read_and_overwrite(opener: Opener) -> None:
    memory = await opener("m")
    await memory.write("note", "first")
    assert await memory.read("note") == "first"
    await memory.write("note", "second")
    assert await memory.read("note") == "second"
    assert await memory.list() == ["note"]


async def test_values_round_trip_exactly(opener: Opener) -> None:
    memory = await opener("m")
    values = {
        "unicode": "Grüße, 世界 — ✓",
        "whitespace": "  leading and trailing \n\t ",
        "empty": "",
        "json": '{"a": [1, 2], "b": null}',
        "large": "x" * 65536,
        "sql": "'; DROP TABLE ordo_memory; --",
        "lua": "]]) redis.call('FLUSHALL') --",
    }
    for key, value in values.items():
        await memory.write(key, value)
    for key, value in values.items():
        assert await memory.read(key) == value


async def test_list_is_sorted_filtered_and_limited(opener: Opener) -> None:
    memory = await opener("m")
    for key in ["b/2", "a/1", "b/1", "c", "b/10", "a_b", "a%b", "axb"]:
        await memory.write(key, "v")
    assert await memory.list() == ["a%b", "a/1", "a_b", "axb", "b/1", "b/10", "b/2", "c"]
    assert await memory.list("b/") == ["b/1", "b/10", "b/2"]
    assert await memory.list("b/", limit=2) == ["b/1", "b/10"]
    assert await memory.list("a_") == ["a_b"]  # `_` and `%` are not wildcards
    assert await memory.list("a%") == ["a%b"]
    assert await memory.list("zzz") == []
    assert await memory.list(limit=3) == ["a%b", "a/1", "a_b"]


async def test_search_matches_words_best_first(opener: Opener) -> None:
    memory = await opener("m")
    await memory.write("k1", "the kubernetes operator runs agents")
    await memory.write("k2", "Kubernetes, kubernetes and more KUBERNETES agents")
    await memory.write("k3", "nothing relevant here")
    await memory.write("k4", "agents only")
    found = await memory.search("kubernetes agents")
    assert [e.key for e in found] == ["k2", "k1", "k4"]
    assert found[0].value == "Kubernetes, kubernetes and more KUBERNETES agents"
    assert [e.key for e in await memory.search("kubernetes agents", limit=1)] == ["k2"]
    assert await memory.search("absent") == []
    assert await memory.search("   ") == []
    assert await memory.search("!!! ???") == []


async def test_search_ties_are_ordered_by_key(opener: Opener) -> None:
    memory = await opener("m")
    for key in ["c", "a", "b"]:
        await memory.write(key, "same words")
    assert [e.key for e in await memory.search("words")] == ["a", "b", "c"]


async def test_search_sees_keys_and_forgets_overwritten_words(opener: Opener) -> None:
    memory = await opener("m")
    await memory.write("runbook-redis", "restart the primary")
    assert [e.key for e in await memory.search("runbook")] == ["runbook-redis"]
    await memory.write("doc", "old topic")
    await memory.write("doc", "new subject")
    assert await memory.search("old") == []
    assert [e.key for e in await memory.search("subject")] == ["doc"]


async def test_prefixes_isolate_memories(opener: Opener) -> None:
    one = await opener("team-a")
    two = await opener("team-a:i")  # looks like an internal key of team-a in naive layouts
    await one.write("v", "alpha secret")
    await two.write("v", "beta")
    assert await one.read("v") == "alpha secret"
    assert await two.read("v") == "beta"
    assert await two.search("alpha") == []
    assert await one.list() == ["v"] and await two.list() == ["v"]


async def test_the_same_prefix_shares_data_across_connections(opener: Opener) -> None:
    first = await opener("shared")
    second = await opener("shared")
    await first.write("k", "written by the first")
    assert await second.read("k") == "written by the first"
    assert [e.key for e in await second.search("first")] == ["k"]


async def test_concurrent_writes(opener: Opener) -> None:
    memory = await opener("m")
    await asyncio.gather(*(memory.write(f"k{i:02d}", f"value number {i}") for i in range(40)))
    assert len(await memory.list(limit=50)) == 40
    await asyncio.gather(*(memory.write("same", f"version {i}") for i in range(20)))
    final = await memory.read("same")
    assert final is not None
    found = await memory.search("version")
    assert [e.key for e in found] == ["same"] and found[0].value == final


async def test_memory_tools_ingest_then_search(opener: Opener) -> None:
    memory = await opener("m")
    tools = {b.name: b for b in memory_bindings(memory, ["ingest", "search", "list", "read"])}
    text = " ".join(f"sentence {i} about topic{i % 3}" for i in range(200))
    await tools["memory_ingest"].executor({"source": "doc", "text": text})
    keys = await memory.list("doc#")
    assert keys and keys[0] == "doc#0000"
    out = await tools["memory_search"].executor({"query": "topic2", "limit": 3})
    assert "topic2" in out.content
    with pytest.raises(ToolFailure):
        await tools["memory_read"].executor({"key": "missing"})


# --- the caps every backend shares (memory/base.py) ---------------------------------------


async def test_search_counts_the_first_distinct_query_words_only(opener: Opener) -> None:
    memory = await opener("m")
    await memory.write("k", "target")
    others = " ".join(f"other{i}" for i in range(MAX_QUERY_TERMS))
    assert await memory.search(f"{others} target") == []  # the 33rd distinct word
    repeated = " ".join(["other0"] * 100)
    assert [e.key for e in await memory.search(f"{repeated} target")] == ["k"]


async def test_search_reads_the_first_query_characters_only(opener: Opener) -> None:
    memory = await opener("m")
    await memory.write("k", "target")
    assert await memory.search("-" * MAX_QUERY_CHARS + " target") == []
    assert [e.key for e in await memory.search("-" * (MAX_QUERY_CHARS - 7) + " target")] == ["k"]


async def test_search_and_list_return_at_most_the_result_cap(opener: Opener) -> None:
    memory = await opener("m")
    await asyncio.gather(*(memory.write(f"k{i:03d}", "word") for i in range(60)))
    found = await memory.search("word", limit=1000)
    assert [e.key for e in found] == [f"k{i:03d}" for i in range(MAX_SEARCH_RESULTS)]
    assert len(await memory.list(limit=1000)) == MAX_SEARCH_RESULTS


async def test_search_ranks_by_occurrences_over_many_entries(opener: Opener) -> None:
    memory = await opener("m")
    for i in range(300):
        await memory.write(f"k{i:03d}", " ".join(["word"] * (i % 7 + 1)))
    found = await memory.search("word", limit=5)
    if memory.__class__.__name__ == "PostgresBackend":  # ts_rank: a different formula
        assert all(e.value.count("word") == 7 for e in found[:3])
    else:
        assert [e.key for e in found] == ["k006", "k013", "k020", "k027", "k034"]


@pytest.mark.services
async def test_redis_ignores_a_word_too_common_to_rank_by() -> None:
    """A word held by more than MAX_TERM_ENTRIES entries is a stop word: the server does not
    add up its index (bounded work on the shared Redis), the other words still count."""
    url, password = split_password(service_url("ORDO_TEST_REDIS_URL"))
    prefix = f"wire-{uuid.uuid4().hex[:8]}"
    backend = await RedisBackend.connect(url, password, prefix)
    try:
        for start in range(0, MAX_TERM_ENTRIES + 1, 40):
            stop = min(start + 40, MAX_TERM_ENTRIES + 1)
            await asyncio.gather(
                *(backend.write(f"k{i:05d}", "common") for i in range(start, stop))
            )
        await backend.write("rare", "common rare")
        async with StallWatchdog() as watchdog:
            assert await backend.search("common") == []
            assert [e.key for e in await backend.search("common rare")] == ["rare"]
        assert watchdog.longest < 1.0, watchdog.report()
    finally:
        await backend.close()
        await _cleanup("redis", [prefix])


@pytest.mark.services
async def test_redis_entries_written_before_the_counted_index_are_found_and_moved() -> None:
    """The index before issue 23 was one set per word (`i:<word>`); an entry there counts one
    occurrence per word and moves to the counted index (`z:<word>`) when it is rewritten."""
    import redis.asyncio as aioredis

    url, password = split_password(service_url("ORDO_TEST_REDIS_URL"))
    prefix = f"wire-{uuid.uuid4().hex[:8]}"
    base = f"ordo:mem:{{{prefix}}}"
    client = aioredis.Redis.from_url(url, password=password, decode_responses=True)
    await client.hset(f"{base}:v", "old", "legacy legacy text")  # type: ignore[misc]
    await client.hset(f"{base}:w", "old", "legacy text")  # type: ignore[misc]
    await client.zadd(f"{base}:k", {"old": 0})
    for word in ("legacy", "text"):
        await client.sadd(f"{base}:i:{word}", "old")  # type: ignore[misc]
    backend = await RedisBackend.connect(url, password, prefix)
    try:
        await backend.write("new", "legacy legacy legacy")
        assert [e.key for e in await backend.search("legacy")] == ["new", "old"]
        await backend.write("old", "legacy legacy legacy legacy text")
        assert [e.key for e in await backend.search("legacy")] == ["old", "new"]
        assert await client.smembers(f"{base}:i:legacy") == set()  # type: ignore[misc]
        assert await client.zscore(f"{base}:z:legacy", "old") == 4
    finally:
        await backend.close()
        await client.aclose()
        await _cleanup("redis", [prefix])


@pytest.mark.services
async def test_redis_unreachable_or_wrong_password_fails_cleanly() -> None:
    url, _ = split_password(service_url("ORDO_TEST_REDIS_URL"))
    with pytest.raises(MemoryBackendError) as caught:
        await RedisBackend.connect(url, "wrong-password", "p")
    assert "wrong-password" not in str(caught.value)
    with pytest.raises(MemoryBackendError):
        await RedisBackend.connect("redis://127.0.0.1:1/0", None, "p")


@pytest.mark.services
async def test_postgres_wrong_password_fails_cleanly() -> None:
    url, _ = split_password(service_url("ORDO_TEST_POSTGRES_URL"))
    with pytest.raises(MemoryBackendError) as caught:
        await PostgresBackend.connect(url, "wrong-password", "p")
    assert "wrong-password" not in str(caught.value)


@pytest.mark.services
async def test_postgres_reconnects_after_the_connection_drops() -> None:
    url, password = split_password(service_url("ORDO_TEST_POSTGRES_URL"))
    prefix = f"wire-{uuid.uuid4().hex[:8]}"
    backend = await PostgresBackend.connect(url, password, prefix)
    try:
        await backend.write("k", "v")
        before = backend._conn
        import psycopg

        async with await psycopg.AsyncConnection.connect(
            url, password=password, autocommit=True
        ) as admin:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND datname = current_database() "
                "AND application_name = '' AND state = 'idle'"
            )
        await asyncio.sleep(0.2)
        assert await backend.read("k") == "v"
        assert backend._conn is not before  # the dropped connection was replaced
    finally:
        await backend.close()
        await _cleanup("postgres", [prefix])


async def test_redis_failure_during_an_operation_is_a_tool_failure() -> None:
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    # A backend whose server went away: every operation is a ToolFailure naming the kind.
    client = aioredis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    backend = RedisBackend(client, "p")
    for operation in (
        backend.read("k"),
        backend.write("k", "v"),
        backend.search("words"),
        backend.list(),
    ):
        with pytest.raises(ToolFailure, match=r"the memory backend failed \(ConnectionError\)"):
            await operation
    await backend.close()
