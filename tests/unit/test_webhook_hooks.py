"""`POST /hooks/{namespace}/{name}` (gateway/hooks.py) against a fake API server (httpx
transport): one Task per signed delivery, owned and labelled; a redelivery finds it (200); a
bad signature, an oversized or too deep body, a missing pointer, a webhook over its rate, a
Secret not opted in, a suspended webhook create nothing; a Task of the delivery's name that
the webhook does not own is not adopted (409, Event). The Secret and the body never reach
logs, Events or metrics (canary)."""

from __future__ import annotations

import copy
import json
import logging
import time

import httpx
import pytest
from prometheus_client import generate_latest
from tests.support.webhooks import CANARY, SECRET, UID, Api, gateway, webhook

from ordo.api.triggers import TRIGGER_KIND_LABEL, TRIGGER_NAME_LABEL
from ordo.gateway.app import Gateway
from ordo.gateway.signatures import sign_github, sign_hmac


async def deliver(
    gw: Gateway, body: bytes, headers: dict[str, str], path: str = "/hooks/ns/issues"
) -> httpx.Response:
    transport = httpx.ASGITransport(app=gw.app(), client=("10.0.0.1", 4000))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        return await http.post(path, content=body, headers=headers)


def github(body: bytes, delivery: str = "d-1", key: str = SECRET) -> dict[str, str]:
    return {"X-Hub-Signature-256": sign_github(key, body), "X-GitHub-Delivery": delivery}


def outcome(gw: Gateway, name: str) -> float:
    labels = {"kind": "TaskWebhook", "outcome": name}
    return gw.metrics.registry.get_sample_value("ordo_trigger_tasks_total", labels) or 0.0


BODY = json.dumps({"action": "opened", "issue": {"title": CANARY}}).encode()


async def test_a_signed_delivery_creates_one_owned_labelled_task_and_a_redelivery_finds_it() -> (
    None
):
    api = Api(webhook(payload={"fields": {"title": "/issue/title"}}))
    gw = gateway(api)
    first = await deliver(gw, BODY, github(BODY))
    assert first.status_code == 202
    (name,) = api.tasks
    assert first.json() == {"task": name}
    task = api.tasks[name]
    meta = task["metadata"]
    assert meta["labels"] == {
        "team": "triage",
        TRIGGER_KIND_LABEL: "TaskWebhook",
        TRIGGER_NAME_LABEL: "issues",
    }
    assert (
        meta["annotations"]["ordo.dev/requested-by"] == "alice"
    )  # the webhook's, not the template's
    assert meta["annotations"]["note"] == "n"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "TaskWebhook",
            "name": "issues",
            "uid": UID,
            "controller": True,
        }
    ]
    assert task["spec"] == {"agentRef": "triager", "input": {"title": CANARY}}
    # GitHub's redelivery: same delivery id, the same Task.
    again = await deliver(gw, BODY, github(BODY))
    assert (again.status_code, again.json()) == (200, {"task": name})
    assert len(api.tasks) == 1
    # Another delivery id: another Task.
    assert (await deliver(gw, BODY, github(BODY, "d-2"))).status_code == 202
    assert len(api.tasks) == 2
    assert (outcome(gw, "created"), outcome(gw, "duplicate")) == (2, 1)
    assert [e["reason"] for e in api.events] == ["Delivered", "Delivered"]
    assert api.status[-1]["status"]["lastTask"] in api.tasks
    assert api.hook["status"]["tasksCreated"] == 2  # the redelivery is not counted


async def test_the_count_survives_another_replicas_write() -> None:
    api = Api(webhook())
    gw = gateway(api)
    assert (await deliver(gw, BODY, github(BODY, "d-1"))).status_code == 202
    # Another replica counted meanwhile: this gateway's next read is stale, its write
    # conflicts, it reads again and counts on top.
    stale = copy.deepcopy(api.hook)
    api.hook["status"]["tasksCreated"] = 5
    api.hook["metadata"]["resourceVersion"] = "9"
    served = api.hook
    reads = iter([stale])
    api.read = lambda: next(reads, served)
    assert (await deliver(gw, BODY, github(BODY, "d-2"))).status_code == 202
    assert api.hook["status"]["tasksCreated"] == 6


