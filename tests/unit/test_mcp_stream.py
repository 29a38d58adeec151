"""The MCP read stream that bounds each message's items before the SDK validates it."""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp import types
from mcp.shared.message import SessionMessage

from ordo.tools.mcp_stream import checked, items_over
from ordo.tools.mcp_transport import Refusal


@pytest.mark.parametrize(
    ("value", "items"),
    [
        (None, 0),
        ("text", 0),
        ({}, 1),
        ([], 0),
        ([1, 2, 3], 3),
        ({"a": [1, {"b": 2}]}, 4),  # two objects, two elements
        ({"content": [{"type": "text", "text": ""}] * 5}, 11),
        ([[0]] * 10, 20),
    ],
)
def test_items_are_objects_and_array_elements(value: Any, items: int) -> None:
    assert not items_over(value, items)
    if items:
        assert items_over(value, items - 1)


def test_counting_stops_at_the_limit() -> None:
    assert items_over([[0]] * 1_000_000, 10)  # the outer list alone is over: nothing walked


def response(result: dict[str, Any], request_id: int = 7) -> SessionMessage:
    return SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result))


@asynccontextmanager
async def pipe() -> AsyncIterator[Any]:
    """A transport of memory streams: yields (the transport, its server side)."""
    to_client, client_reads = anyio.create_memory_object_stream[SessionMessage | Exception](10)
    client_writes, from_client = anyio.create_memory_object_stream[SessionMessage](10)

    @asynccontextmanager
    async def transport() -> AsyncIterator[Any]:
        yield client_reads, client_writes

    async with to_client, from_client:
        yield transport(), to_client


async def test_an_answer_over_the_limit_becomes_an_error_for_the_same_request() -> None:
    refusal = Refusal()
    async with (
        pipe() as (transport, server),
        checked(transport, limit=5, refusal=refusal) as (
            read,
            _write,
        ),
    ):
        await server.send(response({"content": [{"type": "text", "text": "ok"}]}, 1))
        await server.send(response({"content": [{"type": "text", "text": ""}] * 3}, 2))
        first, second = await read.receive(), await read.receive()
    assert isinstance(first, SessionMessage) and isinstance(first.message, types.JSONRPCResponse)
    assert isinstance(second, SessionMessage) and isinstance(second.message, types.JSONRPCError)
    assert second.message.id == 2
    assert "more than 5 JSON objects and array elements" in second.message.error.message
    assert (refusal.cause, refusal.why) == ("ResponseTooLarge", second.message.error.message)


async def test_a_notification_over_the_limit_is_dropped() -> None:
    big = types.JSONRPCNotification(
        jsonrpc="2.0", method="notifications/message", params={"data": [0] * 10}
    )
    small = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={})
    async with (
        pipe() as (transport, server),
        checked(transport, limit=5, refusal=Refusal()) as (read, _write),
    ):
        await server.send(SessionMessage(big))
        await server.send(SessionMessage(small))
        await server.send(response({}))
        received = [await anext(read), await anext(read)]
    assert [type(r.message).__name__ for r in received] == [
        "JSONRPCNotification",
        "JSONRPCResponse",
    ]
    assert received[0].message.params == {}


async def test_the_senders_context_is_passed_on() -> None:
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker")

    class ContextStream:
        """A read stream that, like the SDK's, records the sender's context."""

        def __init__(self) -> None:
            marker.set("sender")
            self.last_context = contextvars.copy_context()

        async def receive(self) -> SessionMessage:
            return response({})

    @asynccontextmanager
    async def transport() -> AsyncIterator[Any]:
        yield ContextStream(), None

    async with checked(transport(), limit=5, refusal=Refusal()) as (read, _write):
        await read.receive()
        assert read.last_context[marker] == "sender"


async def test_iteration_ends_when_the_transport_closes() -> None:
    async with (
        pipe() as (transport, server),
        checked(transport, limit=5, refusal=Refusal()) as (
            read,
            _write,
        ),
    ):
        await server.send(response({}))
        await server.aclose()
        received = [item async for item in read]
    assert len(received) == 1
