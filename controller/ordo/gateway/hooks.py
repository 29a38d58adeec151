"""`POST /hooks/{namespace}/{name}`: a signed delivery to a TaskWebhook creates exactly one Task
(docs/triggers.md#webhooks).

The checks, in order, each answering without creating anything: a rate limit per client
address (429, before any Kubernetes API request), the webhook (404 when missing or in a
namespace not served; 503 when suspended or invalid), the size cap while reading (413: the
body is never read past `maxBodyBytes`), the webhook's rate limit (429), the signature
against its opted-in Secret (401, no detail), the dedupe key, the JSON depth cap (413) and the
payload mapping (400). Then the Task is created under a name derived from the delivery: `202`
with its name; a redelivery finds its Task (`200`, same name); a Task of that name the
webhook does not own is never adopted (`409`, and an Event).

The webhook's status counts the Tasks created (`tasksCreated`, a resourceVersion-guarded
write) and names the last one.

Nothing of the body, the headers or the Secret is logged, counted or put in an Event: those
carry the webhook's name, the Task's name and an outcome code.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from ..api.base import parse_duration
from ..api.taskwebhook import (
    DEFAULT_TOLERANCE,
    GITHUB_HEADER,
    HMAC_HEADER,
    MAX_BODY_BYTES,
    TaskWebhook,
)
from ..api.triggers import TriggerOutcome
from ..credentials import NOWHERE, release
from ..operator.kube.client import ApiError, KubeClient
from ..operator.tasks.conditions import now as rfc3339_now
from ..operator.tasks.recorder import EventRecorder
from . import deliveries
from .limits import CallerLimits
from .metrics import GatewayMetrics
from .payload import PayloadRefused, parse, read_capped, task_input
from .signatures import verify_github, verify_hmac

log = logging.getLogger(__name__)

MAX_WEBHOOK_BUCKETS = 10000
"""Per-webhook rate limiters kept; past it they all start afresh."""
STATUS_ATTEMPTS = 5
"""Conditional status writes tried before giving up on counting one Task (it still exists)."""
REFUSAL_EVENT_INTERVAL = 60.0
"""At most one `DeliveryRefused` Event per webhook in this many seconds: anyone who can reach
/hooks can be refused, and each Event is an object in etcd (the metric counts every one)."""
STATUS = {
    "created": 202,
    "duplicate": 200,
    "skipped": 503,
    "refused": 401,
    "too_large": 413,
    "rate_limited": 429,
    "invalid": 400,
    "failed": 503,
}


@dataclass(frozen=True, slots=True)
class Answer:
    outcome: TriggerOutcome
    task: str | None = None
    status: int | None = None
    """The HTTP status when it is not the outcome's usual one (STATUS)."""
    api_status: int | None = None
    """`failed`: the API server's status for the Task's create (0: no answer)."""

    def response(self) -> Response:
        status = self.status or STATUS[self.outcome]
        if self.task is not None and status in (200, 202):
            return JSONResponse({"task": self.task}, status_code=status)
        headers = {"Retry-After": "1"} if status in (429, 503) else None
        return PlainTextResponse(str(status), status_code=status, headers=headers)


