"""Pure parts of exactly-once: lease expiry arithmetic, the kube client's error classification
and retry policy (against an in-process httpx.MockTransport, no network), fenced JSON
Patches, and checkpoint encoding."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import kopf
import pytest

from ordo.engine.state import RunState
from ordo.engine.transcript import AssistantMessage, UserMessage
from ordo.errors import Interrupted, LeaseLost, OrdoError
from ordo.operator.kube.client import (
    RETRY_ATTEMPTS,
    ApiError,
    Fenced,
    KubeClient,
    patch_test_failed,
)
from ordo.operator.tasks import checkpoint, sealing
from ordo.operator.tasks.checkpointdata import MAX_STATE_BYTES
from ordo.operator.tasks.lease import ExecutionLease, held_elsewhere, remaining, valid_until
from ordo.operator.tasks.ownership import owner_reference
from ordo.operator.tasks.sealing import CheckpointUntrusted, Subject

Handler = Callable[[httpx.Request], httpx.Response]

TASK: dict[str, Any] = {
    "apiVersion": "ordo.dev/v1alpha1",
    "kind": "Task",
    "metadata": {"name": "t1", "namespace": "ns", "uid": "u-1"},
}


class Recorder:
    """An in-process API: answers with `responses` in turn (an exception is raised instead)."""

    def __init__(self, *responses: httpx.Response | Exception) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.responses.pop(0) if len(self.responses) > 1 else self.responses[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def client_for(handler: Handler) -> KubeClient:
    return KubeClient(
        kopf.ConnectionInfo(server="https://kube.invalid"),
        wrap_transport=lambda _real: httpx.MockTransport(handler),
        backoff=0.001,
    )


def status(code: int, reason: str = "", **details: Any) -> httpx.Response:
    body: dict[str, Any] = {"kind": "Status", "code": code, "reason": reason, "message": "m"}
    if details:
        body["details"] = details
    return httpx.Response(code, json=body)


# -- lease arithmetic ------------------------------------------------------------------------


def test_valid_until_subtracts_the_margin_from_the_shorter_duration() -> None:
    assert valid_until(100.0, 30.0, 30, 6.0) == 124.0
    # A sub-second duration is written as 1 s, but the holder trusts only its own 0.5 s.
    assert valid_until(10.0, 0.5, 1, 0.1) == pytest.approx(10.4)
    # A duration written rounded down (2.4 s → 2) bounds the holder too.
    assert valid_until(0.0, 2.4, 2, 0.5) == 1.5


def test_remaining_counts_from_renew_time_in_the_task_status() -> None:
    now = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC)

    def stamp(delta: float) -> str:
        return (now + timedelta(seconds=delta)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def task(**lease: Any) -> dict[str, Any]:
        return {"status": {"lease": lease}}

    live = task(holder="a", renewTime=stamp(-10), durationSeconds=30)
    assert remaining(live, now) == pytest.approx(20.0)
    assert held_elsewhere(live, "b", now) == pytest.approx(20.0)
    assert held_elsewhere(live, "a", now) == 0.0  # our own
    assert remaining(task(holder="a", renewTime=stamp(-31), durationSeconds=30), now) == 0.0
    released = task(holder="a", renewTime=stamp(-1), durationSeconds=0)
    assert held_elsewhere(released, "b", now) == 0.0
    # Hostile or missing values never read as a live lease.
    for broken in (
        task(holder="a", renewTime="yesterday", durationSeconds=30),
        task(holder="a", renewTime=stamp(-1), durationSeconds="forever"),
        task(holder="a", durationSeconds=30),
        {"status": {"lease": "x"}},
        {"status": {}},
        {},
    ):
        assert held_elsewhere(broken, "b", now) == 0.0


TASK_WITH_ID = {**TASK, "metadata": {**TASK["metadata"], "resourceVersion": "7"}}


def claimed(execution_id: str = "e1", **lease: Any) -> dict[str, Any]:
    return {
        **TASK_WITH_ID,
        "status": {
            "phase": "Running",
            "executionId": execution_id,
            **({"lease": lease} if lease else {}),
        },
    }


async def test_the_holder_trusts_its_lease_only_until_its_own_deadline() -> None:
    now = [1000.0]
    api = Recorder(httpx.Response(200, json=claimed()))
    lease = ExecutionLease(
        client_for(api), TASK, "me", 30.0, "e1", safety_margin=6.0, clock=lambda: now[0]
    )
    assert not lease.valid()  # nothing acquired yet
    with pytest.raises(LeaseLost):
        lease.check()
    assert await lease.acquire()
    # A conditional status write of the lease, on the resourceVersion read.
    sent = json.loads(api.requests[1].content)
    assert sent["metadata"]["resourceVersion"] == "7"
    assert sent["status"]["lease"]["holder"] == "me"
    assert sent["status"]["lease"]["durationSeconds"] == 30
    assert api.requests[1].url.path.endswith("/status")
    assert lease.valid() and lease.expires_in() == 24.0
    lease.check()
    now[0] += 23.9
    assert lease.valid()
    now[0] += 0.2
    assert not lease.valid()
    with pytest.raises(LeaseLost) as lost:
        lease.check()
    assert lost.value.reason == "Interrupted"


async def test_a_pod_does_not_take_a_live_lease_or_another_executions_task() -> None:
    from datetime import UTC as utc

    fresh = datetime.now(utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    held = claimed(holder="operator-1", renewTime=fresh, durationSeconds=30)
    lease = ExecutionLease(
        client_for(Recorder(httpx.Response(200, json=held))), TASK, "pod", 30.0, "e1"
    )
    assert not await lease.acquire()
    other = claimed("e2")
    lease = ExecutionLease(
        client_for(Recorder(httpx.Response(200, json=other))), TASK, "pod", 30.0, "e1"
    )
    assert not await lease.acquire()
    released = claimed(holder="operator-1", renewTime=fresh, durationSeconds=0)
    api = Recorder(
        httpx.Response(200, json=released),
        status(409, "Conflict"),  # the Task changed since the read: read and try again
        httpx.Response(200, json=released),
        httpx.Response(200, json=released),
    )
    lease = ExecutionLease(client_for(api), TASK, "pod", 30.0, "e1")
    assert await lease.acquire()
    assert [r.method for r in api.requests] == ["GET", "PATCH", "GET", "PATCH"]


async def test_the_renewer_calls_lost_when_the_lease_expires_without_a_renewal() -> None:
    api = Recorder(
        httpx.Response(200, json=claimed()),
        httpx.Response(200, json=claimed()),
        status(503, "ServiceUnavailable"),
    )
    lease = ExecutionLease(client_for(api), TASK, "me", 0.6, "e1")
    assert await lease.acquire()
    calls: list[int] = []
    await lease.keep(lambda: calls.append(1))  # returns once lost
    assert calls == [1] and not lease.valid()
    assert lease.failures >= 2 and lease.renewals == 0


async def test_renewals_and_the_release_are_fenced_by_execution_and_holder() -> None:
    api = Recorder(
        httpx.Response(200, json=claimed()),
        httpx.Response(200, json=claimed()),  # acquired
        httpx.Response(200, json=claimed()),  # renewed
        status(422, "Invalid"),  # a failed test: another execution or holder
        httpx.Response(200, json=claimed()),
    )
    lease = ExecutionLease(client_for(api), TASK, "me", 30.0, "e1")
    assert await lease.acquire()
    assert await lease.renew() is True
    ops = json.loads(api.requests[2].content)
    assert ops[:2] == [
        {"op": "test", "path": "/status/executionId", "value": "e1"},
        {"op": "test", "path": "/status/lease/holder", "value": "me"},
    ]
    assert {op["path"] for op in ops[2:]} == {
        "/status/lease/renewTime",
        "/status/lease/durationSeconds",
    }
    assert api.requests[2].headers["content-type"] == "application/json-patch+json"
    assert await lease.renew() is False  # now another holder is seen
    await lease.release()
    release = json.loads(api.requests[4].content)
    assert release[:2] == ops[:2]
    assert release[2:] == [{"op": "add", "path": "/status/lease/durationSeconds", "value": 0}]
    assert not lease.valid()


async def test_a_release_after_the_terminal_write_sends_nothing() -> None:
    api = Recorder(httpx.Response(200, json=claimed()))
    lease = ExecutionLease(client_for(api), TASK, "me", 30.0, "e1")
    assert await lease.acquire()
    await lease.release(write=False)
    await lease.release()  # released already: nothing to write
    assert len(api.requests) == 2 and not lease.valid()


# -- the kube client's errors and retries ----------------------------------------------------


@pytest.mark.parametrize(
    ("code", "transient"),
    [
        *[(code, True) for code in (0, 429, 500, 503, 504)],
        *[(code, False) for code in (400, 401, 403, 404, 409, 422)],
    ],
)
def test_transient_classification(code: int, transient: bool) -> None:
    error = ApiError(code, "R", "m")
    assert error.transient is transient
    assert isinstance(error, OrdoError) and error.reason == "InternalError"


def test_fenced_is_a_lease_loss_and_not_an_api_error() -> None:
    fenced = Fenced("Task", "t1")
    assert isinstance(fenced, LeaseLost) and not isinstance(fenced, ApiError)
    assert fenced.reason == "Interrupted"


async def test_a_transport_failure_of_a_read_is_retried_then_named_by_type_only() -> None:
    api = Recorder(httpx.ReadError("reset while reading secret-token-xyz"))
    client = client_for(api)
    with pytest.raises(ApiError) as failed:
        await client.get("Task", "ns", "t1")
    assert len(api.requests) == RETRY_ATTEMPTS and client.requests == {"get": 1}
    err = failed.value
    assert (err.status, err.api_reason, err.transient) == (0, "TransportError", True)
    assert str(err) == "0 TransportError: ReadError"


async def test_a_read_recovers_after_transient_answers() -> None:
    api = Recorder(
        httpx.ReadTimeout("slow"), status(500), status(429), httpx.Response(200, json={"a": 1})
    )
    assert await client_for(api).get("Task", "ns", "t1") == {"a": 1}
    assert len(api.requests) == 4


async def test_a_conditional_write_is_not_retried_after_it_may_have_been_applied() -> None:
    for failure in (httpx.ReadError("x"), status(500), httpx.WriteTimeout("x")):
        api = Recorder(failure, httpx.Response(200, json={}))
        with pytest.raises(ApiError) as failed:
            await client_for(api).replace(
                "Lease", "ns", "l", {"metadata": {"resourceVersion": "7"}}
            )
        assert failed.value.transient and len(api.requests) == 1
    api = Recorder(status(500), httpx.Response(201, json={}))
    with pytest.raises(ApiError):
        await client_for(api).create("ConfigMap", "ns", {"metadata": {"name": "c"}})
    assert len(api.requests) == 1


async def test_a_write_that_certainly_was_not_applied_is_retried() -> None:
    api = Recorder(
        httpx.ConnectError("refused"), status(429), httpx.Response(201, json={"ok": True})
    )
    assert await client_for(api).create("ConfigMap", "ns", {"metadata": {}}) == {"ok": True}
    assert len(api.requests) == 3


async def test_idempotent_writes_are_retried() -> None:
    api = Recorder(httpx.ReadError("x"), status(503), httpx.Response(200, json={"ok": 1}))
    assert await client_for(api).patch("Task", "ns", "t", {"status": {}}, status=True) == {"ok": 1}
    assert len(api.requests) == 3
    api = Recorder(httpx.ReadError("x"), httpx.Response(200, json={}))
    await client_for(api).replace("ConfigMap", "ns", "c", {"metadata": {"name": "c"}})
    assert len(api.requests) == 2


async def test_a_client_error_is_not_retried_and_not_transient() -> None:
    api = Recorder(status(403, "Forbidden"))
    with pytest.raises(ApiError) as failed:
        await client_for(api).get("Secret", "ns", "s")
    assert len(api.requests) == 1 and not failed.value.transient
    assert failed.value.api_reason == "Forbidden"


async def test_an_invalid_answer_names_fields_not_values() -> None:
    causes = [{"field": "status.output", "reason": "FieldValueInvalid", "message": "sk-secret"}]
    api = Recorder(status(422, "Invalid", causes=causes))
    with pytest.raises(ApiError) as failed:
        await client_for(api).patch("Task", "ns", "t", {"status": {}}, status=True)
    assert "sk-secret" not in str(failed.value)
    assert "status.output: FieldValueInvalid" in str(failed.value)


async def test_a_non_json_success_is_an_api_error() -> None:
    api = Recorder(httpx.Response(200, content=b"<html>proxy</html>"))
    with pytest.raises(ApiError) as failed:
        await client_for(api).get("Task", "ns", "t")
    assert failed.value.api_reason == "InvalidResponse"


def test_only_a_causeless_invalid_is_a_failed_test() -> None:
    assert patch_test_failed(ApiError(422, "Invalid", "m"), "/status/executionId")
    with_causes = ApiError(422, "Invalid", "m", causes=("status.step must be an integer",))
    assert not patch_test_failed(with_causes, "/status/executionId")
    named = ApiError(422, "Invalid", "m", causes=("testing value /status/executionId failed",))
    assert patch_test_failed(named, "/status/executionId")
    assert not patch_test_failed(ApiError(409, "Conflict", "m"), "/status/executionId")


async def test_patch_status_fenced_sends_a_test_then_adds() -> None:
    api = Recorder(httpx.Response(200, json={"status": {}}), status(422, "Invalid"))
    client = client_for(api)
    await client.patch_status_fenced("Task", "ns", "t", "e1", {"step": 2, "a/b~c": 1})
    request = api.requests[0]
    assert request.headers["content-type"] == "application/json-patch+json"
    assert request.url.path.endswith("/tasks/t/status")
    assert json.loads(request.content) == [
        {"op": "test", "path": "/status/executionId", "value": "e1"},
        {"op": "add", "path": "/status/step", "value": 2},
        {"op": "add", "path": "/status/a~1b~0c", "value": 1},
    ]
    with pytest.raises(Fenced):
        await client.patch_status_fenced("Task", "ns", "t", "e1", {"step": 3})
    with pytest.raises(ValueError):
        await client.patch_status_fenced("Task", "ns", "t", "e1", {"executionId": "e2"})


# -- checkpoints and ownership ---------------------------------------------------------------


def state_of(text: str) -> RunState:
    return RunState(items=[UserMessage("q"), AssistantMessage(text)], step=1)


SUBJECT = Subject("ns", "t", "uid-1")


def sealed(payload: bytes, seq: int = 1) -> dict[str, Any]:
    blob = sealing.current().seal(payload, SUBJECT, seq)
    return {"binaryData": {checkpoint.KEY: base64.b64encode(blob).decode()}}


def test_checkpoint_encoding_round_trips_and_refuses_the_old_unsealed_format() -> None:
    state = state_of("answer " * 1000)
    payload = checkpoint.encode(state)
    assert len(payload) < 1000 and payload == checkpoint.encode(state)  # deterministic
    decoded = checkpoint.decode(sealed(payload, 7), SUBJECT)
    assert decoded is not None and decoded[0] == 7 and decoded[1].to_dict() == state.to_dict()
    for legacy in (
        {"data": {"state.json": json.dumps(state.to_dict())}},
        {"binaryData": {"state.json.gz": base64.b64encode(payload).decode()}},
    ):
        with pytest.raises(CheckpointUntrusted) as refused:
            checkpoint.decode(legacy, SUBJECT)
        assert refused.value.reason == "CheckpointUntrusted"
    assert checkpoint.decode({"metadata": {}}, SUBJECT) is None  # a takeover marker


@pytest.mark.parametrize(
    "body",
    [
        sealed(b"not gzip"),
        sealed(gzip.compress(b"[1,2]")),
        sealed(gzip.compress(b"{")),
        sealed(gzip.compress(b" " * (MAX_STATE_BYTES + 1))),
    ],
    ids=["gzip", "shape", "json", "inflation-bomb"],
)
def test_an_undecodable_checkpoint_is_interrupted_never_a_fresh_start(body: dict[str, Any]) -> None:
    with pytest.raises(checkpoint.CheckpointUnreadable) as failed:
        checkpoint.decode(body, SUBJECT)
    assert isinstance(failed.value, Interrupted) and failed.value.reason == "Interrupted"


def test_checkpoint_too_large_names_sizes_only() -> None:
    error = checkpoint.CheckpointTooLarge(1_234_567, checkpoint.MAX_BYTES)
    assert isinstance(error, Interrupted) and error.reason == "Interrupted"
    assert (
        str(error) == "checkpoint of 1234567 bytes (compressed) exceeds the limit of 900000 bytes"
    )


def test_owner_reference_points_at_the_task_without_blocking_deletion() -> None:
    assert owner_reference(TASK) == {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Task",
        "name": "t1",
        "uid": "u-1",
        "controller": True,
        "blockOwnerDeletion": False,
    }
