"""Model-invented tool names never reach metrics, traces, Events or log lines (issue 23, item 4).

A scripted model calls 66 distinct tool names that no Tool offers, some carrying a base64
canary (kept as is by the name normaliser when its alphabet is safe, or reduced to its safe
characters plus a hash when it is not). The run goes through `execute` (the engine path of
`ordo run` and of the operator) with the operator's own listeners: the Prometheus metrics,
the progress writer that posts Events, the structured log lines, and the span listener (the
OpenTelemetry SDK's in-memory exporter). None of them may carry an invented name or the
canary, and the `tool` label takes only names of offered tools plus one fixed value for
everything else (`NOT_OFFERED_TOOL`). The Task's own `status.toolCalls[].tool` keeps the
normalised name (it is the Task's record of what its model did, like `status.output`).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import generate_latest

from ordo.engine.events import NOT_OFFERED_TOOL
from ordo.engine.model import ModelResponse
from ordo.engine.sanitize import MAX_TOOL_CALLS_PER_RESPONSE
from ordo.operator.tasks.writer import ProgressWriter, TaskWriter, log_events
from ordo.operator.telemetry import logs
from ordo.operator.telemetry.metrics import Metrics
from ordo.runtime import Snapshot, TaskOutcome, execute
from ordo.runtime.execute import Prepared
from support.engine_fakes import (
    DictStore,
    ModelFactory,
    ScriptedModel,
    agent,
    answer,
    call,
    mock_endpoint,
    mock_tool,
    policy,
    task,
    task_body,
    tools_turn,
)
from support.traced import recorded_spans

SECRET = b"db-password=hunter2\xfb\xef\xbe\xff\xfe"
CANARY = base64.b64encode(SECRET).decode()  # ZGItcGFzc3dvcmQ9aHVudGVyMvvvvv/+
URL_CANARY = base64.urlsafe_b64encode(SECRET).decode()  # ...Mvvvvv_-
CORE = CANARY[:24]
"""A distinctive run of safe characters of the canary: what a reader of /metrics could
recover from any name that carried it."""
INVENTED = 66


def invented_names() -> list[str]:
    """66 distinct names no Tool is called: safe-alphabet ones (kept verbatim by the name
    normaliser), standard base64 with `+`/`/`/`=` (mapped to safe characters + hash), long
    ones, and some that look like ordo's own values."""
    names = [f"x{i:02d}_{URL_CANARY}"[:64] for i in range(40)]
    names += [f"{i:02d}+{CANARY}/=" for i in range(16)]
    names += [f"exfil{i}" + CANARY * 4 for i in range(6)]
    names += ["invalid-name", "memory_read", "lookup ", "(empty)"]
    assert len(set(names)) == INVENTED
    return names


