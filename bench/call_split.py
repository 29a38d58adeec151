"""Where ordo's client CPU per model call goes (issue 14): one process, interleaved rounds.

    .venv/bin/python -m bench.call_split [--runs 100] [--rounds 9]

Benchmark 1's script (4 tool steps and the answer) against bench/server.py at 0 ms latency,
CPU per model call of each of these, measured round-robin in one process (so only the ratios
mean anything on a shared machine):

* `floor`: the bare aiohttp + json loop (loop_overhead.floor_runner);
* `ordo`: ordo's loop as benchmark 1 runs it (run_agent, the openai provider, the SDK);
* `engine`: run_agent alone, its model client answering the recorded answers (already ordo's
  types) without a provider, an SDK or I/O: ordo's engine (transcript, governance, argument
  validation, normalisation, events);
* `adapter`: ordo's provider adapter alone, on the requests the engine made in one run: the
  request body (`request_params`), the retry wrapper (`call_with_retries`, with its
  per-attempt timeout), `json.loads` of the recorded answer and its reading (`_response`:
  bounded argument parsing, usage); no SDK, no I/O;
* `sdk`: the `openai` SDK's generic `post` (as the provider calls it, sdk_http.post_json) of
  the five recorded request bodies, on an httpx2 client whose transport answers the recorded
  bodies without I/O: the SDK's own work (options, headers, URL, request and response
  objects, httpx2's client layers) that no configuration removes;
* `transport`: ordo's transport alone (sdk_transport.py) sending the five recorded requests
  to the server: aiohttp, the socket, the bounded read;
* `aiohttp`: the same five requests on a bare aiohttp session (the transport's I/O floor);
* `no-io`: ordo's loop with the SDK on the no-I/O transport of `sdk`: engine, adapter and SDK
  together, without I/O;
* `no-io+io`: the same, with `aiohttp`'s request of that step sent to the server before
  each model call, the request's own CPU measured apart (`io-between`) and left out.

`ordo - engine - adapter - sdk - transport` is the rest: what the parts cost more together
than alone. `no-io+io - no-io` shows where it comes from: the same code, with no line of it
changed, costs more when a real request runs between its steps (the CPU caches are cold
after the wait for the socket and the code in between), and the request costs more too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bench.loop_overhead import (
    STEPS,
    TOOL_STEPS,
    _first_messages,
    _tool_specs,
    floor_runner,
    ordo_runner,
)
from bench.server import FINAL_TEXT, ServerProcess, model_name, tool_result

Runner = Callable[[], Awaitable[Any]]


async def record(base_url: str) -> tuple[list[dict[str, Any]], list[bytes]]:
    """The five request bodies of one run of the script and the server's five answers."""
    import aiohttp

    requests: list[dict[str, Any]] = []
    answers: list[bytes] = []
    messages, tools, model = _first_messages(), _tool_specs(), model_name(0, TOOL_STEPS)
    async with aiohttp.ClientSession() as session:
        for _ in range(STEPS):
            body = {"model": model, "messages": json.loads(json.dumps(messages)), "tools": tools}
            async with session.post(base_url + "/chat/completions", json=body) as response:
                raw = await response.read()
            requests.append(body)
            answers.append(raw)
            message = json.loads(raw)["choices"][0]["message"]
            messages.append(message)
            for call in message.get("tool_calls") or []:
                arguments = json.loads(call["function"]["arguments"])
                output = tool_result(call["function"]["name"], arguments)
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    return requests, answers


def _replay(answers: Sequence[bytes]) -> Any:
    import httpx2

    class Replay(httpx2.AsyncBaseTransport):
        """Answers the recorded bodies in turn, without I/O."""

        def __init__(self) -> None:
            self.n = 0

        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            body = answers[self.n % len(answers)]
            self.n += 1
            return httpx2.Response(
                200,
                headers=[(b"content-type", b"application/json")],
                stream=httpx2.ByteStream(body),
                request=request,
            )

    return Replay()


async def _engine_runner(base_url: str, answers: Sequence[bytes]) -> Runner:
    """ordo's runner with a model client that hands back the answers as ordo's types."""
    from ordo.engine.model import ModelRequest, ModelResponse
    from ordo.providers.openai_provider import OpenAIModelClient

    run = await ordo_runner(base_url, 0)
    model = _closure_model(run)
    assert isinstance(model, OpenAIModelClient)
    empty = ModelRequest(items=(), tools=())
    responses = [model._response(json.loads(raw), empty) for raw in answers]
    turn = 0

    async def complete(request: ModelRequest) -> ModelResponse:
        nonlocal turn
        response = responses[turn % len(responses)]
        turn += 1
        return response

    model.complete = complete  # type: ignore[method-assign]  # this benchmark's own stand-in
    return run


