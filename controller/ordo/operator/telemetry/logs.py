"""JSON logs carrying namespace, task, agent, executionId and step from context variables,
and the run's `traceId`/`spanId` (runtime/tracing.py) once its span has started.
Log calls pass names and counts only; never prompts, arguments, outputs or secrets."""

from __future__ import annotations

import contextvars
import json
import logging
from datetime import UTC, datetime
from typing import Any

from ...runtime import tracing

CONTEXT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "ordo_log_context", default=None
)
_FIELDS = ("namespace", "task", "agent", "executionId", "step", "traceId", "spanId")


def context_fields() -> dict[str, Any]:
    """The bound fields of the current asyncio task, with the trace ids of its run."""
    fields = dict(CONTEXT.get() or {})
    ids = tracing.current_ids()
    if ids is not None:
        fields["traceId"], fields["spanId"] = ids.trace_id, ids.span_id
    return fields


def bind(**values: Any) -> None:
    """Add fields to the log context of the current asyncio task."""
    current = dict(CONTEXT.get() or {})
    current.update({k: v for k, v in values.items() if v is not None})
    CONTEXT.set(current)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(context_fields())
        extra = getattr(record, "ordo", None)
        if isinstance(extra, dict):
            entry.update(extra)
        if record.exc_info and record.exc_info[0] is not None:
            entry["error"] = record.exc_info[0].__name__
            status = getattr(record.exc_info[1], "status", None)
            if isinstance(status, int):
                entry["errorStatus"] = status
                entry["errorReason"] = str(getattr(record.exc_info[1], "reason", ""))
        return json.dumps(entry, default=str)


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if not text or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text)
    return text


class TextFormatter(logging.Formatter):
    """`--log-format text`: one readable line, then the same fields the JSON lines carry
    (context first: namespace, task, agent, executionId, step; then the event's own) as
    `key=value`, quoted when needed."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)  # before the traceback, if any
        fields = context_fields()
        extra = getattr(record, "ordo", None)
        if isinstance(extra, dict):
            fields.update(extra)
        ordered = [k for k in _FIELDS if k in fields] + [k for k in fields if k not in _FIELDS]
        if ordered:
            line += " " + " ".join(f"{k}={_text_value(fields[k])}" for k in ordered)
        return line


def configure(fmt: str = "json", level: str = "INFO") -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Neither formatter reads the caller's file and line, the thread or the process: skip
    # collecting them for every record (the logging HOWTO's "Optimization"; ~7 of ~25 µs a
    # line).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # Libraries that could log request details stay at WARNING.
    for noisy in ("httpx", "httpx2", "httpcore", "openai", "anthropic", "mcp", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if level != "DEBUG":
        # kopf logs every handled event at INFO ("Handler ... succeeded"): keep its warnings.
        logging.getLogger("kopf").setLevel(logging.WARNING)
