"""Scripted model servers on 127.0.0.1 that speak a provider's real wire protocol.

A server answers each model call with the next *step* of its script and records every request
(method, path, query, headers, JSON body, arrival time), so tests assert on exactly what went
over the wire and on how many requests a fault case cost.

Steps are plain dicts (JSON/YAML in a script file), the same for every protocol:

    {"text": "the answer"}                          final answer
    {"tool_calls": [{"name": "web-search", "arguments": {"q": "x"}, "id": "call_1"}]}
    {"tool_calls": [{"name": "f", "raw_arguments": "{not json"}]}   malformed arguments
    {"json": {"answer": 42}}                        structured answer (Anthropic: the forced tool)
    {"status": 429, "headers": {"Retry-After": "1"}, "error": {"type": "rate_limit_error"}}
    {"reset": true}                                 abort the connection (TCP RST), no answer
    {"delay": 2.5, "text": "late"}                  wait, then do the rest of the step
    {"body": "not json", "status": 200}             a raw response body
    {"usage": {"input_tokens": 10, "output_tokens": 3}}  reported usage (else estimated)
    {"auto": true}                                  like the mock provider: call each offered
                                                    tool once, then answer (JSON if asked)

A script is a list (one queue for every request), or a dict from a marker to a list: a request
takes its steps from the first marker found in its user messages ("*" matches any), so
concurrent conversations can follow their own scripts. When a queue is used up the `fallback`
step answers: by default `auto` for a server started without a script, else HTTP 400 with
error type `script_exhausted` (a non-retryable error, so a test with too short a script fails
fast and visibly).

Run in-process with `server.start()` (a background thread; `server.url`, `server.requests`,
`server.count`), or as a process with `python -m tests.support.openai_server --port 0 --script
FILE`, which prints `listening on http://127.0.0.1:PORT` and serves its records at
`GET /_scripted/requests` (see `RemoteScriptedServer` and `start_process`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx
from aiohttp import web

from .threaded_server import Cleanup, ServerThread

Step = dict[str, Any]
Script = list[Step] | dict[str, list[Step]]
CONTROL = "/_scripted"
EXHAUSTED: Step = {
    "status": 400,
    "error": {"type": "script_exhausted", "message": "the test script has no more steps"},
}


class Headers(dict[str, str]):
    """Header names lower-cased; lookups ignore case (`headers["Authorization"]`)."""

    def __init__(self, items: Any = ()) -> None:
        pairs = items.items() if isinstance(items, Mapping) else items
        super().__init__((str(k).lower(), v) for k, v in pairs)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(key.lower(), default)


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: Headers
    """Lower-cased header names; lookups ignore case."""
    body: Any
    """The JSON body, or the text when it is not JSON."""
    time: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sample(schema: Mapping[str, Any]) -> Any:
    """A small value that satisfies common JSON Schemas (as the mock provider makes)."""
    from ordo.providers.mock import sample as mock_sample

    return mock_sample(dict(schema))


def estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


def load_script(path: str | Path) -> Script:
    text = Path(path).read_text()
    if str(path).endswith((".yaml", ".yml")):
        import yaml

        data = yaml.safe_load(text)
    else:
        data = json.loads(text)
    if isinstance(data, dict) and "steps" in data and isinstance(data["steps"], list):
        data = data["steps"]
    if not isinstance(data, list | dict):
        raise ValueError(f"{path}: a script is a list of steps or a map of marker to steps")
    return data


@dataclass
class _Queues:
    script: Script | None
    fallback: Step
    used: dict[str, int] = field(default_factory=dict)

    def next_step(self, user_text: str) -> Step:
        if self.script is None:
            return self.fallback
        if isinstance(self.script, list):
            key, steps = "", self.script
        else:
            key = next((m for m in self.script if m != "*" and m in user_text), "*")
            steps = self.script.get(key, [])
        index = self.used.get(key, 0)
        if index >= len(steps):
            return self.fallback
        self.used[key] = index + 1
        return steps[index]


class ScriptedServer:
    """Base of the protocol servers: scripting, recording, threads and processes.

    Subclasses say which paths are model calls and render steps in their wire format."""

    name = "scripted"

    def __init__(
        self,
        script: Script | None = None,
        *,
        fallback: Step | None = None,
        require_key: str | None = None,
        port: int = 0,
    ) -> None:
        self._lock = threading.Lock()
        self._records: list[RecordedRequest] = []
        self._queues = _Queues(
            script, fallback or ({"auto": True} if script is None else EXHAUSTED)
        )
        self.require_key = require_key
        self.port = port
        self._thread = ServerThread(f"{self.name}-server")
        self._serial = 0

    # -- protocol hooks -------------------------------------------------------------------

    def is_model_call(self, request: web.Request) -> bool:
        raise NotImplementedError

    def presented_key(self, request: web.Request) -> str | None:
        raise NotImplementedError

    def user_text(self, body: Any) -> str:
        raise NotImplementedError

    def render(self, step: Step, body: Any) -> web.Response:
        raise NotImplementedError

    def error_response(
        self, status: int, error: Mapping[str, Any], headers: Mapping[str, str]
    ) -> web.Response:
        raise NotImplementedError

    # -- records and script ---------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Model calls received so far (control requests excluded)."""
        with self._lock:
            return list(self._records)

    @property
    def count(self) -> int:
        with self._lock:
            return len(self._records)

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    def set_script(self, script: Script | None, fallback: Step | None = None) -> None:
        with self._lock:
            self._queues = _Queues(
                script, fallback or ({"auto": True} if script is None else EXHAUSTED)
            )

    def reset(self) -> None:
        with self._lock:
            self._records.clear()

    def next_id(self, prefix: str) -> str:
        with self._lock:
            self._serial += 1
            return f"{prefix}{self._serial:04d}"

    # -- HTTP -----------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_get(CONTROL + "/requests", self._control_requests)
        app.router.add_get(CONTROL + "/count", self._control_count)
        app.router.add_post(CONTROL + "/script", self._control_script)
        app.router.add_post(CONTROL + "/reset", self._control_reset)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        if not self.is_model_call(request):
            return web.json_response(
                {"error": {"type": "not_found", "message": "no such path"}}, status=404
            )
        with self._lock:
            self._records.append(
                RecordedRequest(
                    request.method,
                    request.path,
                    dict(request.query),
                    Headers(request.headers.items()),
                    body,
                    time.time(),
                )
            )
            step = self._queues.next_step(self.user_text(body) if isinstance(body, dict) else "")
        if self.require_key is not None:
            presented = self.presented_key(request)
            if presented != self.require_key:
                # Like real providers, echo (part of) the presented key: clients must not log it.
                return self.error_response(
                    401,
                    {
                        "type": "authentication_error",
                        "code": "invalid_api_key",
                        "message": f"Incorrect API key provided: {presented}",
                    },
                    {},
                )
        if step.get("delay"):
            await asyncio.sleep(float(step["delay"]))
        if step.get("reset"):
            _abort(request)
            return web.Response(status=204)
        if "body" in step:
            return web.Response(
                status=int(step.get("status", 200)),
                text=str(step["body"]),
                content_type=step.get("content_type", "application/json"),
                headers=step.get("headers"),
            )
        if "status" in step and int(step["status"]) >= 300:
            return self.error_response(
                int(step["status"]), step.get("error") or {}, step.get("headers") or {}
            )
        return self.render(step, body if isinstance(body, dict) else {})

    async def _control_requests(self, request: web.Request) -> web.Response:
        return web.json_response([r.to_dict() for r in self.requests])

    async def _control_count(self, request: web.Request) -> web.Response:
        return web.json_response({"count": self.count})

    async def _control_script(self, request: web.Request) -> web.Response:
        data = await request.json()
        self.set_script(data.get("script"), data.get("fallback"))
        return web.json_response({"ok": True})

    async def _control_reset(self, request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self) -> web.AppRunner:
        """Start serving on the current event loop; returns the runner (cleanup() stops)."""
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return runner

    def start(self) -> Self:
        """Serve from a background thread (returns once the port is bound)."""

        async def setup() -> tuple[int, Cleanup]:
            runner = await self.serve()
            return self.port, runner.cleanup

        self._thread.start(setup)
        return self

    def stop(self) -> None:
        self._thread.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- process mode ---------------------------------------------------------------------

    @classmethod
    def main(cls, argv: list[str] | None = None) -> None:
        parser = argparse.ArgumentParser(description=f"Scripted {cls.name} model server")
        parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
        parser.add_argument("--script", help="JSON or YAML file: a list of steps or a map")
        parser.add_argument("--fallback", choices=["auto", "error"], default=None)
        parser.add_argument("--require-key", default=None, help="answer 401 to any other key")
        args = parser.parse_args(argv)
        script = load_script(args.script) if args.script else None
        fallback = (
            {"auto": True} if args.fallback == "auto" else EXHAUSTED if args.fallback else None
        )
        server = cls(script, fallback=fallback, require_key=args.require_key, port=args.port)

        async def run() -> None:
            runner = await server.serve()
            print(f"listening on {server.url}", flush=True)
            try:
                await asyncio.Event().wait()
            finally:
                await runner.cleanup()

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run())


