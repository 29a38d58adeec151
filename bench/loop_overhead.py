"""Benchmark 1: the cost of the agent loop itself, one agent, 3 tools, 5 model calls.

Every loop runs the same script against the same server (bench/server.py): 4 tool steps then
a text answer, the tools `lookup`, `convert`, `summarize` in turn (step 4 asks for `lookup`
again), each an in-process async function returning the same text. The loops:

* `floor`: the bare loop, the practical floor for Python (issue 14): one aiohttp session,
  `json.dumps` of the request, `json.loads` of the answer, append the message, run the tools,
  append the results. No SDK, no validation.
* `raw-sdk`: the same loop on the `openai` SDK (one AsyncOpenAI client, no retries):
  `chat.completions.create`, append `message.model_dump()`, run the tools, append the results.
* `ordo`: `ordo.engine.loop.run_agent` with the OpenAI provider built from a ModelEndpoint
  (`ordo.providers.build_model_client`) and ToolBindings whose executors return ToolOutput.
  Governance is evaluated and arguments are validated against the schema for every call;
  as in a Task, a tool is offered until it has been called, so step 4's second `lookup`
  gets the engine's "already called" error result instead of running again.
* `openai-agents`: the OpenAI Agents SDK `Runner.run` with `OpenAIChatCompletionsModel`,
  `@function_tool`s, tracing off.
* `langgraph`: LangGraph's prebuilt ReAct agent (`create_react_agent`) over `ChatOpenAI`
  (no streaming, no retries, Chat Completions), async `StructuredTool`s.

Each framework runs in a fresh process per round (so one framework's imports and garbage do
not slow another), and the frameworks are interleaved across rounds. Inside a round, warm-up
runs (cold caches, first connection) are discarded, then runs at 0 ms and at 50 ms model
latency are timed one after another. Per-step overhead = run wall time / 5 - model latency.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bench.common import median, peers_installed, run_worker
from bench.server import (
    FINAL_TEXT,
    SYSTEM_PROMPT,
    TOOL_DESCRIPTION,
    TOOL_NAMES,
    TOOL_PARAMETERS,
    USER_MESSAGE,
    ServerProcess,
    measure_round_trip,
    model_name,
    tool_result,
)

STEPS = 5
TOOL_STEPS = 4
LATENCIES_MS = (0, 50)
ORDO_FRAMEWORKS = ("floor", "raw-sdk", "ordo")
"""Always run: the bare aiohttp + json loop (the floor), the `openai` SDK loop, ordo."""
PEER_FRAMEWORKS = ("openai-agents", "langgraph")
Runner = Callable[[], Awaitable[str]]


@dataclass
class Settings:
    rounds: int = 5
    warmup: int = 30
    runs: dict[int, int] = field(default_factory=lambda: {0: 200, 50: 8})
    peers: bool = True

    @classmethod
    def quick(cls) -> Settings:
        return cls(rounds=1, warmup=3, runs={0: 5, 50: 2}, peers=False)


# -- the loops --------------------------------------------------------------------------------


class ToolCounter:
    executions = 0


async def _tool(name: str, arguments: dict[str, Any]) -> str:
    ToolCounter.executions += 1
    return tool_result(name, arguments)


def _tool_specs() -> list[Any]:
    return [
        {
            "type": "function",
            "function": {"name": n, "description": TOOL_DESCRIPTION, "parameters": TOOL_PARAMETERS},
        }
        for n in TOOL_NAMES
    ]


def _first_messages() -> list[Any]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": USER_MESSAGE}]


async def floor_runner(base_url: str, latency_ms: int) -> Runner:
    """The practical floor of a Python agent loop: one aiohttp session, `json.dumps` of the
    request, `json.loads` of the answer, the assistant message and one `tool` message per
    call appended, local tools. No SDK, no validation, no governance."""
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    url = base_url + "/chat/completions"
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
    model = model_name(latency_ms, TOOL_STEPS)
    tools = _tool_specs()

    async def run() -> str:
        messages = _first_messages()
        for _ in range(10):
            body = json.dumps({"model": model, "messages": messages, "tools": tools})
            async with session.post(url, data=body, headers=headers) as response:
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status}")
                message = json.loads(await response.read())["choices"][0]["message"]
            messages.append(message)
            if not message.get("tool_calls"):
                return str(message.get("content") or "")
            for call in message["tool_calls"]:
                arguments = json.loads(call["function"]["arguments"] or "{}")
                output = await _tool(call["function"]["name"], arguments)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        raise RuntimeError("no answer in 10 steps")

    return run


async def raw_sdk_runner(base_url: str, latency_ms: int) -> Runner:
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=30)
    model = model_name(latency_ms, TOOL_STEPS)
    tools = _tool_specs()

    async def run() -> str:
        messages = _first_messages()
        for _ in range(10):
            response = await client.chat.completions.create(
                model=model, messages=messages, tools=tools
            )
            message = response.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return message.content or ""
            for call in message.tool_calls:
                arguments = json.loads(call.function.arguments or "{}")  # type: ignore[union-attr]
                output = await _tool(call.function.name, arguments)  # type: ignore[union-attr]
                messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
        raise RuntimeError("no answer in 10 steps")

    return run


async def ordo_runner(base_url: str, latency_ms: int) -> Runner:
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
                "model": model_name(latency_ms, TOOL_STEPS),
                "timeout": "30s",
                "retry": {"maxAttempts": 1},
            },
        }
    )
    model = build_model_client(endpoint, "bench")

    def executor(name: str) -> Any:
        async def execute(arguments: dict[str, Any]) -> ToolOutput:
            return ToolOutput(await _tool(name, arguments))

        return execute

    tools = [
        ToolBinding(n, n, TOOL_DESCRIPTION, TOOL_PARAMETERS, executor(n), idempotent=True)
        for n in TOOL_NAMES
    ]
    config = RunConfig(
        system_prompt=SYSTEM_PROMPT,
        user_message=USER_MESSAGE,
        governance=Governance(candidate_tools=frozenset(TOOL_NAMES)),
        max_steps=10,
        timeout=300,
    )

    async def run() -> str:
        result = await run_agent(config, model, tools)
        if result.phase != "Succeeded":
            raise RuntimeError(f"ordo run ended {result.phase}/{result.reason}: {result.message}")
        return result.output

    return run


async def agents_runner(base_url: str, latency_ms: int) -> Runner:
    import openai
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        RunConfig,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=30)

    def make(name: str) -> Any:
        async def tool(q: str) -> str:
            return await _tool(name, {"q": q})

        return function_tool(tool, name_override=name, description_override=TOOL_DESCRIPTION)

    agent = Agent(
        name="bench",
        instructions=SYSTEM_PROMPT,
        model=OpenAIChatCompletionsModel(model_name(latency_ms, TOOL_STEPS), openai_client=client),
        tools=[make(n) for n in TOOL_NAMES],
    )
    run_config = RunConfig(tracing_disabled=True)

    async def run() -> str:
        result = await Runner.run(agent, USER_MESSAGE, max_turns=STEPS, run_config=run_config)
        return str(result.final_output)

    return run


async def langgraph_runner(base_url: str, latency_ms: int) -> Runner:
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

    llm = ChatOpenAI(
        model=model_name(latency_ms, TOOL_STEPS),
        base_url=base_url,
        api_key="bench",  # type: ignore[arg-type]
        max_retries=0,
        timeout=30,
        disable_streaming=True,
        use_responses_api=False,
    )

    def make(name: str) -> Any:
        async def tool(q: str) -> str:
            return await _tool(name, {"q": q})

        return StructuredTool.from_function(
            coroutine=tool, name=name, description=TOOL_DESCRIPTION, args_schema=TOOL_PARAMETERS
        )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = create_react_agent(llm, [make(n) for n in TOOL_NAMES], prompt=SYSTEM_PROMPT)
    config: Any = {"recursion_limit": 2 * STEPS}

    async def run() -> str:
        out = await agent.ainvoke({"messages": [("user", USER_MESSAGE)]}, config)
        return str(out["messages"][-1].content)

    return run


RUNNERS: dict[str, Callable[[str, int], Awaitable[Runner]]] = {
    "floor": floor_runner,
    "raw-sdk": raw_sdk_runner,
    "ordo": ordo_runner,
    "openai-agents": agents_runner,
    "langgraph": langgraph_runner,
}


# -- one worker process -------------------------------------------------------------------------


async def _worker(
    framework: str, base_url: str, warmup: int, runs: dict[int, int], profile: str | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"framework": framework, "latencies": {}}
    for latency_ms, count in runs.items():
        run = await RUNNERS[framework](base_url, latency_ms)
        for _ in range(warmup if latency_ms == 0 else max(1, warmup // 10)):
            answer = await run()
            if answer != FINAL_TEXT:
                raise RuntimeError(f"{framework} answered {answer!r}")
        ToolCounter.executions = 0
        profiler = None
        if profile and latency_ms == 0:
            from pyinstrument import Profiler

            profiler = Profiler(interval=0.0002, async_mode="enabled")
            profiler.start()
        walls, cpus = [], []
        for _ in range(count):
            c0, t0 = time.process_time(), time.perf_counter()
            answer = await run()
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
            if answer != FINAL_TEXT:
                raise RuntimeError(f"{framework} answered {answer!r}")
        if profiler is not None:
            profiler.stop()
            assert profile is not None
            with open(profile, "w") as f:
                f.write(profiler.output_text(unicode=False, color=False, show_all=False))
            with open(profile.removesuffix(".txt") + ".html", "w") as f:
                f.write(profiler.output_html())
        out["latencies"][str(latency_ms)] = {
            "wall": walls,
            "cpu": cpus,
            "tool_executions_per_run": ToolCounter.executions / count,
        }
    return out


# -- the benchmark ----------------------------------------------------------------------------


@dataclass
class Row:
    framework: str
    latency_ms: int
    runs: int
    run_ms: float
    step_ms: float
    overhead_ms: float
    cpu_step_ms: float
    ratio: float
    """Per-step overhead / the floor's (wall time)."""
    cpu_ratio: float
    """Client CPU per model call / the floor's (issue 14's target)."""
    client_ratio: float
    """The same with the server's round trip taken out of both."""
    round_spread: float
    """(max - min) / median of the per-round medians of run time."""
    tool_executions: float