class RecordingKube:
    """What TaskWriter and EventRecorder need of the Kubernetes client: Events are kept."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.patches: list[dict[str, Any]] = []

    async def create(self, kind: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        assert kind == "Event"
        self.events.append(body)
        return body

    async def patch(self, kind: str, namespace: str, name: str, body: Any, **kw: Any) -> Any:
        self.patches.append(body)
        return None

    async def patch_status_fenced(self, *args: Any) -> Any:
        self.patches.append(args[-1])
        return None

    async def get(self, kind: str, namespace: str, name: str) -> Any:
        return None


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    with recorded_spans() as exporter:
        yield exporter


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonFormatter())
    root = logging.getLogger()
    saved = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield out
    root.removeHandler(handler)
    root.setLevel(saved)


def script(names: list[str]) -> list[ModelResponse]:
    """Every invented name once (a turn holds at most MAX_TOOL_CALLS_PER_RESPONSE calls), with
    call ids that carry the canary too, one real call of `lookup`, then an answer."""
    per_turn = MAX_TOOL_CALLS_PER_RESPONSE // 2
    turns = [
        tools_turn(*(call(n, f"{URL_CANARY[:30]}_{i}_{j}", q="x") for j, n in enumerate(chunk)))
        for i, chunk in enumerate(names[k : k + per_turn] for k in range(0, len(names), per_turn))
    ]
    return [*turns, tools_turn(call("lookup", "real", q="x")), answer("done")]


async def run_with_operator_listeners(
    body: dict[str, Any], store: DictStore, turns: list[ModelResponse], metrics: Metrics
) -> tuple[TaskOutcome, RecordingKube]:
    kube = RecordingKube()
    writer = TaskWriter(kube, metrics)  # type: ignore[arg-type]

    async def prepare(snapshot: Snapshot) -> Prepared:
        progress = ProgressWriter(writer, body, snapshot, "exec-1")
        run_metrics = metrics.listener(
            "default", "agent", snapshot.endpoint.spec.provider, snapshot.endpoint.spec.model
        )
        return Prepared(listeners=[progress, run_metrics, log_events])

    def make(_: Any) -> ScriptedModel:
        return ScriptedModel(turns)

    outcome = await execute(
        task(body["metadata"]["name"]),
        store,
        prepare=prepare,
        model_factory=ModelFactory(make),
    )
    await writer.finish(body, outcome, execution_id=None)
    return outcome, kube


def leaks(text: str, names: list[str]) -> list[str]:
    found = [n for n in names if n in text and n not in ("memory_read",)]
    if CORE in text:
        found.append(f"canary {CORE}")
    return found


def tool_label_values(exposition: str) -> set[str]:
    return set(re.findall(r'ordo_tool_calls_total\{[^}]*tool="([^"]*)"', exposition))


async def test_invented_tool_names_stay_out_of_metrics_spans_events_and_logs(
    exported: InMemorySpanExporter, log_lines: io.StringIO
) -> None:
    names = invented_names()
    store = DictStore(
        agent(tools=["lookup"]),
        mock_endpoint(),
        mock_tool("lookup", result={"found": 1}),
        policy("lenient", onToolDenied="ReturnError"),
    )
    body = task_body("invented")
    store.put(body)
    metrics = Metrics()
    outcome, kube = await run_with_operator_listeners(body, store, script(names), metrics)
    assert (outcome.phase, outcome.reason) == ("Succeeded", "Succeeded"), outcome.message

    exposition = generate_latest(metrics.registry).decode()
    assert leaks(exposition, names) == []
    assert tool_label_values(exposition) == {"lookup", NOT_OFFERED_TOOL}
    denied = re.search(
        rf'ordo_tool_calls_total\{{decision="denied",outcome="skipped",'
        rf'tool="{re.escape(NOT_OFFERED_TOOL)}"\}} (\S+)',
        exposition,
    )
    assert denied is not None and float(denied.group(1)) >= INVENTED - 2, exposition

    spans = exported.get_finished_spans()
    assert leaks("\n".join(s.to_json() for s in spans), names) == []
    tool_spans = {s.name for s in spans if s.name.startswith("execute_tool")}
    assert tool_spans == {"execute_tool lookup", f"execute_tool {NOT_OFFERED_TOOL}"}

    events = json.dumps(kube.events)
    assert leaks(events, names) == []
    assert any(e["reason"] == "ToolDenied" for e in kube.events)
    assert leaks(log_lines.getvalue(), names) == []

    # The Task's own record keeps what its model asked for, normalised and capped.
    records = outcome.status().to_dict()["toolCalls"]
    assert all(len(r["tool"]) <= 64 for r in records)
    assert any(r["tool"].startswith("x00_") for r in records)


async def test_a_denied_invented_name_ends_the_task_without_naming_it(
    exported: InMemorySpanExporter, log_lines: io.StringIO
) -> None:
    names = [f"steal_{URL_CANARY}"[:64]]
    store = DictStore(agent(tools=["lookup"]), mock_endpoint(), mock_tool("lookup"))
    body = task_body("failing")
    store.put(body)
    metrics = Metrics()
    turns = [tools_turn(call(names[0], "c1", q="x")), answer("never")]
    outcome, kube = await run_with_operator_listeners(body, store, turns, metrics)
    assert (outcome.phase, outcome.reason) == ("Failed", "ToolDenied")
    assert NOT_OFFERED_TOOL in outcome.message and "NotOffered" in outcome.message
    status = outcome.status().to_dict()
    for channel in (
        outcome.message,
        json.dumps(status.get("conditions") or []),
        json.dumps(kube.events),
        json.dumps(kube.patches[-1].get("conditions") if kube.patches else []),
        generate_latest(metrics.registry).decode(),
        "\n".join(s.to_json() for s in exported.get_finished_spans()),
        log_lines.getvalue(),
    ):
        assert leaks(channel, names) == []
    assert status["toolCalls"][0]["tool"] == names[0]  # the Task's own record


def test_the_tool_label_of_a_name_outside_the_alphabet_is_the_fixed_value() -> None:
    """The metrics listener's own bound (defence in depth behind the engine's)."""
    from ordo.operator.telemetry.metrics import _tool_label

    assert _tool_label("web-search") == "web-search"
    assert _tool_label(NOT_OFFERED_TOOL) == NOT_OFFERED_TOOL
    assert _tool_label("drop table;") == NOT_OFFERED_TOOL
    assert _tool_label("x" * 65) == NOT_OFFERED_TOOL
