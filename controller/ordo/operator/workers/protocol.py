"""The pipe protocol between the control process and a worker child (pool.py, child.py):
newline-delimited JSON objects, each with a `type`.

Control -> child: `config` {settings} (first), `beat` {validFor} (every second: seconds the
control's process Lease stays valid), `run` {id, body, executionId, resuming, holder,
duration, holderLease, validFor, leaseLeft}, `cancel` {id} (the Task was cancelled: the
run's cancel Event), `stop` {id} (stop the run, as at shutdown: its asyncio task is
cancelled), `got` {id, rid, value | error | apiError | refused} (a store read's answer;
`refused`: the Secret does not allow the read's destination), `close`
(stop every run, then exit; the end of stdin does the same, without serving their reads).

Child -> control: `hello` {pid} (logged in, ready), `beat` {runs, metrics} (from the child's
event loop: a stalled loop sends none), `done` {id, result, why | error}, `get` / `list` /
`secret` / `keys` {id, rid, ...} (store reads of run `id`, served by control from that run's
store; `secret` names its destination, `dest` [host, port] or null), `stalled` {id} (the child's watchdog thread: run `id` holds the loop).

Messages carry Secret values (`got` of a `secret` read): they are never logged."""

from __future__ import annotations

import asyncio
import json
from typing import Any

Message = dict[str, Any]

STREAM_LIMIT = 64 * 1024 * 1024
"""StreamReader limit: a claimed Task body or a listed kind may be large."""


def encode(message: Message) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> Message:
    value = json.loads(line)
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ValueError("a worker message must be an object with a type")
    return value


async def read(stream: asyncio.StreamReader) -> Message | None:
    """The next message, or None at the end of the stream."""
    line = await stream.readline()
    if not line:
        return None
    return decode(line)