async def _adapter_runner(base_url: str, answers: Sequence[bytes]) -> Runner:
    """The provider adapter alone on the requests the engine makes in one run of the script."""
    from ordo.engine.model import ModelRequest, ModelResponse
    from ordo.providers.errors import classify
    from ordo.providers.openai_provider import OpenAIModelClient
    from ordo.providers.retry import call_with_retries

    run = await ordo_runner(base_url, 0)
    model = _closure_model(run)
    assert isinstance(model, OpenAIModelClient)
    requests: list[ModelRequest] = []
    real = model.complete

    async def record_request(request: ModelRequest) -> ModelResponse:
        requests.append(request)
        return await real(request)

    model.complete = record_request  # type: ignore[method-assign]  # records one run
    await run()
    if len(requests) != len(answers):
        raise RuntimeError(f"the engine made {len(requests)} model calls, not {len(answers)}")

    async def run_adapter() -> str:
        for request, raw in zip(requests, answers, strict=True):
            model.request_params(request)

            async def attempt(timeout: float, raw: bytes = raw) -> Any:
                return json.loads(raw)

            completion = await call_with_retries(
                attempt, classify, model._policy, request.deadline, model._what
            )
            model._response(completion, request)
        return FINAL_TEXT

    return run_adapter


async def _no_io_runner(
    base_url: str,
    requests: Sequence[dict[str, Any]],
    answers: Sequence[bytes],
    io_between: bool = False,
) -> tuple[Runner, dict[str, float]]:
    """ordo's runner with its SDK client on the no-I/O transport; with `io_between`, the
    recorded requests sent in turn on a bare aiohttp session, one before each model call
    (as `aiohttp` sends them), their CPU added up in the returned dict (`io_cpu`) so that it
    can be taken out."""
    import aiohttp
    import httpx2
    import openai

    from ordo.engine.model import ModelRequest, ModelResponse
    from ordo.providers.openai_provider import OpenAIModelClient

    run = await ordo_runner(base_url, 0)
    model = _closure_model(run)
    assert isinstance(model, OpenAIModelClient)
    model._sdk()  # takes the shared client: the SDK client set below is kept from now on
    model._client = openai.AsyncOpenAI(
        **model._sdk_args,
        http_client=httpx2.AsyncClient(transport=_replay(answers), follow_redirects=False),
    )
    spent = {"io_cpu": 0.0}
    if not io_between:
        return run, spent
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    url = base_url + "/chat/completions"
    bodies = [json.dumps(body).encode() for body in requests]
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
    real = model.complete
    sent = 0

    async def complete(request: ModelRequest) -> ModelResponse:
        nonlocal sent
        cpu = time.process_time()
        async with session.post(url, data=bodies[sent % len(bodies)], headers=headers) as response:
            await response.read()
        sent += 1
        spent["io_cpu"] += time.process_time() - cpu
        return await real(request)

    model.complete = complete  # type: ignore[method-assign]  # this benchmark's own stand-in
    return run, spent


def _closure_model(run: Runner) -> Any:
    cells = getattr(run, "__closure__", None) or ()
    return next(c.cell_contents for c in cells if hasattr(c.cell_contents, "complete"))


async def _sdk_runner(
    base_url: str, requests: list[dict[str, Any]], answers: list[bytes]
) -> Runner:
    import httpx2
    import openai

    from ordo.providers.sdk_http import post_json

    client = openai.AsyncOpenAI(
        base_url=base_url,
        api_key="bench",
        max_retries=0,
        timeout=30,
        http_client=httpx2.AsyncClient(transport=_replay(answers), follow_redirects=False),
    )

    async def run() -> str:
        for body in requests:
            await post_json(client, "/chat/completions", body, {}, 30.0)
        return FINAL_TEXT

    return run


