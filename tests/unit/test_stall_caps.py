"""Every CPU cost on untrusted data is linear in its size and bounded by a documented cap, so
no bounded piece of work holds the event loop (issue 23, item 2).

One class per section, each at its caps with the worst input found for it: memory search
(query, entries scored, result size), memory ingest, answer normalisation (engine/sanitize.py),
guardrail pattern checks (engine/guardrails.py) and JSON parsing (engine/jsontext.py). Each
test checks the result and that the longest event-loop stall measured by `StallWatchdog`
stays under `STALL` (a generous bound: the figures measured on the development machine are
in docs/security.md's "Untrusted input" table, tens of milliseconds).
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from ordo.api.guardrail import MAX_PATTERNS, PatternGuardrail
from ordo.api.jsonschema_re2 import MAX_PATTERN_CHARS
from ordo.api.memory import MemoryIngest
from ordo.engine import guardrails as guardrails_mod
from ordo.engine.guardrails import MAX_CHECKED_CHARS, GuardrailBinding, PatternCheck, screen
from ordo.engine.jsontext import MAX_JSON_CHARS, MAX_JSON_DEPTH, bounded_json_loads
from ordo.engine.model import ModelResponse
from ordo.engine.sanitize import MAX_TOOL_CALLS_PER_RESPONSE, normalise_response
from ordo.engine.tooling import ToolFailure
from ordo.engine.transcript import ToolCall, Usage
from ordo.errors import UntrustedInputTooLarge
from ordo.memory import InMemoryBackend
from ordo.memory.base import MAX_INMEMORY_ENTRIES, MAX_QUERY_CHARS, MAX_QUERY_TERMS
from ordo.tools.memory_tools import memory_bindings
from support.stall import StallWatchdog

STALL = 1.0  # seconds: any longer gap between 10 ms heartbeats fails the test


def tools_of(backend: InMemoryBackend, ingest: MemoryIngest | None = None) -> dict[str, Any]:
    ops = ["read", "write", "search", "list", "ingest"]
    return {b.name: b for b in memory_bindings(backend, ops, ingest)}


# --- memory search -----------------------------------------------------------------------


async def test_a_110000_word_query_does_not_stall() -> None:
    """The reviewer's case: 10.6 s of blocked loop before (`tokens.count` per query word)."""
    backend = InMemoryBackend()
    for i in range(200):
        await backend.write(f"note{i:03d}", " ".join(f"w{j}" for j in range(i, i + 300)))
    query = " ".join(f"w{j}" for j in range(110_000))
    search = tools_of(backend)["memory_search"].executor
    async with StallWatchdog() as watchdog:
        direct = await backend.search(query)
        with pytest.raises(ToolFailure, match=f"at most {MAX_QUERY_CHARS}"):
            await search({"query": query, "limit": 5})
    assert watchdog.longest < STALL, watchdog.report()
    # Deterministic: the first MAX_QUERY_TERMS distinct words count, the rest are ignored.
    first = " ".join(f"w{j}" for j in range(MAX_QUERY_TERMS))
    assert direct == await backend.search(first)


async def test_search_at_the_entry_cap_with_every_entry_matching() -> None:
    """MAX_INMEMORY_ENTRIES entries that all hold every one of MAX_QUERY_TERMS query words."""
    backend = InMemoryBackend()
    vocabulary = [f"term{t}" for t in range(MAX_QUERY_TERMS)]
    for i in range(MAX_INMEMORY_ENTRIES):
        await backend.write(f"k{i:05d}", " ".join(vocabulary) + f" extra{i % 7}" * (i % 3))
    query = " ".join(vocabulary)
    async with StallWatchdog() as watchdog:
        found = await backend.search(query, limit=50)
    assert watchdog.longest < STALL, watchdog.report()
    assert [e.key for e in found[:3]] == ["k00000", "k00001", "k00002"]
    assert len(found) == 50


async def test_ingest_of_the_largest_text_yields_between_chunks() -> None:
    """1,000,000 characters (the arguments cap) in chunks of 1,000 (the default size)."""
    backend = InMemoryBackend()
    text = " ".join(f"word{i}" for i in range(150_000))[:MAX_JSON_CHARS]
    ingest = tools_of(backend, MemoryIngest(chunk_size=1000, chunk_overlap=0))["memory_ingest"]
    async with StallWatchdog() as watchdog:
        out = await ingest.executor({"source": "doc", "text": text})
    assert watchdog.longest < STALL, watchdog.report()
    assert json.loads(out.content)["chunks"] > 900


# --- answer normalisation ----------------------------------------------------------------


