"""TaskWebhook against the real control plane, with the operator and `ordo gateway` as
subprocesses (one of each for the module's one scenario, to keep the cluster suite lean):
the operator marks the webhook Ready; a signed GitHub-profile delivery creates one Task that
runs to Succeeded under the Agent's governance; a redelivery creates none (200, same name); a
bad signature (401) and an oversized body (413) create none; an HMAC delivery inside the
tolerance creates one and its replay none, one outside the tolerance none (401); a Task of a
delivery's name that the webhook does not own is not adopted (409, Event); Events, status and
the gateway's ordo_trigger_tasks_total. And with only the chart's gateway RBAC and its
requester admission policy: a TaskWebhook names its own creator as requester (nobody else),
and its deliveries' Tasks carry that name."""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.gatewayproc import GatewayProcess, install_chart_gateway
from tests.support.operator import (
    OperatorProcess,
    apply,
    doc,
    events,
    get_json,
    tasks,
    wait_for,
    wait_ready,
    wait_task,
)

from ordo.gateway.deliveries import header_key, task_name
from ordo.gateway.signatures import sign_github, sign_hmac
from ordo_devcluster import ControlPlane

SECRET = "cluster-webhook-secret"


@pytest.fixture
def gateway(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[GatewayProcess]:
    process = GatewayProcess(control_plane, namespace, tmp_path)
    yield process
    process.stop()


def setup(cp: ControlPlane, ns: str) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hook", "labels": {"ordo.dev/credential": "true"}},
        "data": {"secret": base64.b64encode(SECRET.encode()).decode()},
    }
    apply(cp, ns, json.dumps(secret))
    model = {"provider": "mock", "model": "m", "mock": {"turns": [{"text": "triaged"}]}}
    apply(cp, ns, doc("ModelEndpoint", "model", model))
    apply(cp, ns, doc("Agent", "triager", {"modelRef": "model", "limits": {"maxSteps": 2}}))
    template = {"metadata": {"labels": {"team": "triage"}}, "spec": {"agentRef": "triager"}}
    auth = {"secretRef": {"name": "hook", "key": "secret"}}
    github = {
        "auth": {"profile": "GitHub", **auth},
        "payload": {"fields": {"title": "/issue/title"}},
        "maxBodyBytes": 2048,
        "taskTemplate": template,
    }
    apply(cp, ns, doc("TaskWebhook", "issues", github))
    hmac = {"auth": {"profile": "HMAC", **auth}, "tolerance": "1m", "taskTemplate": template}
    apply(cp, ns, doc("TaskWebhook", "signed", hmac))


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def test_deliveries_create_exactly_one_task_each(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess, gateway: GatewayProcess
) -> None:
    cp, ns = control_plane, namespace
    setup(cp, ns)
    ready = wait_ready(cp, ns, "taskwebhook", "issues", "True")
    assert ready["reason"] == "Configured"
    url = f"{gateway.url}/hooks/{ns}/issues"
    body = json.dumps({"action": "opened", "issue": {"title": "Crash on start"}}).encode()
    signed = {"X-Hub-Signature-256": sign_github(SECRET, body), "X-GitHub-Delivery": "d-1"}

    status, answer = post(url, body, signed)
    assert status == 202, answer
    name = answer["task"]
    done = wait_task(cp, ns, name, timeout=60)
    assert done["status"]["phase"] == "Succeeded" and done["status"]["output"] == "triaged"
    assert done["spec"]["input"] == {"title": "Crash on start"}
    labels = done["metadata"]["labels"]
    assert (
        labels["ordo.dev/trigger-kind"] == "TaskWebhook" and labels["ordo.dev/trigger"] == "issues"
    )
    assert labels["team"] == "triage"
    (owner,) = done["metadata"]["ownerReferences"]
    hook = get_json(cp, "taskwebhook", "issues", "-n", ns)
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "TaskWebhook",
        hook["metadata"]["uid"],
        True,
    )

    # Redelivery: the same Task, nothing new. Refusals: nothing.
    assert post(url, body, signed) == (200, {"task": name})
    bad = {**signed, "X-Hub-Signature-256": sign_github("wrong", body), "X-GitHub-Delivery": "d-2"}
    assert post(url, body, bad)[0] == 401
    big = json.dumps({"issue": {"title": "x" * 4096}}).encode()
    big_signed = {"X-Hub-Signature-256": sign_github(SECRET, big), "X-GitHub-Delivery": "d-3"}
    assert post(url, big, big_signed)[0] == 413
    assert [t["metadata"]["name"] for t in tasks(cp, ns)] == [name]

    # HMAC: inside the tolerance once (its replay finds it), outside never.
    signed_url = f"{gateway.url}/hooks/{ns}/signed"
    now = int(time.time())
    fresh = {"Ordo-Signature": sign_hmac(SECRET, now, body)}
    status, answer = post(signed_url, body, fresh)
    assert status == 202
    assert post(signed_url, body, fresh) == (200, answer)
    stale = {"Ordo-Signature": sign_hmac(SECRET, now - 600, body)}
    assert post(signed_url, body, stale)[0] == 401
    assert len(tasks(cp, ns)) == 2

    # A Task already named as a delivery's would be, not the webhook's: never adopted.
    taken = task_name(hook, header_key("d-9"))
    task = {"apiVersion": "ordo.dev/v1alpha1", "kind": "Task", "metadata": {"name": taken}}
    apply(cp, ns, json.dumps({**task, "spec": {"agentRef": "triager", "input": "mine"}}))
    again = {"X-Hub-Signature-256": sign_github(SECRET, body), "X-GitHub-Delivery": "d-9"}
    assert post(url, body, again)[0] == 409
    mine = get_json(cp, "task", taken, "-n", ns)
    assert not mine["metadata"].get("ownerReferences") and mine["spec"]["input"] == "mine"

    reasons = wait_for(
        lambda: (
            (r := [e["reason"] for e in events(cp, ns, "issues")]) and "DeliveryConflict" in r and r
        ),
        timeout=10,
        what="the webhook's Events",
    )
    assert reasons.count("Delivered") == 1 and reasons.count("DeliveryRefused") == 1  # one a minute
    status_now = get_json(cp, "taskwebhook", "issues", "-n", ns)["status"]
    assert status_now["lastTask"] == name and status_now["lastDeliveryTime"]
    assert status_now["tasksCreated"] == 1
    line = 'ordo_trigger_tasks_total{kind="TaskWebhook",outcome="%s"}'
    assert gateway.metric(line % "created") == 2
    assert gateway.metric(line % "duplicate") == 2
    assert gateway.metric(line % "refused") == 2
    assert gateway.metric(line % "too_large") == 1
    assert gateway.metric(line % "failed") == 1
    log = Path(gateway.log_path).read_text()
    assert SECRET not in log and "Crash on start" not in log


