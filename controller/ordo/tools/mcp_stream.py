"""The read stream between the MCP transport and the `mcp` session: each message's shape is
bounded before the SDK validates it into models (issue 23).

Why: the transport bounds bytes (`mcp_transport.py`), but what the SDK's work on one message
costs is per JSON object and array element, not per byte: after its first parse it validates
the result twice more (every content block and listed tool into a pydantic model, plain JSON
copied), all on the event loop. So a message may hold at most `limit` items (objects and array
elements, counted everywhere: plain JSON such as `structuredContent` costs about a third of a
model per item). A server answer over it is replaced by a JSON-RPC error for the same request
(and noted in the session's `Refusal`, which the caller reports); a notification or request
from the server over it is dropped.

`Client` takes any `Transport` (an async context manager of a read and a write stream, a
public protocol of the SDK); this one wraps the streamable-HTTP transport and leaves the write
side alone. The SDK reads the sender's context of a message from its read stream duck-typed
(`last_context`); the wrapper passes it on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
from mcp import types
from mcp.client import Transport
from mcp.shared.message import SessionMessage

from .mcp_transport import Refusal

if TYPE_CHECKING:  # the SDK's stream protocols (types only)
    from mcp.client._transport import ReadStream, TransportStreams

REFUSED_CODE = types.INTERNAL_ERROR


def items_over(value: Any, limit: int) -> bool:
    """Whether `value` has more than `limit` JSON objects and array elements. Stops counting at
    the limit, so the cost is bounded by it (and by the message's bytes)."""
    count = 0
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            count += 1
            children: Any = node.values()
        elif isinstance(node, list):
            count += len(node)
            children = node
        else:
            continue
        if count > limit:
            return True
        stack.extend(c for c in children if isinstance(c, dict | list))
    return False


def _payload(message: Any) -> Any:
    if isinstance(message, types.JSONRPCResponse):
        return message.result
    if isinstance(message, types.JSONRPCError):
        return message.error.data
    return getattr(message, "params", None)


class _CheckedReadStream:
    """A read stream that checks each message on the way to the session."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception], limit: int, refusal: Refusal):
        self._inner = inner
        self._limit = limit
        self._refusal = refusal

    @property
    def last_context(self) -> Any:
        """The sender's context of the last message (the SDK reads it duck-typed)."""
        return getattr(self._inner, "last_context", None)

    def _checked(self, item: SessionMessage | Exception) -> SessionMessage | Exception | None:
        """`item`, a JSON-RPC error in place of an answer over the limit, or None (drop it)."""
        if not isinstance(item, SessionMessage) or not items_over(
            _payload(item.message), self._limit
        ):
            return item
        why = f"a message has more than {self._limit} JSON objects and array elements"
        self._refusal.note("ResponseTooLarge", why)
        message = item.message
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            error = types.ErrorData(code=REFUSED_CODE, message=why)
            return SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=message.id, error=error))
        return None

    async def receive(self) -> SessionMessage | Exception:
        while True:
            checked = self._checked(await self._inner.receive())
            if checked is not None:
                return checked

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _CheckedReadStream:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _CheckedReadStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, tb)


@asynccontextmanager
async def checked(
    transport: Transport, *, limit: int, refusal: Refusal
) -> AsyncIterator[TransportStreams]:
    """`transport`, its read stream checked message by message."""
    async with transport as (read, write):
        yield _CheckedReadStream(read, limit, refusal), write
