"""The SERVER `invoke_agent` span of each served JSON-RPC request (runtime/tracing.py
conventions): a child of the request's W3C traceparent when it carries one, current while
the SDK handles the request, so the Task it creates carries the span's traceparent
(annotation `ordo.dev/traceparent`) and the run's spans nest under it. Attributes are names
only (the Agent, its namespace, a known method name), never the message or the answer."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..runtime import tracing

_PROPAGATOR = TraceContextTextMapPropagator()


@contextmanager
def server_span(
    headers: Mapping[str, str], namespace: str, agent: str, method: str
) -> Iterator[trace.Span]:
    """The span of one request to `agent`; `method` only when the caller cannot choose it
    (the gateway passes a known method name or "other")."""
    parent = _PROPAGATOR.extract({"traceparent": headers.get("traceparent", "")})
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "k8s.namespace.name": namespace,
        "rpc.method": method,
    }
    with tracing.tracer().start_as_current_span(
        f"invoke_agent {agent}", context=parent, kind=SpanKind.SERVER, attributes=attributes
    ) as span:
        yield span


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span, or None when it is not recorded (a Task
    whose parent was never exported would point its run's spans at nothing)."""
    if not trace.get_current_span().is_recording():
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")