def test_the_chart_rbac_suffices_and_the_requester_is_the_webhooks_creator(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp, ns = control_plane, namespace
    setup(cp, ns)
    account = install_chart_gateway(cp, ns, tmp_path)
    cp.kubectl("create", "serviceaccount", "alice", "-n", ns)
    cp.kubectl(
        "create", "role", "hooks", "-n", ns, "--verb=create,get", "--resource=taskwebhooks.ordo.dev"
    )
    cp.kubectl(
        "create", "rolebinding", "hooks", "-n", ns, "--role=hooks", f"--serviceaccount={ns}:alice"
    )
    alice = f"system:serviceaccount:{ns}:alice"
    as_alice = cp.service_account_kubeconfig(ns, "alice")
    base = get_json(cp, "taskwebhook", "issues", "-n", ns)
    spec = base["spec"]
    attempts = iter(range(1000))

    def create(requester: str) -> Any:
        name = f"hook-{next(attempts)}"
        meta = {"name": name, "annotations": {"ordo.dev/requested-by": requester}}
        body = {"apiVersion": "ordo.dev/v1alpha1", "kind": "TaskWebhook", "metadata": meta}
        result = cp.kubectl(
            "create",
            "-n",
            ns,
            "-f",
            "-",
            input=json.dumps({**body, "spec": spec}),
            kubeconfig=as_alice,
            check=False,
        )
        return name, result

    # The policy loads asynchronously: a fresh name per attempt until it refuses.
    wait_for(
        lambda: "must be your user name" in create("someone-else")[1].stderr,
        120,
        what="the requester policy to take effect",
    )
    name, result = create(alice)
    assert result.returncode == 0, result.stderr

    process = GatewayProcess(cp, ns, tmp_path, cp.service_account_kubeconfig(ns, account))
    try:
        body = b'{"issue": {"title": "t"}}'
        signed = {"X-Hub-Signature-256": sign_github(SECRET, body), "X-GitHub-Delivery": "d-1"}
        status, answer = post(f"{process.url}/hooks/{ns}/{name}", body, signed)
    finally:
        process.stop()
    assert status == 202, answer
    created = get_json(cp, "task", answer["task"], "-n", ns)
    assert created["metadata"]["annotations"]["ordo.dev/requested-by"] == alice
    # The gateway's own writes passed its RBAC: the status and the Event.
    assert get_json(cp, "taskwebhook", name, "-n", ns)["status"]["lastTask"] == answer["task"]
    assert [e["reason"] for e in events(cp, ns, name)] == ["Delivered"]
