"""The first hour of a platform engineer: errors that name the object and say what to do,
a failed tool call's cause in the audit trail, text logs with their context, ports in use,
Ctrl-C under `ordo run`, bounded metric labels. Real sockets and servers, no mocks of
clients; canary strings where a secret could leak."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from prometheus_client import generate_latest

from ordo.api import ModelEndpoint, Tool, manifests
from ordo.cli.local import ManifestStore, run_tasks
from ordo.cli.main import main
from ordo.credentials import NOWHERE
from ordo.engine.output import InvalidOutput
from ordo.engine.output import parse as parse_output
from ordo.engine.state import RunResult, RunState, ToolCallRecord
from ordo.engine.tooling import ResolvedTool, ToolFailure
from ordo.errors import MemoryBackendError
from ordo.operator.tasks.writer import UNKNOWN_AGENT, agent_label
from ordo.operator.telemetry import logs
from ordo.operator.telemetry.health import HealthServer, PortInUse
from ordo.operator.telemetry.metrics import Metrics
from ordo.providers.errors import endpoint_label
from ordo.runtime import TaskOutcome, fetch
from ordo.tools.mcp import McpToolExecutor

CANARY = "CANARY-7f3a9c"


@contextmanager
def dead_port() -> Iterator[int]:
    """A loopback port nobody listens on (bound, never listened: connections are refused)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def _write(folder: Path, text: str) -> Path:
    path = folder / "all.yaml"
    path.write_text(textwrap.dedent(text))
    return path


# -- Secrets -------------------------------------------------------------------------------