async def test_refusals_create_nothing() -> None:
    api = Api(webhook(maxBodyBytes=1024, maxDepth=3, payload={"fields": {"t": "/missing"}}))
    gw = gateway(api)
    assert (await deliver(gw, BODY, github(BODY, key="wrong"))).status_code == 401
    assert (await deliver(gw, BODY, {"X-GitHub-Delivery": "d"})).status_code == 401
    big = json.dumps({"x": "y" * 2000}).encode()
    assert (await deliver(gw, big, github(big))).status_code == 413
    deep = b'{"a":[[[1]]]}'
    assert (await deliver(gw, deep, github(deep))).status_code == 413
    assert (await deliver(gw, BODY, github(BODY))).status_code == 400  # /missing
    long_id = github(BODY, "x" * 201)
    assert (await deliver(gw, BODY, long_id)).status_code == 400
    assert (await deliver(gw, BODY, github(BODY), "/hooks/other/issues")).status_code == 404
    assert api.tasks == {}
    assert outcome(gw, "refused") == 2 and outcome(gw, "too_large") == 2
    assert outcome(gw, "invalid") == 2
    # One Event for the first refusal: anyone can be refused, and Events are etcd objects.
    assert [e["reason"] for e in api.events] == ["DeliveryRefused"]
    assert api.events[0]["message"].startswith("refused (401); further refusals within 60s")


async def test_a_secret_not_opted_in_reads_as_missing() -> None:
    api = Api(webhook(), opted_in=False)
    gw = gateway(api)
    assert (await deliver(gw, BODY, github(BODY))).status_code == 503
    assert api.tasks == {}


async def test_suspended_and_rate_limited_webhooks() -> None:
    api = Api(webhook(suspend=True))
    gw = gateway(api)
    assert (await deliver(gw, BODY, github(BODY))).status_code == 503
    assert outcome(gw, "skipped") == 1
    api.hook = webhook(rateLimit={"requestsPerSecond": 0.001, "burst": 2})
    codes = [(await deliver(gw, BODY, github(BODY, f"d-{i}"))).status_code for i in range(3)]
    assert codes == [202, 202, 429]
    assert outcome(gw, "rate_limited") == 1


async def test_a_task_of_that_name_not_owned_is_not_adopted() -> None:
    api = Api(webhook())
    gw = gateway(api)
    assert (await deliver(gw, BODY, github(BODY))).status_code == 202
    (name,) = api.tasks
    api.tasks[name]["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    assert (await deliver(gw, BODY, github(BODY))).status_code == 409
    assert api.events[-1]["reason"] == "DeliveryConflict"
    assert outcome(gw, "failed") == 1


async def test_a_task_the_api_server_refuses_is_reported_every_time() -> None:
    api = Api(webhook())
    api.refuse_tasks = 403
    gw = gateway(api)
    codes = [(await deliver(gw, BODY, github(BODY, f"d-{i}"))).status_code for i in range(2)]
    assert codes == [503, 503] and api.tasks == {}
    assert [e["reason"] for e in api.events] == ["DeliveryFailed"] * 2  # not throttled
    assert api.events[0]["message"].startswith("the API server refused Task issues-")
    assert api.events[0]["message"].endswith("(403)")
    assert outcome(gw, "failed") == 2


async def test_hmac_profile_dedupes_a_replay_inside_the_tolerance_and_refuses_one_outside() -> None:
    api = Api(webhook("HMAC", tolerance="1m"))
    gw = gateway(api)
    now = int(time.time())
    fresh = {"Ordo-Signature": sign_hmac(SECRET, now, BODY)}
    assert (await deliver(gw, BODY, fresh)).status_code == 202
    assert (await deliver(gw, BODY, fresh)).status_code == 200  # keyed by its signature
    stale = {"Ordo-Signature": sign_hmac(SECRET, now - 3600, BODY)}
    assert (await deliver(gw, BODY, stale)).status_code == 401
    assert len(api.tasks) == 1
    (task,) = api.tasks.values()
    assert task["spec"]["input"] == json.loads(BODY)  # no payload.fields: the whole body


async def test_the_secret_and_the_body_are_never_logged_evented_or_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    api = Api(webhook(maxBodyBytes=200))
    gw = gateway(api)
    headers = github(BODY, delivery=CANARY)
    await deliver(gw, BODY, headers)
    await deliver(gw, BODY, github(BODY, CANARY, key="wrong"))
    await deliver(gw, BODY + b" " * 300, headers)
    written = json.dumps([api.events, api.status]) + caplog.text
    written += generate_latest(gw.metrics.registry).decode()
    tasks = copy.deepcopy(api.tasks)
    for task in tasks.values():
        task["spec"].pop("input")  # the payload is the input, by design
    written += json.dumps(tasks)
    assert SECRET not in written and CANARY not in written
