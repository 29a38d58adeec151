"""The `postgres` memory backend (psycopg 3, async), same contract as InMemoryBackend.

All Memories share one table, isolated by their prefix:

    ordo_memory(prefix, key, value, search tsvector GENERATED from key and value, updated_at)
    PRIMARY KEY (prefix, key); GIN index on search

The table and index are created when missing (under an advisory lock, so that concurrent
first connections do not race). Search is PostgreSQL full text with the `simple`
configuration (no stemming or stop words, like the in-memory backend): a row matches when it
has ANY of the query's words (one `plainto_tsquery` per word, OR-ed; the words are those of
memory/base.py's `query_terms`, at most 32), best `ts_rank` first, then key. Ranking runs on
the server over the GIN index's matches; ordo reads at most MAX_SEARCH_RESULTS rows. Listing orders keys bytewise (`COLLATE "C"`). A dropped connection is reopened once
per operation; failures reach the model as error tool results naming the error kind only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ..engine.tooling import ToolFailure
from ..errors import MemoryBackendError
from .base import Entry, query_terms, result_limit

T = TypeVar("T")

TABLE = "ordo_memory"
_LOCK_ID = 0x6F72646F  # "ordo"
_SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
        prefix text NOT NULL,
        key text NOT NULL,
        value text NOT NULL,
        search tsvector GENERATED ALWAYS AS (to_tsvector('simple', key || ' ' || value)) STORED,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (prefix, key)
    )""",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_search ON {TABLE} USING gin (search)",
)


def _like_prefix(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


def postgres_host(url: str) -> str:
    """`host:port` of a connection URL or conninfo string (never the user or password)."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.Error:
        return "(unparseable spec.url)"
    host = str(info.get("host") or "localhost")
    port = str(info.get("port") or 5432)
    if host.startswith("/"):
        return f"unix socket {host}"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class PostgresBackend:
    """Memory in PostgreSQL, scoped to one prefix."""

    def __init__(
        self, connection: psycopg.AsyncConnection[Any], url: str, password: str | None, prefix: str
    ) -> None:
        self._conn = connection
        self._url = url
        self._password = password
        self._prefix = prefix

    @staticmethod
    async def _open(
        url: str, password: str | None, owner: str | None = None
    ) -> psycopg.AsyncConnection[Any]:
        kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": 10}
        if password:
            kwargs["password"] = password
        try:
            return await psycopg.AsyncConnection.connect(url, **kwargs)
        except psycopg.Error as exc:
            who = f"{owner}: " if owner else ""
            raise MemoryBackendError(
                f"{who}cannot connect to the postgres memory backend at {postgres_host(url)} "
                f"({type(exc).__name__}); check spec.url and that the server is reachable"
            ) from None

    @classmethod
    async def connect(
        cls, url: str, password: str | None, prefix: str, *, owner: str | None = None
    ) -> PostgresBackend:
        """Connect and create the table. `owner` (e.g. "Memory 'notes'") prefixes a
        connection error, which names the host:port and never the password."""
        if not url:
            raise ValueError("a postgres Memory needs spec.url")
        conn = await cls._open(url, password, owner)
        try:
            async with conn.transaction():
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))
                for statement in _SCHEMA:
                    await conn.execute(statement)  # type: ignore[arg-type]
        except psycopg.Error as exc:
            await conn.close()
            raise MemoryBackendError(
                f"cannot create the {TABLE} table ({type(exc).__name__})"
            ) from None
        return cls(conn, url, password, prefix)

    async def _run(self, operation: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
        """Run one operation; reopen a dropped connection once."""
        for attempt in (1, 2):
            try:
                if self._conn.closed:
                    self._conn = await self._open(self._url, self._password)
                return await operation(self._conn)
            except psycopg.OperationalError as exc:
                if attempt == 2 or not self._conn.closed:
                    raise ToolFailure(f"the memory backend failed ({type(exc).__name__})") from None
            except MemoryBackendError as exc:
                raise ToolFailure(f"the memory backend is unreachable ({exc})") from None
            except psycopg.Error as exc:
                raise ToolFailure(f"the memory backend failed ({type(exc).__name__})") from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def read(self, key: str) -> str | None:
        async def op(conn: psycopg.AsyncConnection[Any]) -> str | None:
            cur = await conn.execute(
                f"SELECT value FROM {TABLE} WHERE prefix = %s AND key = %s",  # type: ignore[arg-type]
                (self._prefix, key),
            )
            row = await cur.fetchone()
            return None if row is None else str(row[0])

        return await self._run(op)

    async def write(self, key: str, value: str) -> None:
        async def op(conn: psycopg.AsyncConnection[Any]) -> None:
            await conn.execute(
                f"""INSERT INTO {TABLE} (prefix, key, value) VALUES (%s, %s, %s)
                    ON CONFLICT (prefix, key)
                    DO UPDATE SET value = EXCLUDED.value, updated_at = now()""",  # type: ignore[arg-type]
                (self._prefix, key, value),
            )

        await self._run(op)

    async def search(self, query: str, limit: int = 5) -> list[Entry]:
        terms = query_terms(query)
        limit = result_limit(limit)
        if not terms or not limit:
            return []
        tsquery = " || ".join("plainto_tsquery('simple', %s)" for _ in terms)

        async def op(conn: psycopg.AsyncConnection[Any]) -> list[Entry]:
            cur = await conn.execute(
                f"""SELECT key, value FROM {TABLE}, (SELECT {tsquery}) AS q(query)
                    WHERE prefix = %s AND search @@ q.query
                    ORDER BY ts_rank(search, q.query) DESC, key COLLATE "C"
                    LIMIT %s""",  # type: ignore[arg-type]
                (*terms, self._prefix, limit),
            )
            return [Entry(str(k), str(v)) for k, v in await cur.fetchall()]

        return await self._run(op)

    async def list(self, prefix: str = "", limit: int = 50) -> list[str]:
        async def op(conn: psycopg.AsyncConnection[Any]) -> list[str]:
            cur = await conn.execute(
                f"""SELECT key FROM {TABLE}
                    WHERE prefix = %s AND key LIKE %s ESCAPE '\\'
                    ORDER BY key COLLATE "C" LIMIT %s""",  # type: ignore[arg-type]
                (self._prefix, _like_prefix(prefix), result_limit(limit)),
            )
            return [str(row[0]) for row in await cur.fetchall()]

        return await self._run(op)

    async def close(self) -> None:
        await self._conn.close()
