"""Built-in memory tools: what `memory.allow` offers, what each operation does, ingest
chunking, and the in-memory backend."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ordo.api import MEMORY_OPERATIONS
from ordo.api.memory import MemoryIngest
from ordo.engine.governance import memory_operation, memory_tool_name
from ordo.engine.stepcalls import argument_problem
from ordo.engine.tooling import ToolFailure
from ordo.memory import InMemoryBackend, chunk_text
from ordo.memory.base import (
    MAX_INMEMORY_CHARS,
    MAX_INMEMORY_ENTRIES,
    MAX_QUERY_CHARS,
    MAX_RESULT_CHARS,
    MAX_SEARCH_RESULTS,
)
from ordo.memory.inmemory import shared_backend
from ordo.runtime.execute import execute
from ordo.tools.memory_tools import SCHEMAS, memory_bindings
from support.engine_fakes import (
    DictStore,
    ModelFactory,
    ScriptedModel,
    agent,
    answer,
    call,
    memory,
    mock_endpoint,
    mock_tool,
    policy,
    role,
    task,
    tools_turn,
)


def by_name(
    backend: Any, ops: Any = MEMORY_OPERATIONS, ingest: MemoryIngest | None = None
) -> dict[str, Any]:
    return {b.name: b for b in memory_bindings(backend, ops, ingest)}


def test_bindings_for_every_operation() -> None:
    tools = by_name(InMemoryBackend())
    assert list(tools) == [
        "memory_read",
        "memory_write",
        "memory_search",
        "memory_list",
        "memory_ingest",
    ]
    for b in tools.values():
        assert b.builtin and b.object_name == b.name
        assert b.description
        jsonschema.validators.validator_for(b.parameters).check_schema(b.parameters)
    assert {n for n, b in tools.items() if b.idempotent} == {
        "memory_read",
        "memory_search",
        "memory_list",
    }


def test_binding_object_name_is_the_governance_identity_of_the_operation() -> None:
    for op in MEMORY_OPERATIONS:
        (b,) = memory_bindings(InMemoryBackend(), [op])
        assert b.builtin
        assert b.object_name == b.name == memory_tool_name(op) == f"memory_{op}"
        assert memory_operation(b.object_name) == op


@pytest.mark.parametrize("ops", [("read",), ("read", "search"), ("write", "ingest"), ()])
def test_only_the_allowed_operations_are_bound(ops: tuple[str, ...]) -> None:
    assert set(by_name(InMemoryBackend(), ops)) == {f"memory_{o}" for o in ops}


async def test_write_read_list_search() -> None:
    tools = by_name(InMemoryBackend())
    out = await tools["memory_write"].executor(
        {"key": "notes/k8s", "value": "Operators reconcile state"}
    )
    assert json.loads(out.content) == {"written": "notes/k8s"}
    await tools["memory_write"].executor({"key": "notes/misc", "value": "lunch at noon"})
    assert (
        await tools["memory_read"].executor({"key": "notes/k8s"})
    ).content == "Operators reconcile state"
    listed = json.loads((await tools["memory_list"].executor({"prefix": "notes/"})).content)
    assert listed == ["notes/k8s", "notes/misc"]
    assert json.loads((await tools["memory_list"].executor({"limit": 1})).content) == ["notes/k8s"]
    found = json.loads(
        (await tools["memory_search"].executor({"query": "reconcile operators"})).content
    )
    assert found == [{"key": "notes/k8s", "value": "Operators reconcile state"}]
    assert json.loads((await tools["memory_search"].executor({"query": "zebra"})).content) == []


async def test_read_of_a_missing_key_is_a_tool_failure() -> None:
    tools = by_name(InMemoryBackend())
    with pytest.raises(ToolFailure, match="no memory entry"):
        await tools["memory_read"].executor({"key": "nope"})


async def test_search_ranks_by_matches() -> None:
    backend = InMemoryBackend()
    await backend.write("a", "cat")
    await backend.write("b", "cat cat dog")
    await backend.write("c", "dog")
    assert [e.key for e in await backend.search("cat dog")] == ["b", "a", "c"]
    assert [e.key for e in await backend.search("cat dog", limit=1)] == ["b"]
    assert await backend.search("!!!") == []


async def test_ingest_chunks_long_text_under_numbered_keys() -> None:
    backend = InMemoryBackend()
    ingest = MemoryIngest(chunk_size=100, chunk_overlap=20)
    tools = by_name(backend, ingest=ingest)
    words = [f"word{i:03d}" for i in range(120)]  # 959 characters
    text = " ".join(words)
    out = json.loads(
        (await tools["memory_ingest"].executor({"source": "doc", "text": text})).content
    )
    keys = await backend.list("doc#")
    assert out == {"source": "doc", "chunks": len(keys)}
    assert keys == [f"doc#{i:04d}" for i in range(len(keys))]
    chunks = [await backend.read(k) for k in keys]
    assert all(c is not None and 0 < len(c) <= 100 for c in chunks)
    assert len(keys) >= len(text) // 100
    joined = " ".join(c or "" for c in chunks)
    assert all(w in joined.split() for w in words)  # nothing lost, no word cut in two
    # consecutive chunks overlap
    assert all(a.split()[-1] in b for a, b in itertools.pairwise(chunks) if a and b)
    found = await tools["memory_search"].executor({"query": "word077"})
    assert any("word077" in e["value"] for e in json.loads(found.content))


async def test_ingest_of_short_text_is_one_chunk() -> None:
    backend = InMemoryBackend()
    tools = by_name(backend)
    out = json.loads(
        (await tools["memory_ingest"].executor({"source": "s", "text": "short"})).content
    )
    assert out["chunks"] == 1
    assert await backend.read("s#0000") == "short"


def test_chunk_text_rejects_overlap_not_smaller_than_size() -> None:
    with pytest.raises(ValueError):
        chunk_text("abc", 10, 10)
    with pytest.raises(ValueError):
        chunk_text("abc", 0, 0)


@settings(max_examples=200, deadline=None)
@given(
    length=st.integers(min_value=0, max_value=500),
    data=st.data(),
    size=st.integers(min_value=2, max_value=80),
)
def test_chunk_text_bounds_and_coverage(length: int, data: Any, size: int) -> None:
    """Every character is distinct, so coverage and order can be checked exactly."""
    spaces = data.draw(st.sets(st.integers(min_value=0, max_value=max(0, length - 1))))
    text = "".join(" " if i in spaces else chr(0x4E00 + i) for i in range(length))
    overlap = data.draw(st.integers(min_value=0, max_value=size - 1))
    chunks = chunk_text(text, size, overlap)
    assert all(0 < len(c) <= size for c in chunks)
    assert all(c == c.strip() and c in text for c in chunks)  # contiguous pieces of the text
    starts = [text.index(c) for c in chunks]
    assert starts == sorted(starts)  # in order
    covered = {ch for c in chunks for ch in c}
    assert covered >= set(text) - {" "}  # nothing lost
    assert bool(chunks) == bool(text.strip())


def test_schemas_reject_bad_arguments() -> None:
    _, write = SCHEMAS["write"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"key": "k"}, write)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"key": "k", "value": "v", "extra": 1}, write)
    _, search = SCHEMAS["search"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"query": "q", "limit": 0}, search)


async def test_a_query_over_the_cap_is_refused_with_a_clear_error() -> None:
    """The error result names the cap; the backend, called directly, reads the first
    MAX_QUERY_CHARS characters only (deterministic truncation)."""
    backend = InMemoryBackend()
    await backend.write("k", "needle")
    search = by_name(backend)["memory_search"].executor
    assert "needle" in (await search({"query": "q" * (MAX_QUERY_CHARS - 7) + " needle"})).content
    with pytest.raises(ToolFailure, match=f"at most {MAX_QUERY_CHARS}"):
        await search({"query": "q" * MAX_QUERY_CHARS + " needle"})
    assert await backend.search("q" * MAX_QUERY_CHARS + " needle") == []
    _, schema = SCHEMAS["search"]
    assert argument_problem(schema, {"query": "q", "limit": MAX_SEARCH_RESULTS + 1})


async def test_a_search_result_carries_at_most_the_result_cap_of_values() -> None:
    backend = InMemoryBackend()
    for i in range(MAX_SEARCH_RESULTS):
        await backend.write(f"k{i:02d}", f"needle {i} " + "v" * 65_000)
    out = await by_name(backend)["memory_search"].executor(
        {"query": "needle", "limit": MAX_SEARCH_RESULTS}
    )
    found = json.loads(out.content)
    assert [e["key"] for e in found] == [f"k{i:02d}" for i in range(MAX_SEARCH_RESULTS)]
    assert sum(len(e["value"]) for e in found) == MAX_RESULT_CHARS
    assert "truncated" not in found[0] and found[1]["truncated"] is True
    assert found[-1] == {"key": f"k{MAX_SEARCH_RESULTS - 1:02d}", "value": "", "truncated": True}
    assert len(await backend.search("needle", limit=500)) == MAX_SEARCH_RESULTS


async def test_the_in_memory_store_is_capped_by_entries_and_characters() -> None:
    backend = InMemoryBackend()
    for i in range(MAX_INMEMORY_ENTRIES):
        await backend.write(f"k{i}", "")
    with pytest.raises(ToolFailure, match=f"holds {MAX_INMEMORY_ENTRIES} entries"):
        await backend.write("one-more", "v")
    await backend.write("k0", "an existing key can still be overwritten")
    assert [e.key for e in await backend.search("existing")] == ["k0"]

    big = InMemoryBackend()
    value = "x" * 65_536
    for i in range(MAX_INMEMORY_CHARS // (len(value) + 8)):
        await big.write(f"k{i:06d}", value)
    with pytest.raises(ToolFailure, match=r"at most \d+ characters"):
        await big.write("last", value)
    await big.write("k000000", "small")  # shrinking is always possible
    await big.write("last", value)


async def test_overwriting_an_entry_replaces_its_index() -> None:
    backend = InMemoryBackend()
    await backend.write("doc", "alpha alpha beta")
    await backend.write("doc", "gamma")
    assert await backend.search("alpha beta") == []
    assert [e.key for e in await backend.search("gamma")] == ["doc"]


async def test_shared_backend_is_shared_per_scope() -> None:
    scope = f"test/{uuid.uuid4()}"
    await shared_backend(scope).write("k", "v")
    assert await shared_backend(scope).read("k") == "v"
    assert await shared_backend(scope + "-other").read("k") is None


# --------------------------------------------------------------------------------------
# Through execute(): memory.allow decides what the model is offered


def memory_objects(name: str, allow: list[str] | None, **mem_spec: Any) -> list[dict[str, Any]]:
    mem: dict[str, Any] = {"ref": name}
    if allow is not None:
        mem["allow"] = allow
    return [
        agent(tools=["search"], memory=mem),
        mock_endpoint(),
        mock_tool("search"),
        memory(name, prefix=f"test/{uuid.uuid4()}", **mem_spec),
    ]


@pytest.mark.parametrize(
    "allow", [None, ["read"], ["read", "search"], ["write", "list", "ingest"], []]
)
async def test_memory_allow_subsets_are_what_the_model_is_offered(allow: list[str] | None) -> None:
    factory = ModelFactory(lambda s: ScriptedModel([answer("ok")]))
    outcome = await execute(
        task(), DictStore(*memory_objects("notes", allow)), model_factory=factory
    )
    assert outcome.phase == "Succeeded"
    (model,) = factory.models
    ops = MEMORY_OPERATIONS if allow is None else allow
    assert model.requests[0].tool_names == {"search"} | {f"memory_{o}" for o in ops}


async def test_memory_operation_outside_allow_is_denied() -> None:
    factory = ModelFactory(
        lambda s: ScriptedModel([tools_turn(call("memory_write", "c1", key="k", value="v"))])
    )
    outcome = await execute(
        task(), DictStore(*memory_objects("notes", ["read"])), model_factory=factory
    )
    assert (outcome.phase, outcome.reason) == ("Failed", "ToolDenied")
    (record,) = outcome.status().to_dict()["toolCalls"]
    assert (record["tool"], record["decision"], record["reason"]) == (
        "memory_write",
        "denied",
        "NotOffered",
    )


async def test_memory_round_trip_in_one_run_with_ingest_settings() -> None:
    text = " ".join(f"fact{i}" for i in range(60))
    factory = ModelFactory(
        lambda s: ScriptedModel(
            [
                tools_turn(call("memory_ingest", "c1", source="paper", text=text)),
                tools_turn(call("memory_search", "c2", query="fact42")),
                answer("found"),
            ]
        )
    )
    objs = memory_objects("notes", None, ingest={"chunkSize": 64, "chunkOverlap": 8})
    outcome = await execute(task(), DictStore(*objs), model_factory=factory)
    assert outcome.phase == "Succeeded" and outcome.result is not None
    results = [i for i in outcome.result.state.items if getattr(i, "role", "") == "tool"]
    ingest_out = json.loads(results[0].content)
    assert ingest_out["chunks"] >= len(text) // 64
    assert "fact42" in results[1].content
    assert [r["reason"] for r in outcome.status().to_dict()["toolCalls"]] == [
        "NoPermissionRequired"
    ] * 2


# --------------------------------------------------------------------------------------
# Through execute(): governance decides memory calls like any tool call


async def test_agent_without_roles_uses_memory_as_before() -> None:
    factory = ModelFactory(
        lambda s: ScriptedModel(
            [
                tools_turn(call("memory_write", "c1", key="k", value="remembered")),
                tools_turn(call("memory_read", "c2", key="k")),
                answer("ok"),
            ]
        )
    )
    outcome = await execute(
        task(), DictStore(*memory_objects("notes", None)), model_factory=factory
    )
    assert outcome.phase == "Succeeded" and outcome.result is not None
    records = outcome.status().to_dict()["toolCalls"]
    assert [(r["decision"], r["reason"], r["outcome"]) for r in records] == [
        ("allowed", "NoPermissionRequired", "succeeded")
    ] * 2
    results = [i for i in outcome.result.state.items if getattr(i, "role", "") == "tool"]
    assert results[1].content == "remembered"


async def test_policy_blocked_memory_tool_is_not_offered_and_is_denied() -> None:
    prefix = f"test/{uuid.uuid4()}"
    objs = [
        agent(tools=["search"], memory={"ref": "notes"}),
        mock_endpoint(),
        mock_tool("search"),
        memory("notes", prefix=prefix),
        policy("read-only-memory", blockedTools=["memory.write", "memory.ingest"]),
    ]
    factory = ModelFactory(
        lambda s: ScriptedModel([tools_turn(call("memory_write", "c1", key="k", value="v"))])
    )
    outcome = await execute(task(), DictStore(*objs), model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "ToolDenied")
    (model,) = factory.models
    assert model.requests[0].tool_names == {"search", "memory_read", "memory_search", "memory_list"}
    (record,) = outcome.status().to_dict()["toolCalls"]
    assert (record["tool"], record["decision"], record["reason"], record["outcome"]) == (
        "memory_write",
        "denied",
        "BlockedByPolicy: read-only-memory",
        "skipped",
    )
    assert await shared_backend(prefix).list() == []


async def test_agent_with_roles_needs_memory_permissions() -> None:
    prefix = f"test/{uuid.uuid4()}"
    objs = [
        agent(tools=[], memory={"ref": "notes"}, roles=["reader"]),
        mock_endpoint(),
        memory("notes", prefix=prefix),
        role("reader", "memory:notes:read", "memory:notes:search"),
    ]
    factory = ModelFactory(
        lambda s: ScriptedModel(
            [
                tools_turn(call("memory_search", "c1", query="x")),
                tools_turn(call("memory_write", "c2", key="k", value="v")),
            ]
        )
    )
    outcome = await execute(task(), DictStore(*objs), model_factory=factory)
    assert (outcome.phase, outcome.reason) == ("Failed", "ToolDenied")
    records = outcome.status().to_dict()["toolCalls"]
    assert [(r["tool"], r["decision"], r["reason"]) for r in records] == [
        ("memory_search", "allowed", "Granted: memory:notes:search"),
        ("memory_write", "denied", "MissingPermission: memory:notes:write"),
    ]
    assert await shared_backend(prefix).list() == []
