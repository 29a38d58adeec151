"""The worker pipe's framing (operator/workers/protocol.py): one JSON object a line, over a
real pipe, whatever the values hold (newlines, unicode, megabytes); the end of the stream."""

from __future__ import annotations

import asyncio
import os

import pytest

from ordo.operator.workers import protocol


async def pipe_reader(data: bytes) -> asyncio.StreamReader:
    """A StreamReader on the read end of an OS pipe that `data` was written into (then
    closed), as the control process reads a child's stdout."""
    read_fd, write_fd = os.pipe()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=protocol.STREAM_LIMIT)
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb")
    )

    def write() -> None:
        with os.fdopen(write_fd, "wb") as out:
            out.write(data)

    await asyncio.to_thread(write)
    reader._transport = transport  # keep it alive with the reader
    return reader


async def test_messages_keep_their_boundaries_over_a_pipe() -> None:
    messages = [
        {"type": "got", "rid": 1, "value": 'line one\nline two\r\n{"type": "fake"}\n'},
        {"type": "run", "id": 2, "body": {"spec": {"input": "日本語 ✓ \u2028 \x00"}}},
        {"type": "got", "rid": 3, "value": "x" * (3 * 1024 * 1024)},  # > the default limit
        {"type": "beat"},
    ]
    data = b"".join(protocol.encode(m) for m in messages)
    assert data.count(b"\n") == len(messages)  # newlines inside values are escaped
    reader = await pipe_reader(data)
    got = [await protocol.read(reader) for _ in messages]
    assert got == messages
    assert await protocol.read(reader) is None  # the end of the stream
    assert await protocol.read(reader) is None


def test_decode_refuses_what_is_not_a_typed_object() -> None:
    for line in (b"[1, 2]", b'{"type": 3}', b'"beat"', b"{"):
        with pytest.raises(ValueError):
            protocol.decode(line)
    assert protocol.decode(b'{"type":"beat","runs":2}') == {"type": "beat", "runs": 2}
