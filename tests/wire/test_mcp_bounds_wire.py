"""MCP results and tool lists are bounded where they are read: at the transport (issue 23).

A result of 50 MB used to be read whole by the `mcp` SDK before ordo cut it to 64 KiB (operator
RSS +480 MB); a tool list was read whole too, and a listed output schema was evaluated by
Python's jsonschema (backtracking `re`) against the server's structured content. Now at most
`MAX_MESSAGE_BYTES` of one response are read (`ResponseTooLarge`), a tool list is bounded in
bytes and tools (`ListingTooLarge`, the tool is not offered), and the work on the loop for a
message at the cap stays a short slice.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.engine_fakes import DictStore, obj
from tests.support.mcp_hostile_server import (
    Framing,
    HostileMcpServer,
    blocks_result,
    listing,
    text_result,
    tools_result,
)
from tests.support.stall import StallWatchdog
from tests.support.wire import resolved

from ordo.engine.tooling import ToolCallFailed, ToolFailure
from ordo.operator.readiness import reconciler as readiness
from ordo.tools import binding, build_executor
from ordo.tools.mcp import (
    MAX_LISTED_TOOLS,
    MAX_LISTING_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_MESSAGE_ITEMS,
    McpToolExecutor,
)

ROOT = Path(__file__).resolve().parents[2]
STALL_BOUND = 1.0
"""Generous: the measured worst slice at the caps is published in docs/security.md."""


def executor(url: str, name: str = "big", **spec: object) -> McpToolExecutor:
    tool = build_executor(
        resolved(name, {"type": "mcp", "mcp": {"url": url}, "timeout": "20s", **spec})
    )
    assert isinstance(tool, McpToolExecutor)
    return tool


@pytest.fixture
def sdk_server() -> Iterator[str]:
    """The SDK's own server (tests/support/mcp_server.py) in a process of its own: its answer
    of 50 MB costs the server, not the measured client."""
    args = [sys.executable, "-m", "tests.support.mcp_server", "--port", "0"]
    server = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith("listening on "), line
        yield line.removeprefix("listening on ").strip()
    finally:
        server.terminate()
        server.wait(10)


def probe(url: str, size: int) -> dict[str, Any]:
    """One call of `size` bytes, measured in a fresh interpreter (tests/support/mcp_probe.py)."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.mcp_probe", url, str(size)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    measured: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def assert_refused_within_bounds(measured: dict[str, Any]) -> None:
    assert (measured["ended"], measured["cause"]) == ("ToolFailure", "ResponseTooLarge"), measured
    assert f"{MAX_MESSAGE_BYTES} bytes" in measured["message"]
    # Before: RSS +480 MB, traced peak 200 MB. The bounds are generous: measured figures are in
    # docs/security.md.
    # What the call allocated beyond what a small call does (the session's own objects).
    assert measured["traced_peak"] - measured["small_peak"] < 3 * MAX_MESSAGE_BYTES, measured
    assert measured["rss_growth"] < 16 * MAX_MESSAGE_BYTES, measured


@pytest.mark.slow
def test_a_50_mb_result_of_the_sdk_server_is_refused_with_bounded_memory(sdk_server: str) -> None:
    assert_refused_within_bounds(probe(sdk_server, 50_000_000))


@pytest.mark.slow
@pytest.mark.parametrize("framing", ["chunked", "sse"])
def test_a_50_mb_streamed_result_is_cut_at_the_cap_with_bounded_memory(framing: Framing) -> None:
    with HostileMcpServer(framing=framing) as server:
        assert_refused_within_bounds(probe(server.url, 50_000_000))
        assert server.aborted.wait(5), "the server wrote the whole body"


@pytest.mark.parametrize("framing", ["json", "chunked", "sse"])
async def test_a_result_over_the_cap_is_a_tool_error_and_the_rest_is_not_read(
    framing: Framing,
) -> None:
    with HostileMcpServer(call=lambda _: text_result(50_000_000), framing=framing) as server:
        with pytest.raises(ToolCallFailed) as caught:
            await executor(server.url)({})
        if framing != "json":  # a Content-Length over the cap is refused before any byte
            assert server.aborted.wait(5), "the server wrote the whole body"
    assert caught.value.cause == "ResponseTooLarge"
    assert f"longer than {MAX_MESSAGE_BYTES} bytes" in caught.value.message
    assert server.methods.count("tools/call") == 1


@pytest.mark.parametrize("framing", ["json", "chunked", "sse"])
async def test_a_result_under_the_cap_is_read_and_cut_for_the_model(framing: Framing) -> None:
    size = MAX_MESSAGE_BYTES - 4096
    with HostileMcpServer(call=lambda _: text_result(size), framing=framing) as server:
        out = await executor(server.url)({})
    assert not out.is_error and out.content.startswith("x" * 1000)
    assert "[truncated" in out.content