def _abort(request: web.Request) -> None:
    """Close the connection with a TCP RST (SO_LINGER 0): the client sees a connection reset."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def message_text(content: Any) -> str:
    """Text of a message `content` (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


class RemoteScriptedServer:
    """Records and script of a scripted server running in another process."""

    def __init__(self, url: str, process: subprocess.Popen[str] | None = None) -> None:
        self.url = url.rstrip("/")
        self.process = process

    def requests(self) -> list[dict[str, Any]]:
        response = httpx.get(self.url + CONTROL + "/requests", timeout=10)
        response.raise_for_status()
        data: list[dict[str, Any]] = response.json()
        return data

    def count(self) -> int:
        response = httpx.get(self.url + CONTROL + "/count", timeout=10)
        response.raise_for_status()
        return int(response.json()["count"])

    def set_script(self, script: Script | None, fallback: Step | None = None) -> None:
        httpx.post(
            self.url + CONTROL + "/script",
            json={"script": script, "fallback": fallback},
            timeout=10,
        ).raise_for_status()

    def reset(self) -> None:
        httpx.post(self.url + CONTROL + "/reset", timeout=10).raise_for_status()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def __enter__(self) -> RemoteScriptedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_process(
    module: str,
    *,
    script: Script | str | Path | None = None,
    port: int = 0,
    fallback: str | None = None,
    require_key: str | None = None,
    cwd: str | Path | None = None,
    python: str = sys.executable,
) -> RemoteScriptedServer:
    """Start `python -m MODULE` (e.g. `tests.support.openai_server`) and wait for its port.

    `script` may be a path or an inline script (written to a temporary file)."""
    repo = Path(__file__).resolve().parents[2]
    args = [python, "-m", module, "--port", str(port)]
    if script is not None:
        if not isinstance(script, str | Path):
            import tempfile

            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
                json.dump(script, handle)
            script = handle.name
        args += ["--script", str(script)]
    if fallback:
        args += ["--fallback", fallback]
    if require_key:
        args += ["--require-key", require_key]
    process = subprocess.Popen(
        args, cwd=str(cwd or repo), stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("listening on "):
        process.kill()
        raise RuntimeError(f"{module} did not start (said {line!r})")
    return RemoteScriptedServer(line.removeprefix("listening on "), process)