SECRET_ENDPOINT = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: keyed}
spec:
  provider: mock
  credentials: {secretRef: {name: model-key, key: api-key}}
  mock:
    turns: [{text: hello}]
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: a}
spec: {modelRef: keyed}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {name: t}
spec: {agentRef: a, input: hi}
"""


async def test_missing_secret_says_so_and_names_the_environment_variable(tmp_path: Path) -> None:
    mset = manifests.load([str(_write(tmp_path, SECRET_ENDPOINT))])
    store = ManifestStore(mset, environ={})
    with pytest.raises(Exception) as caught:
        await fetch.credential(
            store, "default", "model-key", "api-key", "ModelEndpoint 'keyed'", NOWHERE
        )
    message = str(caught.value)
    assert "Secret 'model-key' (key 'api-key') for ModelEndpoint 'keyed' does not exist" in message
    assert "ORDO_SECRET_MODEL_KEY_API_KEY" in message
    # Through `ordo run`, the Task's message carries the same.
    [(_, outcome)] = await run_tasks(mset, environ={})
    assert outcome.reason == "SecretNotFound"
    assert "ORDO_SECRET_MODEL_KEY_API_KEY" in outcome.message


async def test_missing_key_lists_the_keys_that_exist_never_their_values(tmp_path: Path) -> None:
    secret = f"""
    ---
    apiVersion: v1
    kind: Secret
    metadata: {{name: model-key, labels: {{ordo.dev/credential: "true"}}}}
    stringData: {{api_key: {CANARY}, token: {CANARY}-2}}
    """
    mset = manifests.load([str(_write(tmp_path, SECRET_ENDPOINT + textwrap.dedent(secret)))])
    [(_, outcome)] = await run_tasks(mset, environ={})
    assert outcome.reason == "SecretNotFound"
    assert "has no key 'api-key' (its keys: api_key, token)" in outcome.message
    assert CANARY not in outcome.message
    assert "ORDO_SECRET_MODEL_KEY_API_KEY" in outcome.message


# -- Errors that name the object and the host ---------------------------------------------


def _mcp_tool(url: str) -> Tool:
    return Tool.model_validate(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Tool",
            "metadata": {"name": "wiki"},
            "spec": {"type": "mcp", "mcp": {"url": url}, "timeout": "5s"},
        }
    )


async def test_mcp_listing_failure_names_the_tool_and_the_host() -> None:
    with dead_port() as port:
        url = f"http://user:{CANARY}@127.0.0.1:{port}/mcp?token={CANARY}"
        executor = McpToolExecutor(ResolvedTool(_mcp_tool(url), "wiki", secret=CANARY))
        with pytest.raises(ToolFailure) as caught:
            await executor.describe()
    message = str(caught.value)
    assert f"Tool 'wiki' (MCP server 127.0.0.1:{port})" in message
    assert "listing the MCP server's tools failed (ConnectError)" in message
    assert CANARY not in message


async def test_redis_memory_connect_error_names_memory_and_host_never_password() -> None:
    from ordo.memory.redis import RedisBackend

    with dead_port() as port:
        url = f"redis://:{CANARY}@127.0.0.1:{port}/0"
        with pytest.raises(MemoryBackendError) as caught:
            await RedisBackend.connect(url, CANARY, "p", owner="Memory 'notes'")
    message = str(caught.value)
    assert message.startswith("Memory 'notes': cannot connect to the redis memory backend")
    assert f"at 127.0.0.1:{port}" in message
    assert CANARY not in message


async def test_postgres_memory_connect_error_names_memory_and_host_never_password() -> None:
    from ordo.memory.postgres import PostgresBackend

    with dead_port() as port:
        url = f"postgresql://ordo:{CANARY}@127.0.0.1:{port}/ordo"
        with pytest.raises(MemoryBackendError) as caught:
            await PostgresBackend.connect(url, CANARY, "p", owner="Memory 'notes'")
    message = str(caught.value)
    assert message.startswith("Memory 'notes': cannot connect to the postgres memory backend")
    assert f"at 127.0.0.1:{port}" in message
    assert CANARY not in message


def _endpoint(spec: dict[str, Any]) -> ModelEndpoint:
    return ModelEndpoint.model_validate(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "ModelEndpoint",
            "metadata": {"name": "local", "namespace": "team"},
            "spec": spec,
        }
    )


def test_endpoint_label_names_the_host_never_the_url() -> None:
    url = f"http://u:{CANARY}@10.0.0.7:11434/v1?key={CANARY}"
    label = endpoint_label(_endpoint({"provider": "ollama", "model": "m", "baseUrl": url}))
    assert label == "ModelEndpoint team/local (ollama, host 10.0.0.7:11434)"
    default = endpoint_label(_endpoint({"provider": "ollama", "model": "m"}))
    assert default == "ModelEndpoint team/local (ollama, host localhost:11434)"


OLLAMA_DEAD = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: local-llm}}
spec:
  provider: ollama
  model: llama3
  baseUrl: http://127.0.0.1:{port}/v1
  retry: {{maxAttempts: 1}}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: a}}
spec: {{modelRef: local-llm}}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: t}}
spec: {{agentRef: a, input: hi}}
"""


async def test_ollama_connection_error_names_the_endpoint_and_host(tmp_path: Path) -> None:
    with dead_port() as port:
        mset = manifests.load([str(_write(tmp_path, OLLAMA_DEAD.format(port=port)))])
        [(_, outcome)] = await run_tasks(mset, environ={})
    assert outcome.reason == "ModelUnavailable", outcome.message
    assert f"ModelEndpoint default/local-llm (ollama, host 127.0.0.1:{port})" in outcome.message
    assert "connection error" in outcome.message


def test_invalid_output_names_the_one_missing_field() -> None:
    schema = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "severity": {"type": "string"}},
        "required": ["title", "severity"],
    }
    with pytest.raises(InvalidOutput) as caught:
        parse_output('{"title": "disk full"}', schema)
    message = str(caught.value)
    assert message == (
        "the answer does not match the output schema at $: missing required field 'severity'"
    )
    with pytest.raises(InvalidOutput) as caught:
        parse_output("{}", schema)
    assert str(caught.value) == (
        "the answer does not match the output schema at $: missing required field 'title' "
        "(and 1 more)"
    )


# -- A failed tool call's cause in the audit trail ----------------------------------------

HTTP_TOOL_RUN = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: m}}
spec:
  provider: mock
  mock:
    turns:
      - toolCalls: [{{tool: lookup, arguments: {{q: "{canary}"}}}}]
      - text: done