@dataclass
class LoopResult:
    rows: list[Row]
    server: dict[str, float]
    skipped: list[str]
    rounds: int
    model_calls_checked: bool
    profile: str | None = None

    def row(self, framework: str, latency_ms: int) -> Row | None:
        return next(
            (r for r in self.rows if r.framework == framework and r.latency_ms == latency_ms), None
        )


def run(settings: Settings, profile: str | None = None, log: Any = print) -> LoopResult:
    frameworks = list(ORDO_FRAMEWORKS)
    skipped: list[str] = []
    if settings.peers and peers_installed():
        frameworks += PEER_FRAMEWORKS
    else:
        skipped = list(PEER_FRAMEWORKS)
    samples: dict[tuple[str, int], list[list[float]]] = {}
    cpu: dict[tuple[str, int], list[float]] = {}
    tools: dict[tuple[str, int], float] = {}
    runs_arg = ",".join(f"{k}:{v}" for k, v in settings.runs.items())
    checked = True
    with ServerProcess() as server:
        rtt = measure_round_trip(server.url, 2000 if settings.rounds > 1 else 200)
        log(
            f"bench server: {rtt['round_trip_us']:.0f} µs round trip, "
            f"{rtt['server_cpu_us']:.0f} µs server CPU per request"
        )
        for round_no in range(settings.rounds):
            order = frameworks if round_no % 2 == 0 else list(reversed(frameworks))
            for framework in order:
                before = server.stats()["model_calls"]
                args = [
                    "--framework",
                    framework,
                    "--url",
                    server.url + "/v1",
                    "--warmup",
                    str(settings.warmup),
                    "--runs",
                    runs_arg,
                ]
                result = run_worker("bench.loop_overhead", args)
                calls = server.stats()["model_calls"] - before
                total_runs = sum(settings.runs.values()) + settings.warmup
                total_runs += sum(max(1, settings.warmup // 10) for k in settings.runs if k)
                if calls != STEPS * total_runs:
                    checked = False
                    log(f"  {framework}: {calls} model calls, expected {STEPS * total_runs}")
                for latency, data in result["latencies"].items():
                    key = (framework, int(latency))
                    samples.setdefault(key, []).append(data["wall"])
                    cpu.setdefault(key, []).extend(data["cpu"])
                    tools[key] = data["tool_executions_per_run"]
                log(
                    f"  round {round_no + 1}/{settings.rounds} {framework}: "
                    + ", ".join(
                        f"{lat} ms → {median(d['wall']) * 1000:.2f} ms/run"
                        for lat, d in result["latencies"].items()
                    )
                )
        if profile:  # a separate, untimed pass: the profiler slows what it watches
            run_worker(
                "bench.loop_overhead",
                [
                    "--framework",
                    "ordo",
                    "--url",
                    server.url + "/v1",
                    "--warmup",
                    str(settings.warmup),
                    "--runs",
                    "0:200",
                    "--profile",
                    profile,
                ],
            )
    rtt_ms = rtt["round_trip_us"] / 1000
    rows: list[Row] = []
    for latency_ms in settings.runs:
        floor_overhead = floor_cpu = None
        for framework in frameworks:
            rounds = samples[(framework, latency_ms)]
            walls = [w for r in rounds for w in r]
            run_ms = median(walls) * 1000
            step_ms = run_ms / STEPS
            overhead = step_ms - latency_ms
            cpu_step = median(cpu[(framework, latency_ms)]) * 1000 / STEPS
            if framework == "floor":
                floor_overhead, floor_cpu = overhead, cpu_step
            assert floor_overhead is not None and floor_cpu is not None
            per_round = [median(r) for r in rounds]
            spread = (max(per_round) - min(per_round)) / median(per_round)
            rows.append(
                Row(
                    framework,
                    latency_ms,
                    len(walls),
                    run_ms,
                    step_ms,
                    overhead,
                    cpu_step,
                    overhead / floor_overhead,
                    cpu_step / floor_cpu,
                    (overhead - rtt_ms) / (floor_overhead - rtt_ms),
                    spread,
                    tools[(framework, latency_ms)],
                )
            )
    return LoopResult(rows, rtt, skipped, settings.rounds, checked, profile)


def _parse_runs(text: str) -> dict[int, int]:
    return {int(k): int(v) for k, v in (part.split(":") for part in text.split(","))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--framework", choices=list(RUNNERS))
    parser.add_argument("--url")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--runs", default="0:200,50:8")
    parser.add_argument("--profile")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.worker:
        result = asyncio.run(
            _worker(args.framework, args.url, args.warmup, _parse_runs(args.runs), args.profile)
        )
        sys.stdout.write(json.dumps(result) + "\n")
        return
    result = run(Settings.quick() if args.quick else Settings(), profile=args.profile)
    for row in result.rows:
        print(row)


if __name__ == "__main__":
    main()
