"""The built-in memory tools (`memory_read`, `memory_write`, `memory_search`, `memory_list`,
`memory_ingest`): executed in-process against the Agent's Memory backend.

They are governed like any tool (engine/governance.py): a binding is `builtin=True` and its
`object_name` is the model-visible `memory_<op>`, from which governance reads the operation;
governance itself knows which Memory the run wires in."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..api.memory import MemoryIngest
from ..engine.governance import memory_operation, memory_tool_name
from ..engine.tooling import ToolBinding, ToolFailure, ToolOutput
from ..memory.base import MemoryBackend, chunk_text

_KEY = {"type": "string", "minLength": 1, "maxLength": 256, "description": "The entry's key."}
_LIMIT = {"type": "integer", "minimum": 1, "maximum": 50}

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
            "properties": {"query": {"type": "string", "minLength": 1}, "limit": _LIMIT},
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
                "text": {"type": "string", "minLength": 1},
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
        found = await backend.search(a["query"], int(a.get("limit", 5)))
        return json.dumps([{"key": e.key, "value": e.value} for e in found])

    async def list_(a: dict[str, Any]) -> str:
        return json.dumps(await backend.list(a.get("prefix", ""), int(a.get("limit", 50))))

    async def ingest_(a: dict[str, Any]) -> str:
        chunks = chunk_text(a["text"], ingest.chunk_size, ingest.chunk_overlap)
        for i, chunk in enumerate(chunks):
            await backend.write(f"{a['source']}#{i:04d}", chunk)
        return json.dumps({"source": a["source"], "chunks": len(chunks)})

    return {"read": read, "write": write, "search": search, "list": list_, "ingest": ingest_}


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
