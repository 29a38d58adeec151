"""aiohttp's errors as httpx errors that keep the one fact a retry depends on: was any byte
of the request sent?

Shared by the two httpx transports over aiohttp (operator/kube/transport.py for the Kubernetes
client, providers/sdk_transport.py for the model SDKs, whose `httpx2` fork has the same error
classes). Only failures that provably happened before the request left
(`ClientConnectorError`: refused, DNS, TLS handshake; `ConnectionTimeoutError`: no connection
in time) become `ConnectError`/`ConnectTimeout`, which callers may retry even for a write;
everything later is `ReadTimeout`/`RemoteProtocolError`/`ReadError` (the write may have been
applied). The aiohttp exception stays the `__cause__`; messages carry its type name only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import aiohttp


@contextmanager
def mapped_errors(request: Any, httpx_module: ModuleType) -> Iterator[None]:
    """Raise, for an aiohttp/OS error inside, the `httpx_module` (httpx or httpx2) error with
    the same "was it sent?" meaning, for `request` (a request of that module)."""
    errors = httpx_module
    try:
        yield
    except aiohttp.ClientConnectorError as exc:  # refused, DNS, TLS handshake: nothing sent
        raise errors.ConnectError(type(exc).__name__, request=request) from exc
    except aiohttp.ConnectionTimeoutError as exc:  # no connection in time: nothing sent
        raise errors.ConnectTimeout(type(exc).__name__, request=request) from exc
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:  # after sending
        raise errors.ReadTimeout(type(exc).__name__, request=request) from exc
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
        raise errors.RemoteProtocolError(type(exc).__name__, request=request) from exc
    except aiohttp.ClientResponseError as exc:  # a malformed response
        raise errors.RemoteProtocolError(type(exc).__name__, request=request) from exc
    except (aiohttp.ClientError, OSError) as exc:  # reset, broken pipe, TLS error, ...
        raise errors.ReadError(type(exc).__name__, request=request) from exc
