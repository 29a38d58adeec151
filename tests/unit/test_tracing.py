"""Traces of Task runs (runtime/tracing.py, runtime/spans.py) through the OpenTelemetry SDK's
own in-memory exporter: the span tree and GenAI attributes of a run with one tool call, the
joined traceparent, status.traceId, errors typed by the Task's reason, no content anywhere,
log lines carrying the ids, and the settings read from the OpenTelemetry environment."""

from __future__ import annotations

import io
import json
import logging
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from tests.support.traced import recorded_spans, traced_set

from ordo.api import Task, manifests
from ordo.cli.local import ManifestStore, run_tasks
from ordo.engine.events import Event
from ordo.operator.telemetry import logs
from ordo.runtime import execute
from ordo.runtime.tracing import TracingConfigError, settings_from_env

CANARY = "canary-7f3e-CONTENT"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"

MOCK_ENDPOINT = f"""
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: model}}
spec:
  provider: mock
  model: mock-1
  mock:
    turns:
      - toolCalls:
          - tool: lookup
            arguments: {{query: "{CANARY}-arguments"}}
      - text: "{CANARY}-answer"
"""
MANIFESTS = traced_set(MOCK_ENDPOINT, canary=CANARY, trace_id=TRACE_ID, parent=PARENT_SPAN)


@pytest.fixture
def exported() -> Iterator[InMemorySpanExporter]:
    with recorded_spans() as exporter:
        yield exporter


