"""Errors of the Kubernetes API client: every failure of a request is an `ApiError` (HTTP
status or transport failure, with `transient` telling whether the same request may succeed
later), or `Fenced` for a fenced write refused because another execution owns the object."""

from __future__ import annotations

import httpx

from ...errors import LeaseLost, OrdoError

MAX_MESSAGE = 300
"""API error messages are capped: an `Invalid` message may echo field values."""


class ApiError(OrdoError):
    """A Kubernetes API request failed. Every failure of a `KubeClient` request is one of these
    (or `Fenced`): an HTTP error status, or a transport failure (connection refused or reset,
    timeout, TLS, protocol), which has `status` 0 and `api_reason` "TransportError".

    `status` is the HTTP status (0 when no response arrived), `api_reason` the API's reason
    ("NotFound", "Conflict", "Invalid", ...; "TransportError" for status 0). The message names
    the status, the API reason and a capped API message, or only the exception type for a
    transport failure; never a request body. `reason` is the Task reason (`InternalError`) if
    this error ends a run."""

    def __init__(
        self, status: int, api_reason: str, message: str, *, causes: tuple[str, ...] = ()
    ) -> None:
        super().__init__(f"{status} {api_reason}: {message}"[: MAX_MESSAGE + 40])
        self.status = status
        self.api_reason = api_reason
        self.causes = causes
        """The API's cause messages, for classification only (they may echo values: never
        log them)."""

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def transient(self) -> bool:
        """True if the same request may succeed later: no response (connection error,
        timeout), 429, or 5xx. False for other 4xx (the request itself is refused).

        A transient failure of a write does not say whether the write was applied: a 5xx or
        a connection lost after sending may hide a write the server committed."""
        return self.status == 0 or self.status == 429 or self.status >= 500


class Fenced(LeaseLost):
    """A fenced write was refused because this execution no longer owns the Task: another
    execution claimed it (a different `status.executionId`, or checkpoint annotation
    `ordo.dev/execution-id`). Nothing was written. Stop the run without writing anything else
    for it (not even a terminal status: the newer execution owns the Task).

    Deliberately not an `ApiError`, so code that suppresses `ApiError` for best-effort writes
    never swallows it."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(f"{kind} {name!r} is owned by another execution; write refused")
        self.kind = kind
        self.name = name


def transport_error(exc: httpx.HTTPError) -> ApiError:
    if isinstance(exc, httpx.TransportError):
        return ApiError(0, "TransportError", type(exc).__name__)
    return ApiError(0, "InvalidResponse", type(exc).__name__)


def response_error(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        return ApiError(response.status_code, "", f"non-JSON error body ({response.reason_phrase})")
    if not isinstance(body, dict):
        return ApiError(response.status_code, "", "unexpected error body")
    reason = str(body.get("reason", ""))
    details = body.get("details")
    raw = details.get("causes") if isinstance(details, dict) else None
    causes = [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []
    if response.status_code == 422 and causes:
        # Invalid: the message may echo the rejected values; name fields and rule types only.
        message = "; ".join(f"{c.get('field', '')}: {c.get('reason', '')}" for c in causes)
    else:
        message = str(body.get("message", ""))
    return ApiError(
        response.status_code,
        reason,
        message[:MAX_MESSAGE],
        causes=tuple(str(c.get("message", "")) for c in causes),
    )


def patch_test_failed(error: ApiError, pointer: str) -> bool:
    """True if a JSON Patch was refused because its `test` of `pointer` failed.

    kube-apiserver (checked against v1.36) answers a failed `test` — a different value, or
    a missing path — with 422 Invalid, a generic message and no causes, whereas a schema
    violation is a 422 that names its causes (fields). Some versions name the failed test
    in a cause ("testing value <pointer> failed", "missing path: <pointer>"). So this is
    exact only for patches whose other operations cannot fail once the test passed (adds
    under the tested object's parents, as the fenced writes do)."""
    if error.status != 422:
        return False
    if not error.causes:
        return error.api_reason == "Invalid"
    return any(
        f"testing value {pointer} failed" in cause or f"missing path: {pointer}" in cause
        for cause in error.causes
    )