class WebhookLimits:
    """A token bucket per webhook object, at the rate its spec names."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._limits: dict[tuple[str, float, int], CallerLimits] = {}

    def admit(self, uid: str, rate: float, burst: int) -> bool:
        key = (uid, rate, burst)
        if key not in self._limits and len(self._limits) >= MAX_WEBHOOK_BUCKETS:
            self._limits.clear()
        return self._limits.setdefault(key, CallerLimits(rate, burst, self._clock)).admit(uid)


class Hooks:
    def __init__(
        self,
        kube: KubeClient,
        namespaces: tuple[str, ...],
        metrics: GatewayMetrics,
        clients: CallerLimits,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._kube = kube
        self._namespaces = namespaces
        self._metrics = metrics
        self._clients = clients
        self._clock = clock
        self._limits = WebhookLimits()
        self._refusal_events = WebhookLimits()
        self._events = EventRecorder(kube, component="ordo-gateway")

    async def handle(self, request: Request) -> Response:
        try:
            found = await self._webhook(request)
        except ApiError as exc:
            log.warning("gateway: reading the TaskWebhook failed (%s)", exc.status)
            found = PlainTextResponse("503", status_code=503)
        if isinstance(found, Answer):
            self._count(found.outcome)
            response = found.response()
        elif isinstance(found, Response):
            response = found
        else:
            answer = await self._deliver(request, found)
            self._count(answer.outcome)
            await self._report(found, answer)
            response = answer.response()
        self._metrics.requests.labels(method="webhook", code=str(response.status_code)).inc()
        return response

    def _count(self, outcome: TriggerOutcome) -> None:
        self._metrics.trigger_tasks.labels(kind=deliveries.KIND, outcome=outcome).inc()

    async def _webhook(self, request: Request) -> dict[str, Any] | Answer | Response:
        """The TaskWebhook the path names, or what to answer instead."""
        address = request.client.host if request.client else ""
        if not self._clients.admit(address):
            return Answer("rate_limited")
        namespace = request.path_params["namespace"]
        if self._namespaces and namespace not in self._namespaces:
            return PlainTextResponse("404", status_code=404)
        webhook = await self._kube.get("TaskWebhook", namespace, request.path_params["name"])
        if webhook is None:
            return PlainTextResponse("404", status_code=404)
        return webhook

    async def _deliver(self, request: Request, webhook: dict[str, Any]) -> Answer:
        try:
            spec = TaskWebhook.model_validate(webhook).spec
        except ValidationError:
            return Answer("invalid", status=503)  # the webhook's spec, not the delivery
        if spec.suspend:
            return Answer("skipped")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > min(spec.body_limit, MAX_BODY_BYTES):
            return Answer("too_large")
        try:
            body = await read_capped(request.stream(), min(spec.body_limit, MAX_BODY_BYTES))
        except PayloadRefused as refused:
            return Answer(refused.outcome)
        if spec.rate_limit is not None and not self._limits.admit(
            webhook["metadata"]["uid"], spec.rate_limit.requests_per_second, spec.rate_limit.burst
        ):
            return Answer("rate_limited")
        secret = await self._secret(webhook, spec.auth.secret_ref.name, spec.auth.secret_ref.key)
        if secret is None:
            return Answer("refused", status=503)  # the webhook's Secret: Ready says which
        if spec.auth.profile == "HMAC":
            tolerance = parse_duration(spec.tolerance or DEFAULT_TOLERANCE)
            header = request.headers.get(HMAC_HEADER)
            signature = verify_hmac(header, secret, body, self._clock(), tolerance)
        else:
            signature = verify_github(request.headers.get(GITHUB_HEADER), secret, body)
        if signature is None:
            return Answer("refused")
        key = signature
        if spec.dedupe_header and (delivery := request.headers.get(spec.dedupe_header)):
            if len(delivery) > deliveries.MAX_KEY:
                return Answer("invalid")
            key = deliveries.header_key(delivery)
        try:
            fields = spec.payload.fields if spec.payload is not None else None
            value = task_input(parse(body, spec.depth_limit), fields)
        except PayloadRefused as refused:
            return Answer(refused.outcome)
        return await self._create(webhook, deliveries.task_body(webhook, key, value))

    async def _secret(self, webhook: dict[str, Any], name: str, key: str) -> str | None:
        """The shared secret, only from a Secret opted in (credentials.release: an unlabelled
        one reads as missing); it is never sent anywhere (NOWHERE)."""
        namespace = webhook["metadata"]["namespace"]
        try:
            body = await self._kube.get("Secret", namespace, name)
        except ApiError as exc:
            log.warning("gateway: reading a TaskWebhook's Secret failed (%s)", exc.status)
            return None
        return release(body, name, key, NOWHERE, "Enforce").value

    async def _create(self, webhook: dict[str, Any], task: dict[str, Any]) -> Answer:
        namespace = webhook["metadata"]["namespace"]
        name = task["metadata"]["name"]
        try:
            await self._kube.create("Task", namespace, task)
            return Answer("created", name)
        except ApiError as exc:
            if not exc.conflict:
                log.warning("gateway: creating a webhook's Task failed (%s)", exc.status)
                return Answer("failed", name, api_status=exc.status)
        try:
            existing = await self._kube.get("Task", namespace, name)
        except ApiError as exc:
            return Answer("failed", name, api_status=exc.status)
        if existing is not None and deliveries.owned_by(existing, webhook):
            return Answer("duplicate", name)
        return Answer("failed", name, status=409)

    async def _record(self, webhook: dict[str, Any], task: str) -> None:
        """Count a created Task in the webhook's status (`tasksCreated`, with the last one and
        its time): a write conditional on the resourceVersion read, so two gateway replicas
        never lose a count; after a conflict it reads the webhook again (a few times)."""
        meta = webhook["metadata"]
        current: dict[str, Any] | None = webhook
        for _ in range(STATUS_ATTEMPTS):
            if current is None:
                return  # deleted meanwhile
            count = int((current.get("status") or {}).get("tasksCreated") or 0)
            patch = {
                "metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                "status": {
                    "lastDeliveryTime": rfc3339_now(),
                    "lastTask": task,
                    "tasksCreated": count + 1,
                },
            }
            try:
                await self._kube.patch(
                    "TaskWebhook", meta["namespace"], meta["name"], patch, status=True
                )
                return
            except ApiError as exc:
                if not exc.conflict:
                    log.warning("gateway: writing a TaskWebhook's status failed (%s)", exc.status)
                    return
            try:
                current = await self._kube.get("TaskWebhook", meta["namespace"], meta["name"])
            except ApiError as exc:
                log.warning("gateway: reading a TaskWebhook failed (%s)", exc.status)
                return
        log.warning("gateway: a TaskWebhook's status kept changing; tasksCreated not written")

    async def _report(self, webhook: dict[str, Any], answer: Answer) -> None:
        """The Event of a delivery (its outcome code and the Task's name, nothing else) and,
        for a created Task, the webhook's `status.lastDeliveryTime`."""
        if answer.outcome == "created":
            await self._events.post(webhook, "Delivered", f"created Task {answer.task}")
            await self._record(webhook, str(answer.task))
        elif answer.status == 409:
            await self._events.post(
                webhook,
                "DeliveryConflict",
                f"Task {answer.task} exists and is not this webhook's: not adopted",
                warning=True,
            )
        elif answer.api_status is not None:  # after a valid signature: never throttled
            await self._events.post(
                webhook,
                "DeliveryFailed",
                f"the API server refused Task {answer.task} ({answer.api_status or 'no answer'})",
                warning=True,
            )
        elif answer.outcome != "duplicate" and self._refusal_events.admit(
            webhook["metadata"]["uid"], 1 / REFUSAL_EVENT_INTERVAL, 1
        ):
            code = answer.status or STATUS[answer.outcome]
            message = (
                f"{answer.outcome} ({code}); further refusals within "
                f"{REFUSAL_EVENT_INTERVAL:g}s are only counted in ordo_trigger_tasks_total"
            )
            await self._events.post(webhook, "DeliveryRefused", message, warning=True)