---
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {{name: lookup}}
spec:
  type: http
  description: Look something up.
  http: {{url: "{url}", method: POST}}
  timeout: 5s
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: a}}
spec: {{modelRef: m, tools: [lookup]}}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: t}}
spec: {{agentRef: a, input: hi}}
"""


@asynccontextmanager
async def answering(status: int) -> AsyncIterator[str]:
    async def handle(_: web.Request) -> web.Response:
        return web.Response(status=status, text=f"upstream said {CANARY}")

    app = web.Application()
    app.router.add_post("/lookup", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/lookup"
    finally:
        await runner.cleanup()


async def _tool_record(tmp_path: Path, url: str) -> dict[str, Any]:
    text = HTTP_TOOL_RUN.format(url=url, canary=CANARY)
    mset = manifests.load([str(_write(tmp_path, text))])
    [(_, outcome)] = await run_tasks(mset, environ={})
    status = outcome.status().to_dict()
    assert CANARY not in yaml.safe_dump(status)
    [record] = status["toolCalls"]
    return dict(record)


async def test_failed_tool_call_records_http_status(tmp_path: Path) -> None:
    async with answering(503) as url:
        record = await _tool_record(tmp_path, url)
    assert record["outcome"] == "error"
    assert record["error"] == "HTTPStatus 503"


async def test_failed_tool_call_records_connect_error(tmp_path: Path) -> None:
    with dead_port() as port:
        record = await _tool_record(tmp_path, f"http://127.0.0.1:{port}/lookup")
    assert (record["outcome"], record["error"]) == ("error", "ConnectError")


async def test_successful_tool_call_has_no_error(tmp_path: Path) -> None:
    async with answering(200) as url:
        record = await _tool_record(tmp_path, url)
    assert record["outcome"] == "succeeded"
    assert "error" not in record


def test_tool_call_record_round_trips_its_error() -> None:
    record = ToolCallRecord(2, "lookup", "allowed", "Allowed", "error", "c1", "Timeout")
    assert ToolCallRecord.from_dict(record.to_dict()) == record
    assert record.to_dict()["error"] == "Timeout"


# -- Operator: logs, ports, metrics --------------------------------------------------------


def test_text_logs_carry_the_context_fields() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.TextFormatter())
    logger = logging.getLogger("ordo.test.first-hour")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)

    async def one_run() -> None:
        logs.bind(namespace="team-a", task="triage-1", executionId="e-42", step=3)
        logger.info("tool failed", extra={"ordo": {"tool": "lookup", "cause": "HTTPStatus 503"}})

    asyncio.run(one_run())
    line = stream.getvalue().strip()
    assert line.endswith(
        "tool failed namespace=team-a task=triage-1 executionId=e-42 step=3 tool=lookup "
        'cause="HTTPStatus 503"'
    ), line


async def test_health_port_in_use_names_the_flag() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        server = HealthServer(None, Metrics(), port, None, host="127.0.0.1")  # type: ignore[arg-type]
        with pytest.raises(PortInUse) as caught:
            await server.start()
        assert str(caught.value).startswith(f"--health-port {port} is in use")
        server = HealthServer(None, Metrics(), None, port, host="127.0.0.1")  # type: ignore[arg-type]
        with pytest.raises(PortInUse) as caught:
            await server.start()
        assert str(caught.value).startswith(f"--metrics-port {port} is in use")
    finally:
        taken.close()


def test_no_created_series() -> None:
    metrics = Metrics()
    metrics.tasks.labels("ns", "a", "Succeeded", "Succeeded").inc()
    text = generate_latest(metrics.registry).decode()
    assert "ordo_tasks_total{" in text
    assert "_created" not in text


def test_agent_label_is_bounded_to_agents_that_exist() -> None:
    missing = TaskOutcome("Failed", "AgentNotFound", "Agent 'x' does not exist")
    assert agent_label("made-up-" + CANARY, missing) == UNKNOWN_AGENT
    cancelled = TaskOutcome("Cancelled", "Cancelled", "cancelled")
    assert agent_label("made-up", cancelled) == UNKNOWN_AGENT
    endpoint_missing = TaskOutcome("Failed", "ModelEndpointNotFound", "...")
    assert agent_label("real-agent", endpoint_missing) == "real-agent"
    # A Team Task: `team/<name>` once its Team was read (its run has a result), else unknown.
    no_team = TaskOutcome("Failed", "TeamNotFound", "Team 'x' does not exist")
    assert agent_label("", no_team, "made-up") == UNKNOWN_AGENT
    ran = TaskOutcome(
        "Failed", "ChildFailed", "...", RunResult("Failed", "ChildFailed", "", "", None, RunState())
    )
    assert agent_label("", ran, "crew") == "team/crew"


# -- ordo run: Ctrl-C ----------------------------------------------------------------------

SLOW_AND_FAST = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: m}}
spec:
  provider: mock
  mock:
    turns:
      - toolCalls: [{{tool: slow, arguments: {{}}}}]
      - text: done
---
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: quick}}
spec:
  provider: mock
  mock:
    turns: [{{text: quick answer}}]
---
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {{name: slow}}
spec:
  type: http
  http: {{url: "http://127.0.0.1:{port}/", method: POST}}
  timeout: 120s
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: slow-agent}}
spec: {{modelRef: m, tools: [slow]}}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: quick-agent}}
spec: {{modelRef: quick}}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: waits-on-tool}}
spec: {{agentRef: slow-agent, input: hi}}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: answers-at-once}}
spec: {{agentRef: quick-agent, input: hi}}
"""


