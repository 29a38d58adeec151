"""The CLIENT `invoke_agent` span of an `a2a` Tool call (runtime/tracing.py): a RemoteAgent
(engine/remote.py) wrapped so that each remote task a call sends is one span under the
call's `execute_tool` span, from the send until the task is seen ended (or cancelled, or the
run's client closed). The span is current during the send, so the request carries ITS W3C
traceparent (tools/a2a.py injects the current context): the remote agent's spans nest under
it. Attributes are names and addresses only (the tool, the remote host, the final A2A state),
never the message or the answer. A resumed run polls without a span of its own (the send's
span ended with the run that sent it)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from ..engine.remote import RemoteAgent, RemoteTask
from . import tracing

__all__ = ["TracedRemote"]


class TracedRemote:
    """`inner`, with one CLIENT span per remote task of the Tool `tool` (at `url`)."""

    def __init__(self, inner: RemoteAgent, tool: str, url: str) -> None:
        self._inner = inner
        self._attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.tool.name": tool,
        }
        parts = urlsplit(url)
        if parts.hostname:
            self._attributes["server.address"] = parts.hostname
        self._name = f"invoke_agent {tool}"
        self._spans: dict[str, trace.Span] = {}

    async def send(self, key: str, message: Any, chain: tuple[str, ...]) -> RemoteTask:
        run = tracing.current_run()
        if run is None or not run.recording:
            return await self._inner.send(key, message, chain)
        span = run.client_span(self._name, key, self._attributes)
        try:
            with trace.use_span(span, end_on_exit=False, record_exception=False):
                task = await self._inner.send(key, message, chain)
        except BaseException as exc:
            _end(span, type(exc).__name__)
            raise
        if task.id and not task.ended:
            self._spans[task.id] = span
        else:
            _end(span, None if task.state == "completed" else task.state)
        return task

    async def get(self, task_id: str) -> RemoteTask:
        task = await self._inner.get(task_id)
        if task.ended and (span := self._spans.pop(task_id, None)) is not None:
            _end(span, None if task.state == "completed" else task.state)
        return task

    async def cancel(self, task_id: str) -> None:
        try:
            await self._inner.cancel(task_id)
        finally:
            if (span := self._spans.pop(task_id, None)) is not None:
                _end(span, "canceled")

    async def close(self) -> None:
        for span in self._spans.values():
            _end(span, "Interrupted")
        self._spans.clear()
        close = getattr(self._inner, "close", None)
        if close is not None:
            await close()


def _end(span: trace.Span, error: str | None) -> None:
    """End `span`; `error` (an A2A state or an exception type) marks it failed."""
    if error is not None:
        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()