async def _transport_runner(base_url: str, requests: list[dict[str, Any]]) -> Runner:
    import httpx2

    from ordo.providers.sdk_http import MAX_CONNECTIONS, MAX_RESPONSE_BYTES
    from ordo.providers.sdk_transport import BoundedAiohttpTransport
    from ordo.tls import shared_ssl_context

    transport = BoundedAiohttpTransport(
        shared_ssl_context(), limit=MAX_CONNECTIONS, max_body=lambda: MAX_RESPONSE_BYTES
    )
    # As the SDK builds them (its headers, a JSON body); built once, outside the timing.
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
    timeout = {"connect": 30.0, "read": 30.0, "write": 30.0, "pool": 30.0}
    built = [
        httpx2.Request(
            "POST",
            base_url + "/chat/completions",
            headers=headers,
            content=json.dumps(body).encode(),
            extensions={"timeout": timeout},
        )
        for body in requests
    ]

    async def run() -> str:
        for request in built:
            response = await transport.handle_async_request(request)
            await response.aread()
        return FINAL_TEXT

    return run


async def _aiohttp_runner(base_url: str, requests: list[dict[str, Any]]) -> Runner:
    import aiohttp

    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    url = base_url + "/chat/completions"
    bodies = [json.dumps(body).encode() for body in requests]
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}

    async def run() -> str:
        for body in bodies:
            async with session.post(url, data=body, headers=headers) as response:
                await response.read()
        return FINAL_TEXT

    return run


async def measure(base_url: str, runs: int, rounds: int) -> dict[str, float]:
    """Median CPU ms per model call of each part, interleaved over `rounds` rounds."""
    requests, answers = await record(base_url)
    no_io, _ = await _no_io_runner(base_url, requests, answers)
    no_io_io, spent = await _no_io_runner(base_url, requests, answers, io_between=True)
    parts: dict[str, Runner] = {
        "floor": await floor_runner(base_url, 0),
        "ordo": await ordo_runner(base_url, 0),
        "engine": await _engine_runner(base_url, answers),
        "adapter": await _adapter_runner(base_url, answers),
        "sdk": await _sdk_runner(base_url, requests, answers),
        "transport": await _transport_runner(base_url, requests),
        "aiohttp": await _aiohttp_runner(base_url, requests),
        "no-io": no_io,
        "no-io+io": no_io_io,
    }
    for name, run in parts.items():
        for _ in range(10):
            answer = await run()
            if answer != FINAL_TEXT:
                raise RuntimeError(f"{name} answered {answer!r}")
    samples: dict[str, list[float]] = {name: [] for name in [*parts, "io-between"]}
    for n in range(rounds):
        order = list(parts) if n % 2 == 0 else list(reversed(parts))
        for name in order:
            run = parts[name]
            spent["io_cpu"] = 0.0
            cpu = time.process_time()
            for _ in range(runs):
                await run()
            cpu = time.process_time() - cpu
            if name == "no-io+io":
                samples["io-between"].append(spent["io_cpu"] / runs / STEPS * 1000)
                cpu -= spent["io_cpu"]
            samples[name].append(cpu / runs / STEPS * 1000)
    return {name: statistics.median(values) for name, values in samples.items()}


def report(ms: dict[str, float]) -> str:
    floor = ms["floor"]
    rest = ms["ordo"] - ms["engine"] - ms["adapter"] - ms["sdk"] - ms["transport"]
    rows = [
        ("floor: bare aiohttp + json loop", ms["floor"]),
        ("ordo on the SDK", ms["ordo"]),
        ("  engine (run_agent, no provider)", ms["engine"]),
        ("  provider adapter alone (body, retries, answer parsing)", ms["adapter"]),
        ("  SDK post + httpx2 client, no I/O", ms["sdk"]),
        ("  ordo's transport + I/O", ms["transport"]),
        ("  rest: the parts together vs alone", rest),
        ("bare aiohttp, the same 5 requests (I/O floor)", ms["aiohttp"]),
        ("engine + adapter + SDK, no I/O", ms["no-io"]),
        ("  the same, a bare aiohttp request between calls (its CPU left out)", ms["no-io+io"]),
        ("  that bare aiohttp request, between the calls", ms["io-between"]),
    ]
    lines = ["| part | CPU ms per model call | vs floor |", "|---|---:|---:|"]
    lines += [f"| {name} | {value:.3f} | {value / floor:.2f}x |" for name, value in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=100, help="runs per part per round")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    with ServerProcess() as server:
        ms = asyncio.run(measure(server.url + "/v1", args.runs, args.rounds))
    print(report(ms))


if __name__ == "__main__":
    main()