def _fat_arguments(chars: int) -> tuple[dict[str, Any], str]:
    """Arguments whose JSON text is about `chars` long, with as many nodes as fit."""
    value = {"a": [[0, 0, 0]] * ((chars - 10) // 8)}
    return value, json.dumps(value, separators=(",", ":"))


async def test_a_response_of_64_calls_with_a_million_characters_of_arguments_each() -> None:
    """4.6 s before: every call's arguments walked node by node, without a budget per answer."""
    arguments, raw = _fat_arguments(MAX_JSON_CHARS - 100)
    calls = tuple(
        ToolCall(f"id{i}", f"tool{i}", arguments, raw) for i in range(MAX_TOOL_CALLS_PER_RESPONSE)
    )
    response = ModelResponse("x" * (2 * 1_048_576), calls, Usage(1, 1), "tool_calls")
    async with StallWatchdog() as watchdog:
        normal = normalise_response(response, step=1, seen_ids=set())
    assert watchdog.longest < STALL, watchdog.report()
    assert normal.tool_calls[0].arguments is not None  # within the per-answer budget
    assert all(c.arguments is None for c in normal.tool_calls[1:])  # past it: rejected
    assert "arguments of 63 tool call(s) were not read" in normal.text


# --- guardrail pattern checks ----------------------------------------------------------------


def _guard(patterns: list[str], action: str = "deny") -> GuardrailBinding:
    spec = PatternGuardrail.model_validate({"patterns": patterns, "action": action})
    return GuardrailBinding("g", frozenset({"output"}), PatternCheck(spec))


@pytest.mark.slow
async def test_patterns_that_defeat_re2s_dfa_do_not_stall_and_deny_at_the_deadline() -> None:
    """`(?s).{990}z` over non-ASCII text makes RE2 fall back to its NFA: ~12 s for one pattern
    over 1 Mi characters (386 s of blocked loop for 32 of them before), with the GIL released.
    The check runs off the loop with a deadline; past it the text is denied (fail closed) and
    the thread stops after the pattern it is in (awaited here, so no other test shares it)."""
    pattern = "(?s)." + "{" + str(MAX_PATTERN_CHARS - 10) + "}z"
    text = ("é世a" * (MAX_CHECKED_CHARS // 3 + 1))[:MAX_CHECKED_CHARS]
    guard = _guard([pattern] * MAX_PATTERNS)
    async with StallWatchdog() as watchdog:
        checked = await screen([guard], "output", text, step=1)
    assert watchdog.longest < STALL, watchdog.report()
    assert checked.denied is not None and checked.denied.cause == "Timeout"
    for _ in range(600):  # the one pattern in flight: ~12 s here
        if not any(t.name == "ordo-pattern-check" for t in threading.enumerate()):
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the given-up check did not stop after its pattern")


async def test_redaction_of_a_million_matches_is_bounded() -> None:
    """3.5 s before: one Python callback per match. Past MAX_REDACTIONS matches the text is
    denied instead (fail closed), never redacted partly."""
    text = "a" * MAX_CHECKED_CHARS
    guard = _guard(["a"], action="redact")
    async with StallWatchdog() as watchdog:
        checked = await screen([guard], "output", text, step=1)
    assert watchdog.longest < STALL, watchdog.report()
    assert checked.denied is not None and checked.denied.cause == "TooManyMatches"
    few = "a b " * (guardrails_mod.MAX_REDACTIONS // 2)
    async with StallWatchdog() as watchdog:
        redacted = await screen([guard], "output", few, step=1)
    assert watchdog.longest < STALL, watchdog.report()
    assert redacted.denied is None and "a" not in redacted.text.replace("[REDACTED]", "")


async def test_every_pattern_over_the_longest_text() -> None:
    """MAX_PATTERNS patterns of MAX_PATTERN_CHARS over MAX_CHECKED_CHARS, for both actions."""
    patterns = [f"(?i)secret{i}[a-z0-9]{{1,{MAX_PATTERN_CHARS - 30}}}" for i in range(MAX_PATTERNS)]
    text = ("lorem ipsum secret dolor " * (MAX_CHECKED_CHARS // 25 + 1))[:MAX_CHECKED_CHARS]
    for action in ("deny", "redact"):
        async with StallWatchdog() as watchdog:
            checked = await screen([_guard(patterns, action)], "output", text, step=1)
        assert watchdog.longest < STALL, watchdog.report()
        assert checked.denied is None and checked.text == text


# --- JSON parsing -----------------------------------------------------------------------------


def _pad(body: str) -> str:
    """`body` inside enough brackets that the depth pre-scan runs (more than MAX_JSON_DEPTH)."""
    depth = MAX_JSON_DEPTH - 1
    text = "[" * depth + body + "]" * depth
    return text[:MAX_JSON_CHARS] if len(text) > MAX_JSON_CHARS else text


def _fill(unit: str, room: int) -> str:
    return "[" + ",".join([unit] * (room // (len(unit) + 1))) + "]"


WORST_JSON = {
    "numbers": _pad(_fill("1", MAX_JSON_CHARS - 200)),
    "empty strings": _pad(_fill('""', MAX_JSON_CHARS - 200)),
    "escaped quotes": _pad(json.dumps('"' * ((MAX_JSON_CHARS - 300) // 2))),
    "backslashes": _pad(json.dumps("\\" * ((MAX_JSON_CHARS - 300) // 2))),
    "surrogate pairs": _pad(json.dumps("\U0001f600" * ((MAX_JSON_CHARS - 300) // 12))),
    "small objects": "[" + ",".join(['{"a":1}'] * 99_990) + "]",  # the container cap
    "brackets in a string": _pad(json.dumps("{[" * ((MAX_JSON_CHARS - 300) // 2))),
}


@pytest.mark.parametrize("name", list(WORST_JSON))
async def test_json_parsing_at_the_cap(name: str) -> None:
    """Within every cap, the worst documents parse (brackets inside strings are not
    containers: 1,000,000 of them in a string are fine)."""
    text = WORST_JSON[name]
    assert len(text) <= MAX_JSON_CHARS
    async with StallWatchdog() as watchdog:
        value = bounded_json_loads(text)
    assert watchdog.longest < STALL, watchdog.report()
    assert isinstance(value, list)


async def test_json_with_more_containers_than_the_cap_is_refused_before_parsing() -> None:
    """333,333 empty arrays in 1,000,000 characters: 290 ms of parsing and walking before."""
    text = _fill("[]", MAX_JSON_CHARS - 10)
    async with StallWatchdog() as watchdog:
        with pytest.raises(UntrustedInputTooLarge, match="arrays and objects"):
            bounded_json_loads(text)
    assert watchdog.longest < STALL, watchdog.report()