async def test_a_tool_list_page_over_the_cap_makes_the_tool_unavailable() -> None:
    pages = lambda: tools_result(20, pad=MAX_MESSAGE_BYTES // 10)  # noqa: E731
    with HostileMcpServer(tools=pages) as server:
        tool = executor(server.url)
        with pytest.raises(ToolFailure) as caught:
            await tool.describe()
        with pytest.raises(ToolFailure):
            await binding(resolved("big", {"type": "mcp", "mcp": {"url": server.url}}))
    message = caught.value.message
    assert "Tool 'big'" in message and "tool list" in message and f"{MAX_MESSAGE_BYTES}" in message
    assert getattr(caught.value, "cause", None) == "ListingTooLarge"
    assert caught.value.reason == "ToolError"


async def test_the_tools_ready_condition_says_why_its_list_was_refused() -> None:
    pages = lambda: tools_result(20, pad=MAX_MESSAGE_BYTES // 10)  # noqa: E731
    with HostileMcpServer(tools=pages) as server:
        tool = obj("Tool", "big", {"type": "mcp", "mcp": {"url": server.url}})
        verdict = await readiness.tool_verdict(tool, DictStore(tool))
    assert (verdict.status, verdict.reason) == ("False", "ServerUnavailable")
    assert "tool list was refused" in verdict.message and str(MAX_MESSAGE_BYTES) in verdict.message


async def test_a_tool_list_of_too_many_tools_makes_the_tool_unavailable() -> None:
    last = {"name": "wanted", "inputSchema": {"type": "object"}}
    tools = [{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(MAX_LISTED_TOOLS)]
    server = HostileMcpServer(tools=listing(*tools, last))
    with server, pytest.raises(ToolFailure) as caught:
        await executor(server.url, "wanted").describe()
    assert f"more than {MAX_LISTED_TOOLS} tools" in caught.value.message
    assert getattr(caught.value, "cause", None) == "ListingTooLarge"


async def test_the_listing_budget_counts_every_page() -> None:
    # Pages under the per-message cap, but more of them than the listing's byte budget.
    pages_needed = MAX_LISTING_BYTES // (MAX_MESSAGE_BYTES // 2) + 1
    assert pages_needed < 50
    page = lambda: tools_result(5, pad=MAX_MESSAGE_BYTES // 10, next_cursor="more")  # noqa: E731
    with HostileMcpServer(tools=page) as server, pytest.raises(ToolFailure) as caught:
        await executor(server.url, "wanted").describe()
    assert f"{MAX_LISTING_BYTES}" in caught.value.message
    assert server.methods.count("tools/list") <= pages_needed + 1


def dense_arrays(size: int) -> Iterator[bytes]:
    """A CallToolResult whose structuredContent is `[[0],[0],...]` up to `size` bytes: the JSON
    that costs the SDK's first parse the most per byte."""
    yield b'{"content":[],"structuredContent":{"a":['
    yield b",".join([b"[0]"] * ((size - 200) // 4))
    yield b']},"isError":false,"resultType":"complete"}'


UNDER_ITEMS = MAX_MESSAGE_ITEMS // 2 - 10
"""Empty text blocks that fit the item cap (each is an array element and an object)."""


@pytest.mark.parametrize(
    ("case", "server", "refused"),
    [
        # The most models per byte the SDK builds, just under the item cap: the call works.
        (
            "blocks under the item cap",
            lambda: HostileMcpServer(call=lambda _: blocks_result(UNDER_ITEMS)),
            None,
        ),
        # Empty blocks up to the byte cap: over the item cap, refused after the first parse.
        (
            "blocks at the byte cap",
            lambda: HostileMcpServer(call=lambda _: blocks_result(MAX_MESSAGE_BYTES // 26 - 100)),
            "ResponseTooLarge",
        ),
        # The costliest first parse per byte.
        (
            "arrays at the byte cap",
            lambda: HostileMcpServer(call=lambda _: dense_arrays(MAX_MESSAGE_BYTES), framing="sse"),
            "ResponseTooLarge",
        ),
    ],
)
async def test_a_result_at_the_caps_holds_the_loop_only_briefly(
    case: str, server: Callable[[], HostileMcpServer], refused: str | None
) -> None:
    with server() as hostile:
        tool = executor(hostile.url)
        async with StallWatchdog() as watchdog:
            try:
                out = await tool({})
                cause = None
            except ToolCallFailed as exc:
                cause = exc.cause
                assert f"more than {MAX_MESSAGE_ITEMS} JSON objects" in exc.message
    assert cause == refused
    if refused is None:
        assert out.content == "\n" * (UNDER_ITEMS - 1)
    assert watchdog.longest < STALL_BOUND, f"{case}: {watchdog.report()}"


@pytest.mark.parametrize(
    ("tools", "match"),
    [
        (MAX_MESSAGE_ITEMS // 3 - 10, f"more than {MAX_LISTED_TOOLS} tools"),
        (MAX_MESSAGE_BYTES // 70, f"more than {MAX_MESSAGE_ITEMS} JSON objects"),
    ],
    ids=["over the tool count", "at the byte cap"],
)
async def test_a_tool_list_at_the_caps_holds_the_loop_only_briefly(tools: int, match: str) -> None:
    # Minimal tools (an element, an object and its inputSchema each).
    with HostileMcpServer(tools=lambda: tools_result(tools)) as server:
        tool = executor(server.url)
        async with StallWatchdog() as watchdog:
            with pytest.raises(ToolCallFailed, match=match) as caught:
                await tool.describe()
    assert caught.value.cause == "ListingTooLarge"
    assert watchdog.longest < STALL_BOUND, watchdog.report()


async def test_a_listed_output_schema_is_not_evaluated_against_the_result() -> None:
    # The SDK would check structuredContent against the server's outputSchema with Python's
    # jsonschema, whose `pattern` is a backtracking `re`: 30 characters take minutes.
    tool = {
        "name": "big",
        "inputSchema": {"type": "object"},
        "outputSchema": {
            "type": "object",
            "properties": {"r": {"type": "string", "pattern": "^(a+)+$"}},
        },
    }
    result = {
        "content": [{"type": "text", "text": "answer"}],
        "structuredContent": {"r": "a" * 30 + "!"},
        "isError": False,
        "resultType": "complete",
    }
    body = json.dumps(result).encode()
    with HostileMcpServer(tools=listing(tool), call=lambda _: [body], framing="json") as server:
        async with StallWatchdog() as watchdog:
            out = await executor(server.url)({})
    assert out.content == "answer"
    assert watchdog.longest < STALL_BOUND, watchdog.report()
    assert "tools/list" not in server.methods  # a call does not read the list
