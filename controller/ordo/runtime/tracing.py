"""OpenTelemetry traces of Task runs, after the GenAI semantic conventions, without content.

`run_span(task)` wraps one `execute()`: an `invoke_agent {agent}` span (`invoke_workflow
{team}` for a Team Task) that joins the trace of
the Task's `ordo.dev/traceparent` annotation when it carries a valid W3C traceparent.
`spans.SpanListener` (a listener over the engine's events; the engine knows nothing of
OpenTelemetry) adds a `chat {model}` child per model call and an `execute_tool {tool}` child
per tool call.

Export is set up once per process by `configure()` from the standard OpenTelemetry
environment (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_TRACES_EXPORTER`, `OTEL_SERVICE_NAME`, ...;
docs/operations.md#traces). Without it spans are not recorded: a run still gets a trace id and
a span id (status.traceId, the `traceId`/`spanId` of its log lines) and no listener is
attached, so tracing costs the two random ids and nothing per event.

ordo uses its own TracerProvider, never the global one, so libraries that carry the
OpenTelemetry API (an SDK's own instrumentation) export nothing through it.

Never recorded: prompts, inputs, tool arguments, tool results, answers. The convention's
opt-in content attributes (`gen_ai.input.messages`, `gen_ai.tool.call.arguments`, ...) are not
offered at all (docs/security.md). Attributes are names, ids, counts, decisions and reasons.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..api import Task
from ..engine.delegation import ChildRequest, ChildState, Delegator
from ..engine.events import Listener

if TYPE_CHECKING:
    from .outcome import TaskOutcome
    from .snapshot import Snapshot
    from .spans import SpanListener

log = logging.getLogger("ordo.tracing")

TRACEPARENT_ANNOTATION = "ordo.dev/traceparent"
"""A Task annotation with a W3C traceparent (`00-<trace id>-<parent span id>-<flags>`): the
run's `invoke_agent` span becomes a child of that span, in that trace."""
INSTRUMENTATION = "ordo"
MAX_TRACEPARENT_CHARS = 128

Exporter = Literal["otlp", "console", "none"]


class TracingConfigError(ValueError):
    """The OpenTelemetry environment asks for something ordo cannot do."""


@dataclass(frozen=True)
class TracingSettings:
    """What `configure` reads from the environment."""

    exporter: Exporter
    service_name: str
    endpoint: str | None = None
    """The OTLP/HTTP traces URL (None: the exporter's default, http://localhost:4318)."""


def settings_from_env(environ: Mapping[str, str], *, service_name: str) -> TracingSettings:
    """Export when `OTEL_TRACES_EXPORTER` says `otlp` (or `console`), or, when it is unset, when
    an OTLP endpoint is given. Unlike the SDK's own default (`otlp` to localhost), nothing is
    exported unless asked for. Only the http/protobuf OTLP protocol is supported."""

    def get(name: str) -> str:
        return (environ.get(name) or "").strip()

    if get("OTEL_SDK_DISABLED").lower() == "true":
        return TracingSettings("none", service_name)
    endpoint = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or None
    if endpoint is None and get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        endpoint = get("OTEL_EXPORTER_OTLP_ENDPOINT").rstrip("/") + "/v1/traces"
    names = [n.strip() for n in get("OTEL_TRACES_EXPORTER").lower().split(",") if n.strip()]
    if not names:
        names = ["otlp"] if endpoint else ["none"]
    if len(names) > 1:
        raise TracingConfigError(f"OTEL_TRACES_EXPORTER: one exporter please, not {names}")
    name = names[0]
    if name not in ("otlp", "console", "none"):
        raise TracingConfigError(
            f"OTEL_TRACES_EXPORTER={name!r} is not supported (otlp, console or none)"
        )
    protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if name == "otlp" and protocol not in ("", "http/protobuf"):
        raise TracingConfigError(
            f"OTLP protocol {protocol!r} is not supported: ordo exports http/protobuf "
            "(port 4318 on a collector)"
        )
    service = get("OTEL_SERVICE_NAME") or service_name
    return TracingSettings(name, service, endpoint if name == "otlp" else None)  # type: ignore[arg-type]


# Not recording: ids for correlation, nothing else (replaced by configure()).
_provider: TracerProvider = TracerProvider(sampler=ALWAYS_OFF)
_tracer: trace.Tracer = _provider.get_tracer(INSTRUMENTATION)


def install(provider: TracerProvider) -> None:
    """Use `provider` for every later run (configure() calls it; tests pass one with an
    in-memory exporter)."""
    global _provider, _tracer
    _provider = provider
    _tracer = provider.get_tracer(INSTRUMENTATION)


def configure(environ: Mapping[str, str] | None = None, *, service_name: str) -> TracingSettings:
    """Set up export for this process from the OpenTelemetry environment."""
    settings = settings_from_env(
        os.environ if environ is None else environ, service_name=service_name
    )
    if settings.exporter == "none":
        return settings
    provider = TracerProvider(resource=Resource.create({"service.name": settings.service_name}))
    if settings.exporter == "console":
        exporter: SpanExporter = ConsoleSpanExporter(out=sys.stderr)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        # Imported here: the exporter pulls in protobuf and requests, unused without export.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.endpoint))
        )
    install(provider)
    log.info(
        "exporting traces",
        extra={"ordo": {"exporter": settings.exporter, "serviceName": settings.service_name}},
    )
    return settings


def configure_or_explain(service_name: str) -> str | None:
    """configure() from os.environ; the problem as one line instead of raising."""
    try:
        configure(service_name=service_name)
    except TracingConfigError as exc:
        return str(exc)
    return None


def shutdown() -> None:
    """Export what is buffered and stop (at process exit)."""
    _provider.shutdown()


def tracer() -> trace.Tracer:
    return _tracer


