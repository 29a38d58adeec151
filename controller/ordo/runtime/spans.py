"""The child spans of a run, from the engine's events (GenAI semantic conventions).

- `chat {model}` (CLIENT) per model call: from StepStarted (the call starts right after it)
  to ModelResponded, with `gen_ai.provider.name`, `gen_ai.request.model`,
  `gen_ai.response.model`, `gen_ai.usage.*_tokens`, `gen_ai.response.finish_reasons`; a call
  that never answered ends with the run, as an error typed by the Task's reason.
- `execute_tool {tool}` (INTERNAL) per tool call: from ToolDecided to ToolFinished, with
  `gen_ai.tool.name`, `gen_ai.tool.call.id`, and ordo's governance decision, its reason and
  the outcome. A call that governance denied or rejected never runs: its span is closed at
  once, as an error typed `ToolDenied` or `ToolRejected`. A call of a name the run does not
  offer is `execute_tool <not-offered>` without a call id: a model cannot write its own text
  into span names or attributes by inventing tools (engine/events.py). The call of an
  `agent` Tool hands its span to the child Task (runtime/tracing.py `traceparent`); a run
  that stops to wait for its children ends each waiting call's span as `waiting`.

Only names, ids, counts, decisions and reasons; never prompts, arguments, results or answers.
A listener must never break a run: anything unexpected here is logged (by type) and dropped.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ..engine.events import (
    NOT_OFFERED_TOOL,
    Event,
    ModelResponded,
    RunFinished,
    StepStarted,
    ToolDecided,
    ToolFinished,
)
from .snapshot import Snapshot

log = logging.getLogger("ordo.tracing")

PROVIDER_NAMES = {"azure-openai": "azure.ai.openai"}
"""ordo provider → `gen_ai.provider.name` where the convention's well-known value differs
(openai, anthropic are the same; ollama, openai-compatible and mock are ordo's own)."""


def model_attributes(snapshot: Snapshot) -> dict[str, Any]:
    """Provider, requested model and server of the run's ModelEndpoint (host and port only:
    a baseUrl may carry credentials or a path that is nobody's business)."""
    spec = snapshot.endpoint.spec
    attributes: dict[str, Any] = {
        "gen_ai.provider.name": PROVIDER_NAMES.get(spec.provider, spec.provider),
        "gen_ai.request.model": spec.effective_model(),
    }
    if spec.base_url:
        try:
            parts = urlsplit(spec.base_url)
            if parts.hostname:
                attributes["server.address"] = parts.hostname
                attributes["server.port"] = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            pass
    return attributes


class SpanListener:
    """Builds the chat and execute_tool spans of one run under its invoke_agent span."""

    def __init__(self, tracer: trace.Tracer, run_span: trace.Span, snapshot: Snapshot) -> None:
        self._tracer = tracer
        self._parent = trace.set_span_in_context(run_span)
        self._model = model_attributes(snapshot)
        self._chat: trace.Span | None = None
        self._tools: dict[str, trace.Span] = {}
        """Open execute_tool spans by call id: a delegating call's stays open while its
        child Task runs (several can)."""

    async def __call__(self, event: Event) -> None:
        try:
            self._on(event)
        except Exception as exc:  # pragma: no cover - a tracing bug must not end a run
            log.warning(
                "trace span not recorded", extra={"ordo": {"errorType": type(exc).__name__}}
            )

    def _start(self, name: str, kind: SpanKind, attributes: dict[str, Any]) -> trace.Span:
        return self._tracer.start_span(
            name, context=self._parent, kind=kind, attributes=attributes, record_exception=False
        )

    def _on(self, event: Event) -> None:
        if isinstance(event, StepStarted):
            self._end_chat("Interrupted")  # never left open across steps
            self._chat = self._start(
                f"chat {self._model['gen_ai.request.model']}",
                SpanKind.CLIENT,
                {**self._model, "gen_ai.operation.name": "chat", "ordo.step": event.step},
            )
        elif isinstance(event, ModelResponded):
            self._model_responded(event)
        elif isinstance(event, ToolDecided):
            self._tool_decided(event)
        elif isinstance(event, ToolFinished):
            self._tool_finished(event)
        elif isinstance(event, RunFinished):
            reason = event.result.reason
            self._end_chat(reason)
            for span in self._tools.values():
                if event.result.phase == "AwaitingChildren":  # parked, not failed
                    span.set_attribute("ordo.tool.outcome", "waiting")
                else:
                    _fail(span, reason)
                span.end()
            self._tools.clear()

    def tool_context(self, call_id: str) -> trace.Span | None:
        """The open execute_tool span of a call (a child Task's run nests under it)."""
        return self._tools.get(call_id)

    def _model_responded(self, event: ModelResponded) -> None:
        span, self._chat = self._chat, None
        if span is None:
            return
        span.set_attribute("gen_ai.usage.input_tokens", event.usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", event.usage.output_tokens)
        if event.response_model:
            span.set_attribute("gen_ai.response.model", event.response_model)
        if event.finish_reason:
            span.set_attribute("gen_ai.response.finish_reasons", [event.finish_reason])
        span.set_attribute("ordo.tool_calls", event.tool_calls)
        span.end()

    def _end_chat(self, reason: str) -> None:
        span, self._chat = self._chat, None
        if span is not None:
            _fail(span, reason)
            span.end()

    def _tool_decided(self, event: ToolDecided) -> None:
        record = event.record
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": record.tool,
            "gen_ai.tool.type": "function",
            "ordo.step": record.step,
            "ordo.tool.decision": record.decision,
            "ordo.tool.decision_reason": record.reason,
        }
        if record.call_id and record.tool != NOT_OFFERED_TOOL:
            attributes["gen_ai.tool.call.id"] = record.call_id
        span = self._start(f"execute_tool {record.tool}", SpanKind.INTERNAL, attributes)
        if record.decision == "allowed":
            self._tools[record.call_id or ""] = span
            return
        span.set_attribute("ordo.tool.outcome", record.outcome or "skipped")
        _fail(span, "ToolDenied" if record.decision == "denied" else "ToolRejected")
        span.end()

    def _tool_finished(self, event: ToolFinished) -> None:
        span = self._tools.pop(event.call_id, None)
        if span is None:
            return
        span.set_attribute("ordo.tool.outcome", event.outcome)
        if event.outcome != "succeeded":
            _fail(span, event.cause or "ToolError")
        span.end()


def _fail(span: trace.Span, error_type: str) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, error_type))