# The live view on a pipe, as a terminal would show it (rich reads these), one row a line.
LIVE_VIEW_ON_A_PIPE = {
    "TTY_COMPATIBLE": "1",
    "TTY_INTERACTIVE": "1",
    "TERM": "xterm",
    "COLUMNS": "200",
    "NO_COLOR": "1",
    "PYTHONIOENCODING": "utf-8",
}
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
QUICK_TASK_SUCCEEDED = re.compile(r"│ answers-at-once +│[^│]*│ Succeeded +│")


def test_ctrl_c_names_the_running_tasks_and_exits_130(tmp_path: Path) -> None:
    """Ctrl-C is pressed once the slow Task is inside its tool call AND the live view shows
    the quick Task Succeeded: both are explicit signals, so the verdict does not depend on
    which Task the event loop happened to start first (under load the slow Task reached its
    tool before the quick one had started, and was rightly reported still running)."""
    hanging = socket.socket()  # accepts the tool's connection and never answers
    hanging.bind(("127.0.0.1", 0))
    hanging.listen()
    hanging.settimeout(60)
    port = hanging.getsockname()[1]
    path = _write(tmp_path, SLOW_AND_FAST.format(port=port))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ordo.cli.main", "run", "-f", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **LIVE_VIEW_ON_A_PIPE},
        # A terminal's Ctrl-C: SIGINT at its default, whatever this pytest process inherited or
        # set (an ignored SIGINT is inherited across exec, and Python then keeps ignoring it).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    quick_done = threading.Event()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for raw in iter(proc.stderr.readline, b""):
            lines.append(ANSI.sub("", raw.decode("utf-8", "replace")))
            if QUICK_TASK_SUCCEEDED.search(lines[-1]):
                quick_done.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        conn, _ = hanging.accept()  # the slow Task is inside its tool call now
        assert quick_done.wait(60), "".join(lines)  # and the quick one has finished
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        conn.close()
    finally:
        hanging.close()
        if proc.poll() is None:
            proc.kill()
        reader.join(60)
    err = "".join(lines)
    assert proc.returncode == 130, err
    assert "still running: waits-on-tool" in err
    assert "finished: answers-at-once" in err
    assert "Traceback" not in err


def test_run_accepts_several_paths_after_one_f(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    code = main(["run", "-q", "-f", str(examples / "quickstart"), str(examples / "governance")])
    out = capsys.readouterr().out
    names = {d["metadata"]["name"] for d in yaml.safe_load_all(out) if d}
    assert "research-operators" in names and len(names) > 1
    assert code in (0, 1)  # governance examples end ToolDenied on purpose