@dataclass(frozen=True)
class RunIds:
    trace_id: str
    span_id: str


_RUN: contextvars.ContextVar[RunIds | None] = contextvars.ContextVar("ordo_run_ids", default=None)


_TRACE: contextvars.ContextVar[RunTrace | None] = contextvars.ContextVar(
    "ordo_run_trace", default=None
)


def current_run() -> RunTrace | None:
    """The run trace of the run in this asyncio task; None outside a run."""
    return _TRACE.get()


def current_ids() -> RunIds | None:
    """The trace and span id of the run in this asyncio task (also after it ended, for the
    caller's closing log lines); None outside a run."""
    return _RUN.get()


def parent_context(task: Task) -> Context | None:
    """The context of the Task's traceparent annotation, or None when absent or invalid."""
    value = (task.metadata.annotations or {}).get(TRACEPARENT_ANNOTATION)
    if not value:
        return None
    if len(value) > MAX_TRACEPARENT_CHARS:
        log.warning("ignoring an overlong traceparent annotation")
        return None
    context = TraceContextTextMapPropagator().extract({"traceparent": value.strip()})
    if not trace.get_current_span(context).get_span_context().is_valid:
        log.warning(f"ignoring the {TRACEPARENT_ANNOTATION} annotation: not a W3C traceparent")
        return None
    return context


class RunTrace:
    """The `invoke_agent` span of one run."""

    def __init__(self, span: trace.Span, task: Task) -> None:
        self.span = span
        self.task = task
        ctx = span.get_span_context()
        self.ids = RunIds(format(ctx.trace_id, "032x"), format(ctx.span_id, "016x"))
        self._spans: SpanListener | None = None

    @property
    def recording(self) -> bool:
        return self.span.is_recording()

    def listeners(self, snapshot: Snapshot) -> list[Listener]:
        """The span listener for this run, or none when nothing is recorded."""
        if not self.recording:
            return []
        from .spans import SpanListener, model_attributes

        self.span.set_attributes(model_attributes(snapshot))
        self._spans = SpanListener(_tracer, self.span, snapshot)
        return [self._spans]

    def traceparent(self, call_id: str) -> str | None:
        """The W3C traceparent a child Task of `call_id` carries (`TRACEPARENT_ANNOTATION`):
        the call's execute_tool span, or the run's span when spans are not recorded (the
        child then joins the trace id)."""
        tool = self._spans.tool_context(call_id) if self._spans is not None else None
        carrier: dict[str, str] = {}
        context = trace.set_span_in_context(tool or self.span)
        TraceContextTextMapPropagator().inject(carrier, context=context)
        return carrier.get("traceparent")

    def client_span(self, name: str, call_id: str, attributes: dict[str, Any]) -> trace.Span:
        """A CLIENT span under the call's execute_tool span (the run's when spans are not
        recorded): a remote agent's invocation (runtime/remotespans.py)."""
        tool = self._spans.tool_context(call_id) if self._spans is not None else None
        return _tracer.start_span(
            name,
            context=trace.set_span_in_context(tool or self.span),
            kind=SpanKind.CLIENT,
            attributes=attributes,
            record_exception=False,
        )

    def delegator(self, inner: Delegator | None) -> Delegator | None:
        """`inner`, with each child request carrying the traceparent of its call."""
        return None if inner is None else _TracedDelegator(inner, self)

    def finish(self, outcome: TaskOutcome) -> None:
        """Record how the run ended: phase and reason; a Failed run's span is an error whose
        type is the Task's reason. The message is not recorded (it is for people, in status)."""
        if not self.recording:
            return
        span = self.span
        span.set_attribute("ordo.task.phase", outcome.phase)
        span.set_attribute("ordo.task.reason", outcome.reason)
        result = outcome.result
        if result is not None:
            span.set_attribute("ordo.task.steps", result.step)
            span.set_attribute("gen_ai.usage.input_tokens", result.usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", result.usage.output_tokens)
        if outcome.phase == "Failed":
            span.set_attribute("error.type", outcome.reason)
            span.set_status(Status(StatusCode.ERROR, outcome.reason))


class _TracedDelegator:
    """A run's Delegator whose child requests carry their call's traceparent, so the child's
    invoke_agent span nests under the parent's execute_tool span."""

    def __init__(self, inner: Delegator, run: RunTrace) -> None:
        self._inner = inner
        self._run = run

    async def start(self, request: ChildRequest) -> ChildState:
        traced = dataclasses.replace(request, traceparent=self._run.traceparent(request.key))
        return await self._inner.start(traced)


@contextlib.contextmanager
def run_span(task: Task) -> Iterator[RunTrace]:
    """The run's span, current for the block (log lines carry its ids); it ends with the
    block. A block left by an exception (the run abandoned, the process stopping) records
    only the exception's type."""
    if task.spec.team_ref is not None:  # a Team Task (runtime/team.py)
        name, attributes = (
            f"invoke_workflow {task.spec.team_ref}",
            {
                "gen_ai.operation.name": "invoke_workflow",
                "ordo.team.name": task.spec.team_ref,
            },
        )
    else:
        name, attributes = (
            f"invoke_agent {task.spec.agent_ref}",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": task.spec.agent_ref or "",
            },
        )
    span = _tracer.start_span(
        name,
        context=parent_context(task),
        kind=SpanKind.INTERNAL,
        attributes={
            **attributes,
            "k8s.namespace.name": task.namespace,
            "ordo.task.name": task.name,
        },
        record_exception=False,
        set_status_on_exception=False,
    )
    run = RunTrace(span, task)
    _RUN.set(run.ids)
    _TRACE.set(run)
    try:
        with trace.use_span(
            span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        ):
            yield run
    except BaseException as exc:
        if run.recording:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        span.end()
