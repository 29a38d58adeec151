"""ordo's HTTP path for model calls: JSON over one aiohttp session per event loop.

Why not the SDKs' own HTTP stack: their request building (options model, URL parsing, header
merging) and httpx's send machinery cost about 3x the whole bare `aiohttp` + `json` call, even
on the SDKs' aiohttp transport (figures in docs/decisions.md, "Model calls on aiohttp").

One session per event loop is shared by every model client in it, so Tasks reuse keep-alive
connections (and TLS sessions) instead of opening their own. What is shared is the connection
pool only, never what identifies a caller:

- credentials are headers of each request, built by each client from its own endpoint;
- cookies are never stored (`DummyCookieJar`): one tenant's `Set-Cookie` never reaches another's
  requests;
- redirects are not followed: a key is only ever sent to the URL its endpoint names (a 3xx
  answer is an HTTP error like any other).

A session lives while a client uses it: a client takes it at its first call and gives it back
on `close()` (or when it is collected); the last one out closes it.

Every read is bounded (`MAX_RESPONSE_BYTES`; error bodies are read up to
`MAX_ERROR_BODY_BYTES` and then dropped), before any JSON parsing.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from ..tls import shared_ssl_context

MAX_RESPONSE_BYTES = 32 * 1024 * 1024
"""Largest model answer read; a longer one is `ResponseTooLarge` (not retried)."""
MAX_ERROR_BODY_BYTES = 64 * 1024
"""How much of an error answer is read to find the provider's error type."""
MAX_CONNECTIONS = 1000
"""Open connections per event loop, all hosts together (the SDKs' default per client).
In-flight model calls are bounded by the operator's `--max-concurrent-tasks` first."""


def _user_agent() -> str:
    try:
        return f"ordo/{importlib.metadata.version('ordo')}"
    except importlib.metadata.PackageNotFoundError:
        return "ordo"


USER_AGENT = _user_agent()


class HttpStatusError(Exception):
    """The server answered with a status other than 2xx. Carries no body, only the status,
    the headers (for `Retry-After`) and the provider's error type as sent."""

    def __init__(self, status: int, headers: Mapping[str, str], error_type: str | None) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.headers = headers
        self.error_type = error_type


class ResponseTooLarge(ValueError):
    """The answer is longer than MAX_RESPONSE_BYTES."""


@dataclass
class _Shared:
    session: aiohttp.ClientSession
    users: int = 0


class SessionPool:
    """One aiohttp session per running event loop, counted by its users."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Shared] = (
            weakref.WeakKeyDictionary()
        )

    def acquire(self) -> aiohttp.ClientSession:
        """The running loop's session (made on first use); pair with `release`."""
        loop = asyncio.get_running_loop()
        shared = self._by_loop.get(loop)
        if shared is None or shared.session.closed:
            connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, ssl=shared_ssl_context())
            session = aiohttp.ClientSession(
                connector=connector,
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=True,
            )
            shared = self._by_loop[loop] = _Shared(session)
        shared.users += 1
        return shared.session

    async def release(self, session: aiohttp.ClientSession) -> None:
        """Give a session back; the last user closes it."""
        self._release_now(session)
        if session.closed or self._users(session):
            return
        await session.close()

    def release_later(
        self, loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession
    ) -> None:
        """`release` for a client collected without `close()`: the session is closed on its
        loop if that loop still runs (as the SDKs' clients did), else left to aiohttp."""
        self._release_now(session)
        if session.closed or self._users(session) or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(lambda: loop.create_task(session.close()))

    def users(self) -> dict[int, int]:
        """Users per session (by id), for tests and debugging."""
        return {id(s.session): s.users for s in self._by_loop.values()}

    def _users(self, session: aiohttp.ClientSession) -> int:
        return next((s.users for s in self._by_loop.values() if s.session is session), 0)

    def _release_now(self, session: aiohttp.ClientSession) -> None:
        for loop, shared in list(self._by_loop.items()):
            if shared.session is session:
                shared.users = max(0, shared.users - 1)
                if shared.users == 0:
                    del self._by_loop[loop]
                return


POOL = SessionPool()


class JsonEndpoint:
    """POSTs JSON to one URL with fixed headers over the loop's shared session.

    Build one per model client; `close()` gives its session back."""

    def __init__(self, url: str, headers: Mapping[str, str], params: Mapping[str, str]) -> None:
        self.url = URL(url).with_query(dict(params)) if params else URL(url)
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
            **headers,
        }
        self._proxy: URL | None = None
        self._proxy_auth: aiohttp.BasicAuth | None = None
        with contextlib.suppress(LookupError):  # HTTP(S)_PROXY / NO_PROXY, read once
            self._proxy, self._proxy_auth = get_env_proxy_for_url(self.url)
        self._session: aiohttp.ClientSession | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def _take_session(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            session = self._session = POOL.acquire()
            self._finalizer = weakref.finalize(
                self, POOL.release_later, asyncio.get_running_loop(), session
            )
        return session

    async def post(self, body: Mapping[str, Any]) -> Any:
        """The JSON answer to `body`. Raises HttpStatusError (non-2xx), aiohttp's
        ClientError (connection), ResponseTooLarge, or ValueError/RecursionError (not JSON)."""
        session = self._take_session()
        async with session.post(
            self.url,
            data=json.dumps(body).encode(),
            headers=self.headers,
            allow_redirects=False,
            proxy=self._proxy,
            proxy_auth=self._proxy_auth,
        ) as response:
            if not 200 <= response.status < 300:
                text = await read_bounded(response, MAX_ERROR_BODY_BYTES, truncate=True)
                raise HttpStatusError(response.status, response.headers, error_type(text))
            raw = await read_bounded(response, MAX_RESPONSE_BYTES)
        return json.loads(raw)

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        if self._finalizer is not None:
            self._finalizer.detach()
        await POOL.release(session)


async def read_bounded(
    response: aiohttp.ClientResponse, limit: int, *, truncate: bool = False
) -> bytes:
    """At most `limit` bytes of the body; more is ResponseTooLarge (or cut, with `truncate`)."""
    length = response.content_length
    if length is not None and length > limit and not truncate:
        raise ResponseTooLarge(f"the response is longer than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await response.content.read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            if truncate:
                return b"".join(chunks)[:limit]
            raise ResponseTooLarge(f"the response is longer than {limit} bytes")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def error_type(body: bytes) -> str | None:
    """The provider's error code or type from an error body (OpenAI `{"error": {"code",
    "type"}}`, Anthropic `{"type": "error", "error": {"type"}}`), unchecked: the caller keeps
    it only if it is a short identifier."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return None
    error = value.get("error") if isinstance(value, dict) else None
    if not isinstance(error, dict):
        return None
    for key in ("code", "type"):
        token = error.get(key)
        if isinstance(token, str | int) and not isinstance(token, bool):
            return str(token)
    return None