async def run(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "set.yaml"
    path.write_text(textwrap.dedent(text))
    [(_, outcome)] = await run_tasks(manifests.load([str(path)]), environ={})
    return outcome


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def everything(spans: tuple[ReadableSpan, ...]) -> str:
    """Every span as the OTLP JSON-ish text an exporter would send (names, attributes, events,
    status, resource)."""
    return "\n".join(span.to_json() for span in spans)


async def test_one_tool_call_is_invoke_agent_over_chat_execute_tool_chat(
    tmp_path: Path, exported: InMemorySpanExporter
) -> None:
    outcome = await run(tmp_path, MANIFESTS)
    assert outcome.phase == "Succeeded", outcome.message
    spans = exported.get_finished_spans()
    names = by_name(spans)
    [root] = names["invoke_agent researcher"]
    children = sorted(
        (s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id),
        key=lambda s: s.start_time or 0,
    )
    assert [s.name for s in children] == ["chat mock-1", "execute_tool lookup", "chat mock-1"]
    assert len(spans) == 4

    # The Task's traceparent: same trace, the annotation's span is the parent.
    assert format(root.context.trace_id, "032x") == TRACE_ID
    assert root.parent is not None and format(root.parent.span_id, "016x") == PARENT_SPAN
    assert outcome.status().trace_id == TRACE_ID

    assert root.kind == SpanKind.INTERNAL
    assert root.attributes is not None
    assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert root.attributes["gen_ai.agent.name"] == "researcher"
    assert root.attributes["gen_ai.provider.name"] == "mock"
    assert root.attributes["gen_ai.request.model"] == "mock-1"
    assert root.attributes["ordo.task.name"] == "traced"
    assert root.attributes["ordo.task.reason"] == "Succeeded"
    assert root.attributes["gen_ai.usage.input_tokens"] == outcome.result.usage.input_tokens
    assert root.status.status_code == StatusCode.UNSET

    first, tool, last = children
    assert first.kind == SpanKind.CLIENT
    assert first.attributes is not None
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.provider.name"] == "mock"
    assert first.attributes["gen_ai.request.model"] == "mock-1"
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first.attributes["gen_ai.usage.output_tokens"] > 0
    assert last.attributes is not None
    assert last.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert tool.kind == SpanKind.INTERNAL
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "lookup"
    [record] = outcome.result.tool_calls
    assert tool.attributes["gen_ai.tool.call.id"] == record.call_id
    assert tool.attributes["ordo.tool.decision"] == "allowed"
    assert tool.attributes["ordo.tool.outcome"] == "succeeded"
    # The tool ran between the two model calls.
    assert first.end_time <= tool.start_time and tool.end_time <= last.start_time  # type: ignore[operator]

    assert CANARY not in everything(spans)


async def test_a_failed_run_is_an_error_typed_by_the_task_reason(
    tmp_path: Path, exported: InMemorySpanExporter
) -> None:
    text = MANIFESTS.replace("agentRef: researcher", "agentRef: nobody")
    outcome = await run(tmp_path, text)
    assert outcome.reason == "AgentNotFound"
    [root] = exported.get_finished_spans()
    assert root.name == "invoke_agent nobody"
    assert root.status.status_code == StatusCode.ERROR
    assert root.status.description == "AgentNotFound"
    assert root.attributes is not None and root.attributes["error.type"] == "AgentNotFound"
    assert CANARY not in everything(exported.get_finished_spans())


async def test_a_denied_tool_call_is_an_error_span_and_never_executes(
    tmp_path: Path, exported: InMemorySpanExporter
) -> None:
    text = MANIFESTS.replace("  tools: [lookup]\n", "  tools: [lookup]\n  roles: [nobody]\n")
    outcome = await run(tmp_path, text)
    assert outcome.reason == "ToolDenied"
    names = by_name(exported.get_finished_spans())
    [tool] = names["execute_tool lookup"]
    assert tool.attributes is not None
    assert tool.attributes["ordo.tool.decision"] == "denied"
    assert tool.attributes["ordo.tool.outcome"] == "skipped"
    assert tool.attributes["error.type"] == "ToolDenied"
    [root] = names["invoke_agent researcher"]
    assert root.attributes is not None and root.attributes["error.type"] == "ToolDenied"
    assert CANARY not in everything(exported.get_finished_spans())


async def test_an_invalid_traceparent_starts_a_new_trace(
    tmp_path: Path, exported: InMemorySpanExporter
) -> None:
    text = MANIFESTS.replace(f"00-{TRACE_ID}-{PARENT_SPAN}-01", f"zz-{CANARY}")
    outcome = await run(tmp_path, text)
    [root] = by_name(exported.get_finished_spans())["invoke_agent researcher"]
    assert root.parent is None
    assert outcome.status().trace_id == format(root.context.trace_id, "032x") != TRACE_ID


async def test_without_export_nothing_is_recorded_but_the_run_has_ids(tmp_path: Path) -> None:
    outcome = await run(tmp_path, MANIFESTS)
    assert outcome.phase == "Succeeded"
    assert outcome.status().trace_id == TRACE_ID  # the Task's trace, for the logs
    text = MANIFESTS.replace(f"00-{TRACE_ID}-{PARENT_SPAN}-01", "none")
    other = await run(tmp_path, text)
    trace_id = other.status().trace_id
    assert trace_id is not None and len(trace_id) == 32 and trace_id != "0" * 32


async def test_log_lines_of_a_run_carry_its_trace_and_span_ids(tmp_path: Path) -> None:
    """During the run (a listener logs each event) and after it, in the same asyncio task
    (the operator's closing lines); the ids are the run span's."""
    path = tmp_path / "set.yaml"
    path.write_text(textwrap.dedent(MANIFESTS))
    mset = manifests.load([str(path)])
    [task] = [obj for _, obj in mset.objects if isinstance(obj, Task)]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("ordo.test")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)

    async def log_event(event: Event) -> None:
        logger.info("event %s", type(event).__name__)

    try:
        outcome = await execute(task, ManifestStore(mset, {}), listeners=[log_event])
        logger.info("after the run, in the same task")
    finally:
        logger.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) > 5
    assert {line.get("traceId") for line in lines} == {TRACE_ID}
    assert len({line.get("spanId") for line in lines}) == 1
    assert len(lines[0]["spanId"]) == 16
    assert outcome.status().trace_id == TRACE_ID


@pytest.mark.parametrize(
    ("environ", "exporter", "endpoint"),
    [
        ({}, "none", None),
        ({"OTEL_SERVICE_NAME": "x"}, "none", None),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"},
            "otlp",
            "http://collector:4318/v1/traces",
        ),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom"},
            "otlp",
            "http://c:4318/custom",
        ),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp", None),
        ({"OTEL_TRACES_EXPORTER": "console"}, "console", None),
        (
            {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
            "none",
            None,
        ),
        (
            {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"},
            "none",
            None,
        ),
    ],
)
def test_settings_from_the_opentelemetry_environment(
    environ: dict[str, str], exporter: str, endpoint: str | None
) -> None:
    settings = settings_from_env(environ, service_name="ordo")
    assert (settings.exporter, settings.endpoint) == (exporter, endpoint)
    assert settings.service_name == environ.get("OTEL_SERVICE_NAME", "ordo")


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "http/protobuf",
        ),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "otlp, console or none"),
        ({"OTEL_TRACES_EXPORTER": "otlp,console"}, "one exporter"),
    ],
)
def test_unsupported_settings_are_refused_clearly(environ: dict[str, str], says: str) -> None:
    with pytest.raises(TracingConfigError, match=says):
        settings_from_env(environ, service_name="ordo")
