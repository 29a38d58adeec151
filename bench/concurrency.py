"""Benchmark 2: many concurrent runs in one ordo process, at 100 ms model latency.

Each level (1, 10, 100, 1000 runs at once) runs in a fresh process, so its peak RSS is its
own. The process imports everything and does one warm-up run, settles its garbage, records
its RSS and resets its peak (VmHWM, via /proc/self/clear_refs), then starts all runs at
once. Each run is what the operator does for one Task: it builds its own model client
(`build_model_client` from a ModelEndpoint) and runs `run_agent` with the benchmark's 3 tools
(5 model calls: 4 tool steps and the answer). Reported:

* wall time from the start of the first run to the end of the last, against the ideal
  (5 steps x 100 ms: the model latency alone);
* peak RSS per in-flight run: (VmHWM - RSS before the runs) / runs;
* client CPU seconds, and the server's CPU seconds (to show the server was not the limit).

The floor (the bare aiohttp + json loop, one shared session) and the raw SDK loop (the
hand-written `openai` SDK loop, one shared client) run at the same levels for comparison: on a
2-core machine the client side is CPU-bound long before 1000 runs, so the floor's wall time at
1000 runs is what ordo's is measured against (issue 14: within 1.5x).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import sys
import time
from dataclasses import dataclass
from typing import Any

from bench.common import reset_peak_rss, run_worker, status_kib
from bench.server import ServerProcess

LATENCY_MS = 100
STEPS = 5
LEVELS = (1, 10, 100, 1000)
QUICK_LEVELS = (1, 10)


async def _ordo_factory(base_url: str) -> Any:
    from bench.loop_overhead import TOOL_STEPS, _tool
    from bench.server import (
        SYSTEM_PROMPT,
        TOOL_DESCRIPTION,
        TOOL_NAMES,
        TOOL_PARAMETERS,
        USER_MESSAGE,
        model_name,
    )
    from ordo.api import ModelEndpoint
    from ordo.engine.governance import Governance
    from ordo.engine.loop import run_agent
    from ordo.engine.state import RunConfig
    from ordo.engine.tooling import ToolBinding, ToolOutput
    from ordo.providers import build_model_client

    endpoint = ModelEndpoint.model_validate(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "ModelEndpoint",
            "metadata": {"name": "bench", "namespace": "bench"},
            "spec": {
                "provider": "openai-compatible",
                "baseUrl": base_url,
                "model": model_name(LATENCY_MS, TOOL_STEPS),
                "timeout": "60s",
                "retry": {"maxAttempts": 1},
            },
        }
    )

    def executor(name: str) -> Any:
        async def execute(arguments: dict[str, Any]) -> ToolOutput:
            return ToolOutput(await _tool(name, arguments))

        return execute

    config = RunConfig(
        system_prompt=SYSTEM_PROMPT,
        user_message=USER_MESSAGE,
        governance=Governance(candidate_tools=frozenset(TOOL_NAMES)),
        max_steps=10,
        timeout=600,
    )

    async def run() -> str:
        model = build_model_client(endpoint, "bench")  # one client per run, as per Task
        tools = [
            ToolBinding(n, n, TOOL_DESCRIPTION, TOOL_PARAMETERS, executor(n), idempotent=True)
            for n in TOOL_NAMES
        ]
        try:
            result = await run_agent(config, model, tools)
        finally:
            await model.close()  # type: ignore[attr-defined]  # as a Task's run does
        if result.phase != "Succeeded":
            raise RuntimeError(f"{result.phase}/{result.reason}: {result.message}")
        return result.output

    return run


async def _floor_factory(base_url: str) -> Any:
    from bench.loop_overhead import floor_runner

    return await floor_runner(base_url, LATENCY_MS)


async def _raw_sdk_factory(base_url: str) -> Any:
    from bench.loop_overhead import raw_sdk_runner

    return await raw_sdk_runner(base_url, LATENCY_MS)


FACTORIES = {"ordo": _ordo_factory, "floor": _floor_factory, "raw-sdk": _raw_sdk_factory}
FRAMEWORKS = tuple(FACTORIES)


async def _worker(framework: str, base_url: str, level: int) -> dict[str, Any]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * level + 256:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4 * level + 256), hard))
    run = await FACTORIES[framework](base_url)
    await run()  # warm-up: imports, first connection, caches
    gc.collect()
    await asyncio.sleep(0.2)
    before_kib = status_kib("VmRSS")
    peak_reset = reset_peak_rss()
    hwm_before = status_kib("VmHWM")
    cpu0, t0 = time.process_time(), time.perf_counter()
    results = await asyncio.gather(*(run() for _ in range(level)), return_exceptions=True)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    return {
        "framework": framework,
        "level": level,
        "wall": wall,
        "cpu": cpu,
        "rss_before_kib": before_kib,
        "hwm_kib": status_kib("VmHWM"),
        "hwm_before_kib": hwm_before,
        "peak_reset": peak_reset,
        "errors": errors[:3],
        "error_count": len(errors),
    }


@dataclass
class Row:
    framework: str
    level: int
    wall_s: float
    ideal_s: float
    ratio: float
    cpu_s: float
    server_cpu_s: float
    peak_rss_mib: float
    rss_per_run_kib: float
    errors: int


@dataclass
class ConcurrencyResult:
    rows: list[Row]
    peak_reset: bool

    def row(self, framework: str, level: int) -> Row | None:
        return next((r for r in self.rows if r.framework == framework and r.level == level), None)


def run(levels: tuple[int, ...] = LEVELS, log: Any = print) -> ConcurrencyResult:
    rows: list[Row] = []
    peak_reset = True
    ideal = STEPS * LATENCY_MS / 1000
    with ServerProcess() as server:
        for level in levels:
            for framework in FRAMEWORKS:
                before = server.stats()
                data = run_worker(
                    "bench.concurrency",
                    ["--framework", framework, "--url", server.url + "/v1", "--level", str(level)],
                )
                after = server.stats()
                peak_reset = peak_reset and data["peak_reset"]
                if data["error_count"]:
                    log(f"  {framework} x {level}: {data['error_count']} errors: {data['errors']}")
                grown = data["hwm_kib"] - data["rss_before_kib"]
                row = Row(
                    framework,
                    level,
                    data["wall"],
                    ideal,
                    data["wall"] / ideal,
                    data["cpu"],
                    after["cpu_seconds"] - before["cpu_seconds"],
                    data["hwm_kib"] / 1024,
                    grown / level,
                    data["error_count"],
                )
                rows.append(row)
                log(
                    f"  {framework} x {level}: {row.wall_s:.2f} s ({row.ratio:.2f}x ideal), "
                    f"{row.rss_per_run_kib:.0f} KiB per run, client CPU {row.cpu_s:.2f} s, "
                    f"server CPU {row.server_cpu_s:.2f} s"
                )
    return ConcurrencyResult(rows, peak_reset)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--framework", choices=FRAMEWORKS, default="ordo")
    parser.add_argument("--url")
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.worker:
        result = asyncio.run(_worker(args.framework, args.url, args.level))
        sys.stdout.write(json.dumps(result) + "\n")
        return
    for row in run(QUICK_LEVELS if args.quick else LEVELS).rows:
        print(row)


if __name__ == "__main__":
    main()
