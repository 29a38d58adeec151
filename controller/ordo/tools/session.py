"""The aiohttp session of the network tools (`http` Tools, `http` Guardrails): one per event
loop, shared by every call in that loop.

Why shared: a client per call paid for a new connection pool, a TCP connect and the client's
own setup on every tool call (about a tenth of the operator's CPU per Task, issue 14); calls
of one loop now reuse keep-alive connections. Why aiohttp, not httpx: the same reason as the
Kubernetes API client's transport (`operator/kube/transport.py`): httpcore's per-request cost.

What is shared is the connection pool only, never what identifies a caller or a destination:
- no cookie jar (`DummyCookieJar`): one tool's `Set-Cookie` never reaches another call;
- no proxy variables from the environment (`trust_env=False`): the SSRF guard must see the
  real destination;
- the pool is keyed by address, port, TLS context and TLS server name (aiohttp's
  `ConnectionKey`): a connection opened for one checked address and name is reused only for
  that address and name;
- credentials, `Host`, redirects (never followed) and timeouts are per request (`http.py`).

Lifetime: a call holds the session while it runs (`held`); when the last call of the loop
ends, the session stays open `IDLE_SECONDS` for the next one, then closes. A loop that shuts
down (`asyncio.run` cancels what is pending) closes it then.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp

from ..tls import shared_ssl_context

IDLE_SECONDS = 10.0
"""How long an unused session stays open for the next call of its loop."""
KEEPALIVE_SECONDS = 4.0
"""How long an idle connection is kept: below the keep-alive timeout of common servers
(uvicorn and Node 5 s), so that a request rarely meets a connection the server is closing."""


@dataclass
class _Shared:
    session: aiohttp.ClientSession
    users: int = 0
    idle: asyncio.Task[None] | None = None


_SESSIONS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Shared] = (
    weakref.WeakKeyDictionary()
)


def _new_session() -> aiohttp.ClientSession:
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            ssl=shared_ssl_context(), limit=0, keepalive_timeout=KEEPALIVE_SECONDS
        ),
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        timeout=aiohttp.ClientTimeout(total=None),
    )
    # One HTTP request per tool call: aiohttp would repeat a GET, PUT or DELETE once,
    # silently, after a disconnect on a reused connection; the Tool decides whether it is
    # idempotent, not the method (same switch as operator/kube/transport.py).
    session._retry_connection = False
    return session


@contextlib.asynccontextmanager
async def held() -> AsyncIterator[aiohttp.ClientSession]:
    """The running loop's session, held for the duration of the `async with`."""
    loop = asyncio.get_running_loop()
    shared = _SESSIONS.get(loop)
    if shared is None or shared.session.closed:
        shared = _SESSIONS[loop] = _Shared(_new_session())
    shared.users += 1
    if shared.idle is not None:
        shared.idle.cancel()  # sees users > 0: keeps the session
        shared.idle = None
    try:
        yield shared.session
    finally:
        shared.users -= 1
        if shared.users == 0 and not loop.is_closed():
            shared.idle = loop.create_task(_close_when_idle(loop, shared))


async def _close_when_idle(loop: asyncio.AbstractEventLoop, shared: _Shared) -> None:
    try:
        await asyncio.sleep(IDLE_SECONDS)
    finally:
        # Cancelled by a new call (users > 0): keep it. Timed out, or cancelled because the
        # loop shuts down: close it.
        if shared.users == 0:
            if _SESSIONS.get(loop) is shared:
                del _SESSIONS[loop]
            await shared.session.close()
