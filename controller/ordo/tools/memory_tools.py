"""The built-in memory tools (`memory_read`, `memory_write`, `memory_search`, `memory_list`,
`memory_ingest`): executed in-process against the Agent's Memory backend.

They are governed like any tool (engine/governance.py): a binding is `builtin=True` and its
`object_name` is the model-visible `memory_<op>`, from which governance reads the operation;
governance itself knows which Memory the run wires in.

Untrusted input is bounded here and in the backends (memory/base.py): a search query longer
than MAX_QUERY_CHARS is refused with an error result saying so (the backends, called directly,
read only its first MAX_QUERY_CHARS characters), a result carries at most MAX_RESULT_CHARS of values, and an ingest writes one chunk per
turn of the event loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..api.memory import MemoryIngest
from ..engine.governance import memory_operation, memory_tool_name
from ..engine.jsontext import MAX_JSON_CHARS
from ..engine.tooling import ToolBinding, ToolFailure, ToolOutput
from ..memory.base import (
    MAX_QUERY_CHARS,
    MAX_QUERY_TERMS,
    MAX_RESULT_CHARS,
    MAX_SEARCH_RESULTS,
    Entry,
    MemoryBackend,
    chunk_text,
)

_KEY = {"type": "string", "minLength": 1, "maxLength": 256, "description": "The entry's key."}
_LIMIT = {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_RESULTS}
_QUERY = {
    "type": "string",
    "minLength": 1,
    "description": (
        f"Words to look for: at most {MAX_QUERY_CHARS} characters; the first "
        f"{MAX_QUERY_TERMS} distinct words count."
    ),
}

SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "read": (
        "Read one memory entry by key.",
        {
            "type": "object",
            "properties": {"key": _KEY},
            "required": ["key"],
            "additionalProperties": False,
        },
    ),
    "write": (
        "Store text under a key (overwrites).",
        {
            "type": "object",
            "properties": {"key": _KEY, "value": {"type": "string", "maxLength": 65536}},
            "required": ["key", "value"],
            "additionalProperties": False,
        },
    ),
    "search": (
        "Search memory entries by words; returns the best matches.",
        {
            "type": "object",
            "properties": {"query": _QUERY, "limit": _LIMIT},
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
    "list": (
        "List memory keys, optionally those starting with a prefix.",
        {
            "type": "object",
            "properties": {"prefix": {"type": "string"}, "limit": _LIMIT},
            "additionalProperties": False,
        },
    ),
    "ingest": (
        "Store a long text as chunks under `source#NNNN` keys, for later search.",
        {
            "type": "object",
            "properties": {
                "source": {"type": "string", "minLength": 1, "maxLength": 200},
                "text": {"type": "string", "minLength": 1, "maxLength": MAX_JSON_CHARS},
            },
            "required": ["source", "text"],
            "additionalProperties": False,
        },
    ),
}


def _ops(
    backend: MemoryBackend, ingest: MemoryIngest
) -> dict[str, Callable[[dict[str, Any]], Awaitable[str]]]:
    async def read(a: dict[str, Any]) -> str:
        value = await backend.read(a["key"])
        if value is None:
            raise ToolFailure(f"no memory entry with key {a['key']!r}")
        return value

    async def write(a: dict[str, Any]) -> str:
        await backend.write(a["key"], a["value"])
        return json.dumps({"written": a["key"]})

    async def search(a: dict[str, Any]) -> str:
        query: str = a["query"]
        if len(query) > MAX_QUERY_CHARS:
            raise ToolFailure(
                f"the query is {len(query)} characters long; memory_search takes at most "
                f"{MAX_QUERY_CHARS} (the first {MAX_QUERY_TERMS} distinct words count): "
                "search again with the words that matter"
            )
        found = await backend.search(query, int(a.get("limit", 5)))
        return json.dumps(search_result(found))

    async def list_(a: dict[str, Any]) -> str:
        return json.dumps(await backend.list(a.get("prefix", ""), int(a.get("limit", 50))))

    async def ingest_(a: dict[str, Any]) -> str:
        chunks = chunk_text(a["text"], ingest.chunk_size, ingest.chunk_overlap)
        for i, chunk in enumerate(chunks):
            await backend.write(f"{a['source']}#{i:04d}", chunk)
            await asyncio.sleep(0)  # one chunk per turn: other runs go on meanwhile
        return json.dumps({"source": a["source"], "chunks": len(chunks)})

    return {"read": read, "write": write, "search": search, "list": list_, "ingest": ingest_}


def search_result(found: Sequence[Entry]) -> list[dict[str, Any]]:
    """Entries as `memory_search` returns them, best first, with at most MAX_RESULT_CHARS
    characters of values together: a value cut to fit is marked `truncated`."""
    room = MAX_RESULT_CHARS
    out: list[dict[str, Any]] = []
    for entry in found:
        item: dict[str, Any] = {"key": entry.key, "value": entry.value[:room]}
        if len(entry.value) > room:
            item["truncated"] = True
        room -= len(item["value"])
        out.append(item)
    return out


class _MemoryExecutor:
    def __init__(self, op: Callable[[dict[str, Any]], Awaitable[str]]) -> None:
        self._op = op

    async def __call__(self, arguments: dict[str, Any]) -> ToolOutput:
        return ToolOutput(await self._op(arguments))


def memory_bindings(
    backend: MemoryBackend, operations: Sequence[str], ingest: MemoryIngest | None = None
) -> list[ToolBinding]:
    """One ToolBinding per operation given (pass the effective operations: what
    `memory.allow` offers minus what policies block, `Governance.effective_memory_operations`).
    The binding's `object_name` is the identity governance decides on (`memory_<op>`)."""
    ops = _ops(backend, ingest or MemoryIngest())
    bindings = []
    for op in operations:
        description, schema = SCHEMAS[op]
        name = memory_tool_name(op)
        assert memory_operation(name) == op  # governance reads the operation back from it
        bindings.append(
            ToolBinding(
                name=name,
                object_name=name,
                description=description,
                parameters=schema,
                executor=_MemoryExecutor(ops[op]),
                builtin=True,
                idempotent=op in ("read", "search", "list"),
            )
        )
    return bindings
