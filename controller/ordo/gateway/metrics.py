"""The gateway's Prometheus metrics, served on `--metrics-port` (`/metrics`). Every label
value is bounded: a known JSON-RPC method name, `other`, `unknown` (refused before the body
was read), `agentCard` or `webhook` (a TaskWebhook delivery); a trigger outcome; an HTTP status code; a fixed rejection kind; and the served Agent's
namespace and name (objects, not callers). Never a caller's name, a token or content."""

from __future__ import annotations

from typing import get_args

from prometheus_client import (
    CollectorRegistry,
    Counter,
    disable_created_metrics,
    start_http_server,
)

from ..api.triggers import TriggerOutcome

WEBHOOK_OUTCOMES = tuple(o for o in get_args(TriggerOutcome) if o not in ("missed", "replaced"))
"""The outcomes a delivery can have (missed and replaced are a schedule's)."""
REJECTIONS = ("unauthenticated", "forbidden", "rateLimited", "clientRateLimited")
"""Rejection kinds: 401, 403, 429 for a caller, 429 for a client address (before the
TokenReview)."""


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        # No `_created` series (as the operator's): nothing reads them.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "ordo_gateway_requests_total",
            "Requests to served Agents (cards and JSON-RPC), by method and HTTP status code.",
            ["method", "code"],
            registry=self.registry,
        )
        self.rejections = Counter(
            "ordo_gateway_rejections_total",
            "Requests refused before their method ran, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.tasks_created = Counter(
            "ordo_gateway_tasks_created_total",
            "Tasks the gateway created for a send (a retried send that found its Task is not "
            "counted).",
            ["namespace", "agent"],
            registry=self.registry,
        )
        self.trigger_tasks = Counter(
            "ordo_trigger_tasks_total",
            "TaskWebhook deliveries by outcome (created, duplicate, refused, ...; "
            "docs/triggers.md).",
            ["kind", "outcome"],
            registry=self.registry,
        )
        for kind in REJECTIONS:
            self.rejections.labels(kind=kind)
        for outcome in WEBHOOK_OUTCOMES:
            self.trigger_tasks.labels(kind="TaskWebhook", outcome=outcome)

    def serve(self, host: str, port: int) -> None:
        """Serve `/metrics` on `port` (prometheus-client's server, in a daemon thread).

        Raises OSError when the port cannot be bound."""
        start_http_server(port, addr=host, registry=self.registry)
