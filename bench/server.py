"""The benchmark model server: an OpenAI-compatible Chat Completions endpoint built to be cheap.

It runs in its own process (one core of its own on a 2-core machine) so it never competes with
the client being measured, and it does as little as an HTTP/1.1 server can: a bare asyncio
protocol, keep-alive, TCP_NODELAY, one write per response, no request log. Every loop that is
compared talks to the same server, so whatever it costs is the same for all of them; run.py
measures that cost (`measure_round_trip`) and reports it next to the results.

The script is stateless and decided by the request alone, so any number of concurrent
conversations follow it:

* the model name says the latency and the number of tool steps: `bench-l50-s4` waits 50 ms
  before answering and asks for a tool in each of the first 4 model calls, then answers with
  text (`bench` alone: 0 ms, 4 tool steps);
* call k (k = the number of assistant messages already in the history) asks for the tool
  `TOOL_NAMES[k % 3]` with arguments `{"q": "query k"}`;
* every response reports `usage` (prompt tokens estimated from the body size).

`POST /tool/<name>` answers a tool call for ordo's `http` Tools (operator benchmark);
`GET /stats` returns the request count and the server's own CPU seconds; `POST /stats/reset`
zeroes them.

    python -m bench.server [--port 0]     # prints "listening on http://127.0.0.1:PORT"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOOL_NAMES = ("lookup", "convert", "summarize")
TOOL_DESCRIPTION = "Look something up and return a short text."
TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"q": {"type": "string", "description": "what to look up"}},
    "required": ["q"],
    "additionalProperties": False,
}
SYSTEM_PROMPT = "You are a benchmark agent. Use the tools you are given, then answer."
USER_MESSAGE = "Run the benchmark script."
FINAL_TEXT = "Done: the benchmark script is complete."

_MODEL = re.compile(r"^bench(?:-l(?P<latency>\d+))?(?:-s(?P<steps>\d+))?$")
_REPO = Path(__file__).resolve().parents[1]


def model_name(latency_ms: float = 0, tool_steps: int = 4) -> str:
    return f"bench-l{round(latency_ms)}-s{tool_steps}"


def parse_model(name: str) -> tuple[float, int]:
    """(latency in seconds, tool steps) of a model name; unknown names: (0, 4)."""
    match = _MODEL.match(name or "")
    if not match:
        return 0.0, 4
    latency = int(match["latency"] or 0) / 1000
    steps = int(match["steps"]) if match["steps"] is not None else 4
    return latency, steps


def tool_result(name: str, arguments: dict[str, Any]) -> str:
    """What every benchmark tool returns (the same text for every framework)."""
    return f"{name}: result for {arguments.get('q', '')}"


def completion(body: dict[str, Any], raw_size: int, counter: int) -> dict[str, Any]:
    """The scripted answer to one Chat Completions request."""
    model = str(body.get("model") or "bench")
    _, tool_steps = parse_model(model)
    messages = body.get("messages") or []
    step = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    message: dict[str, Any]
    if step < tool_steps:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{counter}_{step}",
                    "type": "function",
                    "function": {
                        "name": TOOL_NAMES[step % len(TOOL_NAMES)],
                        "arguments": json.dumps({"q": f"query {step}"}),
                    },
                }
            ],
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": FINAL_TEXT}
        finish = "stop"
    prompt_tokens = max(1, raw_size // 4)
    return {
        "id": f"chatcmpl-{counter}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 12,
            "total_tokens": prompt_tokens + 12,
        },
    }


@dataclass
class Stats:
    requests: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    started: float = 0.0

    def reset(self) -> None:
        self.requests = self.model_calls = self.tool_calls = 0
        self.started = time.process_time()

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "cpu_seconds": time.process_time() - self.started,
        }


STATS = Stats()


def _response(status: int, payload: bytes, content_type: str = "application/json") -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(payload)}\r\nconnection: keep-alive\r\n\r\n"
    )
    return head.encode("latin-1") + payload


class _Connection(asyncio.Protocol):
    """One keep-alive connection; requests are answered in order."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.queue: asyncio.Queue[tuple[str, str, bytes] | None] = asyncio.Queue()
        self.worker: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.worker = asyncio.get_running_loop().create_task(self._serve())

    def connection_lost(self, exc: Exception | None) -> None:
        self.queue.put_nowait(None)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).decode("latin-1")
            lines = head.split("\r\n")
            method, target, _ = ([*lines[0].split(" ", 2), "", ""])[:3]
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            start = end + 4
            if headers.get("transfer-encoding", "").lower() == "chunked":
                body, consumed = _dechunk(self.buffer, start)
                if body is None:
                    return
                del self.buffer[:consumed]
            else:
                length = int(headers.get("content-length") or 0)
                if len(self.buffer) < start + length:
                    return
                body = bytes(self.buffer[start : start + length])
                del self.buffer[: start + length]
            self.queue.put_nowait((method, target, body))

    async def _serve(self) -> None:
        while True:
            request = await self.queue.get()
            if request is None or self.transport is None or self.transport.is_closing():
                return
            method, target, body = request
            try:
                data = await _handle(method, target, body)
            except Exception as exc:  # a malformed request: say so, keep serving
                data = _response(400, json.dumps({"error": {"message": repr(exc)}}).encode())
            if not self.transport.is_closing():
                self.transport.write(data)


