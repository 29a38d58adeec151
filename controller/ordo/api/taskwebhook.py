"""TaskWebhook: a Task per signed delivery, served by `ordo gateway` at
`POST /hooks/{namespace}/{name}` (docs/triggers.md#webhooks; gateway/hooks.py).

The delivery is untrusted input: its size and JSON depth are capped, its signature checked
against an opted-in Secret before anything is parsed, and only the chosen JSON Pointers (or
the whole body) become the Task's `spec.input`. The Task's name derives from the webhook and
the delivery (api/triggers.delivery_task_name), so a redelivery creates no second Task.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator

from .base import (
    CelRule,
    OrdoModel,
    PositiveDuration,
    Resource,
    SecretKeyRef,
    StatusBase,
)
from .triggers import TaskTemplate

WebhookProfile = Literal["HMAC", "GitHub"]

DEFAULT_MAX_BODY_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024
"""The hard cap of `maxBodyBytes`: a delivery is read into memory, never past this."""
DEFAULT_MAX_DEPTH = 20
MAX_DEPTH = 64
DEFAULT_TOLERANCE = "5m"
GITHUB_DELIVERY_HEADER = "X-GitHub-Delivery"
HMAC_HEADER = "Ordo-Signature"
"""The HMAC profile's header: `t=<unix seconds>,v1=<hex hmac-sha256 of "<t>.<body>">`."""
GITHUB_HEADER = "X-Hub-Signature-256"
MAX_FIELDS = 32

HEADER_NAME = r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$"
JSON_POINTER = r"^(/([^~/]|~[01])*)*$"
"""RFC 6901: `""` is the whole document, `/a/0/b~1c` is `a`, element 0, key `b/c`."""


class WebhookAuth(OrdoModel):
    """How a delivery proves it comes from the sender that knows the Secret."""

    profile: WebhookProfile
    """`HMAC`: header `Ordo-Signature: t=<unix>,v1=<hex hmac-sha256 of "<t>.<body>">` (the
    timestamp is signed, so a captured delivery is refused outside `tolerance`); `GitHub`:
    header `X-Hub-Signature-256: sha256=<hex hmac-sha256 of the body>` (no timestamp: replay
    protection is the dedupe on `X-GitHub-Delivery`)."""
    secret_ref: SecretKeyRef
    """The shared secret: a key of a Secret labelled `ordo.dev/credential: "true"` (an
    unlabelled Secret reads as a missing one, docs/security.md)."""


class WebhookDedupe(OrdoModel):
    """Which request header identifies a delivery, so a redelivery finds its Task."""

    header: Annotated[str, Field(pattern=HEADER_NAME, max_length=64)]
    """The header's name (case-insensitive), e.g. `X-GitHub-Delivery`. Its value (at most 200
    characters) is hashed into the Task's name; a delivery without it is keyed by its
    signature."""


class WebhookPayload(OrdoModel):
    """What of the delivery's JSON body becomes the Task's `spec.input`."""

    fields: (
        Annotated[
            dict[str, Annotated[str, Field(pattern=JSON_POINTER, max_length=512)]],
            Field(min_length=1, max_length=MAX_FIELDS),
        ]
        | None
    ) = None
    """Input field name to JSON Pointer (RFC 6901) into the body: the input is an object of
    these fields; a pointer the body does not have refuses the delivery (400). Without
    `fields` the whole body is the input."""


class WebhookRateLimit(OrdoModel):
    """Deliveries this webhook accepts, across all senders (per gateway replica), then 429."""

    requests_per_second: Annotated[float, Field(gt=0, le=1000)]
    """Sustained deliveries per second."""
    burst: Annotated[int, Field(ge=1, le=10000)] = 10
    """Deliveries accepted at once after a quiet period."""


class TaskWebhookSpec(OrdoModel):
    """Desired state of a TaskWebhook."""

    auth: WebhookAuth
    """The signature profile and the shared Secret."""
    tolerance: PositiveDuration | None = None
    """HMAC profile only: how far the signed timestamp may be from the gateway's clock
    (default `5m`)."""
    dedupe: WebhookDedupe | None = None
    """The delivery-id header (the GitHub profile defaults to `X-GitHub-Delivery`)."""
    payload: WebhookPayload | None = None
    """What of the body becomes the Task's input (default: the whole body)."""
    max_body_bytes: Annotated[int, Field(ge=2, le=MAX_BODY_BYTES)] | None = None
    """A larger body is refused (413) without reading further (default 65536, at most
    1048576)."""
    max_depth: Annotated[int, Field(ge=1, le=MAX_DEPTH)] | None = None
    """A body nested deeper (objects and arrays) is refused (413) (default 20, at most 64)."""
    rate_limit: WebhookRateLimit | None = None
    """Deliveries per second, then 429 (default: unlimited)."""
    suspend: bool | None = None
    """`true`: deliveries are refused (503) and create no Task."""
    task_template: TaskTemplate
    """The Task each delivery creates; its `spec.input` is the delivery's payload (leave it
    unset)."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="self.auth.profile == 'HMAC' || !has(self.tolerance)",
            message="spec.tolerance applies to the HMAC profile only (GitHub signs no timestamp)",
            check=lambda s: s.auth.profile == "HMAC" or s.tolerance is None,
        ),
    )

    @field_validator("task_template")
    @classmethod
    def _no_input(cls, template: TaskTemplate) -> TaskTemplate:
        # CEL cannot name `input` (api/task.py CEL_INVISIBLE_TASK_FIELDS): checked here.
        if template.spec.input is not None:
            raise ValueError(
                "spec.taskTemplate.spec.input is set from each delivery's payload: remove it "
                "(spec.payload chooses what of the body becomes the input)"
            )
        return template

    @property
    def body_limit(self) -> int:
        return self.max_body_bytes or DEFAULT_MAX_BODY_BYTES

    @property
    def depth_limit(self) -> int:
        return self.max_depth or DEFAULT_MAX_DEPTH

    @property
    def dedupe_header(self) -> str | None:
        if self.dedupe is not None:
            return self.dedupe.header
        return GITHUB_DELIVERY_HEADER if self.auth.profile == "GitHub" else None


class TaskWebhookStatus(StatusBase):
    """Ready (the operator: the Secret key is opted in and present, the template's Agent or
    Team exists) and the last delivery (the gateway)."""

    last_delivery_time: str | None = None
    """When the gateway last created a Task for a delivery (RFC 3339)."""
    last_task: str | None = None
    """The Task that delivery created."""
    tasks_created: Annotated[int, Field(ge=0)] | None = None
    """Tasks created for deliveries (a redelivery that found its Task is not counted); the
    gateway's metric `ordo_trigger_tasks_total` counts every outcome."""


class TaskWebhook(Resource):
    """Creates a Task for every signed delivery to the gateway's `/hooks/{namespace}/{name}`."""

    kind: Literal["TaskWebhook"] = "TaskWebhook"
    spec: TaskWebhookSpec
    status: TaskWebhookStatus | None = None
