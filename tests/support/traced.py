"""The manifest set of the tracing tests: a ModelEndpoint (given), a mock Tool `lookup`, an
Agent `researcher` and a Task `traced` with an `ordo.dev/traceparent` annotation, with a
canary in the prompt, the input and the tool result (the model's script adds arguments and
answer); `recorded_spans()` captures the spans of the runs in a block."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ordo.runtime import tracing

AGENT_AND_TASK = """
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {{name: lookup}}
spec:
  type: mock
  description: Looks things up.
  inputSchema:
    type: object
    properties: {{query: {{type: string}}}}
  mock:
    result: {{found: "{canary}-result"}}
  idempotent: true
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: researcher}}
spec:
  modelRef: model
  prompt: "{canary}-prompt"
  tools: [lookup]
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata:
  name: traced
  annotations:
    ordo.dev/traceparent: 00-{trace_id}-{parent}-01
spec:
  agentRef: researcher
  input: "{canary}-input"
"""


def traced_set(endpoint: str, *, canary: str, trace_id: str, parent: str) -> str:
    """`endpoint` (a ModelEndpoint named `model`, YAML) plus the rest of the set."""
    rest = AGENT_AND_TASK.format(canary=canary, trace_id=trace_id, parent=parent)
    return endpoint.strip() + "\n---" + rest


@contextlib.contextmanager
def recorded_spans() -> Iterator[InMemorySpanExporter]:
    """Runs record their spans into the OpenTelemetry SDK's in-memory exporter for the block
    (the process's tracing returns to not recording afterwards)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.install(TracerProvider(sampler=tracing.ALWAYS_OFF))
