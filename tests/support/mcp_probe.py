"""One MCP tool call measured in a fresh interpreter, for the memory bound of tool results:

    python -m tests.support.mcp_probe URL SIZE

calls the server's `big` tool (tests/support/mcp_server.py) with `size` 10 twice (a warm-up:
every import and first-use cost is paid; then `small_peak`, the peak of Python allocations of a
small call, tracemalloc), then with SIZE, and prints one JSON line: `rss_growth` (bytes the
peak RSS grew during that call), `traced_peak` (its peak of Python allocations), `ended` (`ok`
or `ToolFailure`), `cause` and `chars` (the result's length).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import tracemalloc
from typing import Any

from tests.support.wire import resolved

from ordo.engine.tooling import ToolFailure, failure_cause
from ordo.tools import build_executor


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


async def probe(url: str, size: int) -> dict[str, Any]:
    spec = {"type": "mcp", "mcp": {"url": url}, "timeout": "60s"}
    executor = build_executor(resolved("big", spec))
    await executor({"size": 10})
    tracemalloc.start()
    await executor({"size": 10})
    _, small_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    before = peak_rss()
    out: dict[str, Any] = {"ended": "ok", "cause": None, "chars": 0}
    try:
        result = await executor({"size": size})
        out["chars"] = len(result.content)
    except ToolFailure as exc:
        out.update(ended="ToolFailure", cause=failure_cause(exc), message=exc.message)
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        **out,
        "rss_growth": peak_rss() - before,
        "traced_peak": traced_peak,
        "small_peak": small_peak,
    }


def main(argv: list[str]) -> None:
    print(json.dumps(asyncio.run(probe(argv[0], int(argv[1])))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
