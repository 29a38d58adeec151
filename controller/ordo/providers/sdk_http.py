"""The HTTP client under the `openai` and `anthropic` SDKs: an `httpx2.AsyncClient` on ordo's
aiohttp transport (sdk_transport.py), one per SDK per event loop, shared by every model client
of that SDK in the loop. Why this configuration: docs/decisions.md ("Model calls through the
SDKs").

Tasks reuse keep-alive connections (and TLS sessions) instead of opening their own. What is
shared is the connection pool only, never what identifies a caller:

- credentials are headers the SDK client of each model client builds for each request from its
  own endpoint and key (the shared client has no default auth or credential header);
- cookies are never stored, neither by httpx2 (`_NoCookies` policy) nor by the aiohttp session
  under it (`DummyCookieJar`): one tenant's `Set-Cookie` never reaches another's requests;
- redirects are not followed (`follow_redirects=False`): a key goes only to the URL its
  endpoint names; a 3xx is an HTTP error like any other.

A shared client lives while a model client uses it: a model client takes it at its first call
(`Lease.take`) and gives it back on `close()` (or when it is collected); the last one out
closes it. A model client never calls its SDK client's `close()`, which would close the pool.

Every body (answers and error bodies alike) is bounded before the SDK sees it: the transport
reads it, at most `MAX_RESPONSE_BYTES` (`ResponseTooLarge`), and refuses a `Content-Encoding`
(we ask for `identity`): a compressed body could expand past any cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import json
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx2

from ..tls import shared_ssl_context
from .sdk_transport import BoundedAiohttpTransport

if TYPE_CHECKING:
    import anthropic
    import openai

MAX_RESPONSE_BYTES = 32 * 1024 * 1024
"""Longest body read (an answer or an error); a longer one is `ResponseTooLarge`."""
MAX_CONNECTIONS = 1000
"""Open connections per SDK per event loop, all hosts together (the SDKs' default per
client). In-flight model calls are bounded by the operator's `--max-concurrent-tasks` first."""


class _NoCookies(http.cookiejar.DefaultCookiePolicy):
    """Refuses to store or send any cookie."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        return False


def _new_client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        transport=BoundedAiohttpTransport(
            shared_ssl_context(), limit=MAX_CONNECTIONS, max_body=lambda: MAX_RESPONSE_BYTES
        ),
        follow_redirects=False,
        cookies=http.cookiejar.CookieJar(policy=_NoCookies()),
        headers={"Accept-Encoding": "identity"},
    )


@dataclass
class _Shared:
    client: httpx2.AsyncClient
    users: int = 0


class ClientPool:
    """One shared client per SDK per running event loop, counted by its users."""

    def __init__(self) -> None:
        self._shared: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Shared]] = (
            weakref.WeakKeyDictionary()
        )

    def acquire(self, sdk: str) -> httpx2.AsyncClient:
        """The running loop's client for `sdk` (made on first use); pair with `release`."""
        by_sdk = self._shared.setdefault(asyncio.get_running_loop(), {})
        shared = by_sdk.get(sdk)
        if shared is None or shared.client.is_closed:
            shared = by_sdk[sdk] = _Shared(_new_client())
        shared.users += 1
        return shared.client

    async def release(self, client: httpx2.AsyncClient) -> None:
        """Give a client back; the last user closes it."""
        if self._release_now(client):
            await client.aclose()

    def release_later(self, loop: asyncio.AbstractEventLoop, client: httpx2.AsyncClient) -> None:
        """`release` for a model client collected without `close()`: the shared client is
        closed on its loop if that loop still runs, else left to the garbage collector."""
        if not self._release_now(client) or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(lambda: loop.create_task(client.aclose()))

    def users(self) -> dict[int, int]:
        """Users per shared client (by id), for tests and debugging."""
        return {id(s.client): s.users for by_sdk in self._shared.values() for s in by_sdk.values()}

    def _release_now(self, client: httpx2.AsyncClient) -> bool:
        """Count one user out; True when it was the last one (the caller closes)."""
        for by_sdk in list(self._shared.values()):
            for sdk, shared in list(by_sdk.items()):
                if shared.client is client:
                    shared.users = max(0, shared.users - 1)
                    if shared.users:
                        return False
                    del by_sdk[sdk]
                    return not client.is_closed
        return False


POOL = ClientPool()


class Lease:
    """One model client's hold on its loop's shared client."""

    def __init__(self, sdk: str) -> None:
        self._sdk = sdk
        self.client: httpx2.AsyncClient | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None

    def take(self) -> tuple[httpx2.AsyncClient, bool]:
        """The shared client, and whether it is a new hold (the SDK client must be rebuilt)."""
        client = self.client
        if client is not None and not client.is_closed:
            return client, False
        client = self.client = POOL.acquire(self._sdk)
        self._finalizer = weakref.finalize(
            self, POOL.release_later, asyncio.get_running_loop(), client
        )
        return client, True

    async def release(self) -> None:
        client, self.client = self.client, None
        if client is None:
            return
        if self._finalizer is not None:
            self._finalizer.detach()
        await POOL.release(client)


async def post_json(
    client: openai.AsyncOpenAI | anthropic.AsyncAnthropic,
    path: str,
    body: Mapping[str, Any],
    options: Mapping[str, Any],
    timeout: float,
) -> Any:
    """The SDK's generic `post`, as its `create` calls it, minus `create`'s TypedDict
    transform (it walks every message and tool schema; ordo's body is plain JSON already) and
    minus the pydantic response models: the raw answer (`cast_to=httpx2.Response`) is parsed
    once, by `json.loads`. Same URL, headers, auth, Azure routing, timeout and errors.

    The SDK never retries (retry.py owns every retry), whatever its client was built with.
    `max_retries` and `headers` are given rather than left to the SDK's defaults: the SDK
    deep-copies a default it fills in (a `NotGiven`) into every request's options, a
    measurable part of the SDK's per-call work (bench/call_split.py)."""
    response = await client.post(
        path,
        cast_to=httpx2.Response,
        body=body,
        options={"headers": {}, **options, "max_retries": 0, "timeout": timeout},  # type: ignore[call-overload]
    )
    return json.loads(response.content)