def _dechunk(buffer: bytearray, start: int) -> tuple[bytes | None, int]:
    out = bytearray()
    pos = start
    while True:
        line_end = buffer.find(b"\r\n", pos)
        if line_end < 0:
            return None, 0
        size = int(bytes(buffer[pos:line_end]).split(b";")[0], 16)
        pos = line_end + 2
        if size == 0:
            trailer_end = buffer.find(b"\r\n", pos)
            if trailer_end < 0:
                return None, 0
            return bytes(out), trailer_end + 2
        if len(buffer) < pos + size + 2:
            return None, 0
        out += buffer[pos : pos + size]
        pos += size + 2


async def _handle(method: str, target: str, body: bytes) -> bytes:
    STATS.requests += 1
    path = target.split("?", 1)[0].rstrip("/")
    if method == "POST" and path.endswith("/chat/completions"):
        STATS.model_calls += 1
        counter = STATS.model_calls
        request = json.loads(body)
        latency, _ = parse_model(str(request.get("model") or ""))
        payload = json.dumps(completion(request, len(body), counter)).encode()
        if latency > 0:
            await asyncio.sleep(latency)
        return _response(200, payload)
    if path.startswith("/tool/"):
        STATS.tool_calls += 1
        name = path.removeprefix("/tool/")
        arguments = json.loads(body) if body else {}
        text = tool_result(name, arguments if isinstance(arguments, dict) else {})
        return _response(200, text.encode(), "text/plain; charset=utf-8")
    if path == "/stats":
        if method == "POST":
            STATS.reset()
        return _response(200, json.dumps(STATS.to_dict()).encode())
    if path == "/healthz":
        return _response(200, b"ok", "text/plain")
    return _response(404, b'{"error": {"message": "not found"}}')


async def serve(port: int = 0, ready: Any = None) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Connection, "127.0.0.1", port, backlog=4096)
    STATS.reset()
    bound = server.sockets[0].getsockname()[1]
    print(f"listening on http://127.0.0.1:{bound}", flush=True)
    if ready is not None:
        ready(bound)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


class ServerProcess:
    """`python -m bench.server` in a subprocess (a core of its own); a context manager."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ServerProcess:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.server", "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=_REPO,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.stop()
            raise RuntimeError(f"bench server did not start: {line!r}")
        self.url = line.split(" ", 2)[2].strip()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def stats(self, reset: bool = False) -> dict[str, Any]:
        import urllib.request

        request = urllib.request.Request(self.url + "/stats", method="POST" if reset else "GET")
        with urllib.request.urlopen(request, timeout=10) as response:
            result: dict[str, Any] = json.loads(response.read())
        return result


def measure_round_trip(url: str, requests: int = 2000, latency_ms: float = 0) -> dict[str, float]:
    """The server's share of every model call: a raw-socket client on one keep-alive
    connection sends a realistic 3-tool request `requests` times. Returns the median round
    trip (µs) and the server's CPU per request (µs)."""
    import statistics

    host, port = url.removeprefix("http://").split(":")
    body = json.dumps(
        {
            "model": model_name(latency_ms),
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": USER_MESSAGE},
            ],
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": n,
                        "description": TOOL_DESCRIPTION,
                        "parameters": TOOL_PARAMETERS,
                    },
                }
                for n in TOOL_NAMES
            ],
        }
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}:{port}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    request = head + body
    times = []
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = sock.makefile("rb")
        before = _server_cpu(url)
        for _ in range(requests):
            t0 = time.perf_counter()
            sock.sendall(request)
            length = 0
            while True:
                line = reader.readline()
                if line in (b"\r\n", b""):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            reader.read(length)
            times.append(time.perf_counter() - t0)
        after = _server_cpu(url)
    return {
        "round_trip_us": statistics.median(times) * 1e6,
        "server_cpu_us": (after - before) / requests * 1e6,
    }


def _server_cpu(url: str) -> float:
    import urllib.request

    with urllib.request.urlopen(url + "/stats", timeout=10) as response:
        return float(json.loads(response.read())["cpu_seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port))


if __name__ == "__main__":
    main()
