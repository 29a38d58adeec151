"""Sealed checkpoints on a real API server (issue 26 part 2; operator/tasks/sealing.py).

Step 1 of each Task runs the non-idempotent `place-order`; step 2's model call hangs, so the
checkpoint written with the tool's result (before that call is sent) is what a new operator
would resume from. Then:
- a reader with ConfigMap `get` (what the built-in `view` role grants) sees no transcript;
- the checkpoint rewritten with kubectl as the cluster admin makes the resumed Task end
  `CheckpointUntrusted`, and `place-order` is not executed again;
- an unsealed checkpoint written by the ordo before this change (the upgrade path) ends the
  same way in the new operator.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.http_tool_server import HttpToolServer
from tests.support.oldordo import controller_at
from tests.support.openai_server import OpenAIServer
from tests.support.operator import (
    OperatorProcess,
    apply,
    effect_manifests,
    events,
    get_json,
    wait_for,
    wait_task,
)
from tests.support.packaging import container, helm_template, of_kind, one

from ordo.operator.tasks import sealing
from ordo_devcluster import ControlPlane

pytestmark = pytest.mark.cluster

BEFORE_SEALED_CHECKPOINTS = "edd0031"
"""The last commit whose operator wrote checkpoints unsealed (the upgrade's `from`)."""
LEASE_SECONDS = 3.0
CANARY = "canary-9d41-transcript"
ORDER = {"task": "order", "call": "order/place-order"}
SCRIPT = [
    {"tool_calls": [{"name": "place-order", "arguments": ORDER, "id": "call_1"}]},
    {"delay": 120.0, "text": "never sent: the operator is killed first"},
]


def order_task() -> str:
    return json.dumps(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Task",
            "metadata": {"name": "order"},
            "spec": {"agentRef": "agent", "input": f"task=order {CANARY}"},
        }
    )


def checkpoint_of(cp: ControlPlane, ns: str) -> dict[str, Any]:
    uid = get_json(cp, "task", "order", "-n", ns)["metadata"]["uid"]
    return get_json(cp, "configmap", f"ordo-checkpoint-{uid}", "-n", ns)


def run_until_the_hanging_call(
    cp: ControlPlane, ns: str, op: OperatorProcess, tools: HttpToolServer, model: OpenAIServer
) -> None:
    """Start the Task; return once step 2's model call arrived (the result's checkpoint was
    acknowledged before it was sent: coalesce.py) and the operator is SIGKILLed."""
    apply(cp, ns, effect_manifests(model.url, tools.url, tool_delay=0, timeout="300s"))
    apply(cp, ns, order_task())
    wait_for(lambda: model.count >= 2, 60, interval=0.01, what="step 2's model call")
    op.kill()
    assert tools.effects_snapshot() == {("order", "order/place-order"): 1}


def assert_ended_untrusted(
    cp: ControlPlane,
    ns: str,
    op: OperatorProcess,
    tools: HttpToolServer,
    model: OpenAIServer,
    effects: tuple[str, ...] = ("order/place-order",),
) -> dict[str, Any]:
    calls = model.count
    status: dict[str, Any] = wait_task(cp, ns, "order", timeout=90)["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "CheckpointUntrusted"), status
    assert CANARY not in json.dumps(status)
    assert tools.effects_snapshot() == {("order", e): 1 for e in effects}  # none again
    assert model.count == calls  # nothing resumed: no model call either
    # The Task's terminal Event and the counter name the reason, never the content.
    posted = [e for e in events(cp, ns, "order") if e["reason"] == "Failed"]
    assert [e["message"].split(":")[0] for e in posted] == ["CheckpointUntrusted"]
    assert all(CANARY not in e["message"] for e in events(cp, ns))
    assert 'reason="CheckpointUntrusted"' in op.metrics() and CANARY not in op.metrics()
    return status


@pytest.fixture
def operator(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[Any]:
    started: list[OperatorProcess] = []

    def start(**kwargs: Any) -> OperatorProcess:
        op = OperatorProcess(
            control_plane, namespace, tmp_path, f"--lease-seconds={LEASE_SECONDS:g}", **kwargs
        )
        started.append(op)
        return op.start()

    yield start
    for op in started:
        if op.alive:
            op.stop()


def test_a_rewritten_checkpoint_is_refused_and_the_side_effect_not_repeated(
    control_plane: ControlPlane, namespace: str, operator: Any, tmp_path: Path
) -> None:
    cp, ns = control_plane, namespace
    with HttpToolServer() as tools, OpenAIServer(SCRIPT) as model:
        op = operator()
        run_until_the_hanging_call(cp, ns, op, tools, model)
        sealed = checkpoint_of(cp, ns)
        blob = base64.b64decode(sealed["binaryData"]["state.sealed"])
        assert blob.startswith(b"ordo-ckpt\x01")

        # A reader with what `view` grants on ConfigMaps (no kube-controller-manager here to
        # aggregate the built-in role, so its ConfigMap rule is written out) sees ciphertext.
        cp.kubectl(
            "create",
            "role",
            "cm-viewer",
            "--verb=get,list,watch",
            "--resource=configmaps",
            "-n",
            ns,
        )
        cp.kubectl(
            "create", "rolebinding", "cm-viewer", "--role=cm-viewer",
            f"--serviceaccount={ns}:viewer", "-n", ns,
        )  # fmt: skip
        viewer = cp.service_account_kubeconfig(ns, "viewer", path=tmp_path / "viewer.kubeconfig")
        seen = cp.kubectl("get", "configmaps", "-n", ns, "-o", "json", kubeconfig=viewer).stdout
        assert "ordo-checkpoint-" in seen and CANARY not in seen
        for item in json.loads(seen)["items"]:
            for value in (item.get("binaryData") or {}).values():
                assert CANARY.encode() not in base64.b64decode(value)

        # The admin changes one byte of the ciphertext while no operator runs.
        changed = bytearray(blob)
        changed[-5] ^= 0x01
        patch = {"binaryData": {"state.sealed": base64.b64encode(bytes(changed)).decode()}}
        cp.kubectl(
            "patch", "configmap", sealed["metadata"]["name"], "-n", ns,
            "--type=merge", "-p", json.dumps(patch),
        )  # fmt: skip
        model.set_script([{"text": "must not be asked"}] * 3)
        op.start()
        status = assert_ended_untrusted(cp, ns, op, tools, model)
        assert "does not verify" in status["message"]


def test_an_older_copy_put_back_is_refused_and_the_later_side_effect_not_repeated(
    control_plane: ControlPlane, namespace: str, operator: Any
) -> None:
    """Rollback: the admin keeps the (valid) checkpoint written with place-order's result and
    puts it back after send-invoice ran. Resumed from it, the model would be asked again and
    send the invoice twice; the status's anchor (written before send-invoice started) refuses
    it."""
    cp, ns = control_plane, namespace
    invoice = {"task": "order", "call": "order/send-invoice"}
    script = [
        SCRIPT[0],
        # A window to copy the checkpoint that holds place-order's result.
        {"delay": 4.0, "tool_calls": [{"name": "send-invoice", "arguments": invoice, "id": "c2"}]},
        {"delay": 120.0, "text": "never sent: the operator is killed first"},
    ]
    with HttpToolServer() as tools, OpenAIServer(script) as model:
        op = operator()
        apply(cp, ns, effect_manifests(model.url, tools.url, tool_delay=0, timeout="300s"))
        apply(cp, ns, order_task())
        wait_for(lambda: model.count >= 2, 60, interval=0.01, what="step 2's model call")
        older = checkpoint_of(cp, ns)
        wait_for(lambda: model.count >= 3, 60, interval=0.01, what="step 3's model call")
        op.kill()
        anchored = get_json(cp, "task", "order", "-n", ns)["status"]["checkpointSequence"]
        newer = checkpoint_of(cp, ns)
        assert newer["binaryData"] != older["binaryData"] and anchored >= 3
        patch = {"binaryData": older["binaryData"]}
        cp.kubectl(
            "patch", "configmap", older["metadata"]["name"], "-n", ns,
            "--type=merge", "-p", json.dumps(patch),
        )  # fmt: skip
        model.set_script([script[1], {"text": "must not be asked"}])
        op.start()
        status = assert_ended_untrusted(
            cp, ns, op, tools, model, ("order/place-order", "order/send-invoice")
        )
        assert "earlier copy was restored" in status["message"]


@pytest.fixture(scope="module")
def unsealed_controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The `controller/` of the ordo before sealed checkpoints, from git."""
    yield controller_at(BEFORE_SEALED_CHECKPOINTS, tmp_path_factory.mktemp("unsealed-ordo"))


def test_an_unsealed_checkpoint_from_before_the_upgrade_is_refused(
    control_plane: ControlPlane, namespace: str, operator: Any, unsealed_controller: Path
) -> None:
    cp, ns = control_plane, namespace
    with HttpToolServer() as tools, OpenAIServer(SCRIPT) as model:
        old = operator(
            env={**os.environ, "PYTHONPATH": str(unsealed_controller)}, checkpoint_key=False
        )
        run_until_the_hanging_call(cp, ns, old, tools, model)
        plain = checkpoint_of(cp, ns)
        assert "state.json.gz" in plain["binaryData"]  # the old format, readable by `view`
        model.set_script([{"text": "must not be asked"}] * 3)
        new = operator()  # the new ordo, with a keyring
        status = assert_ended_untrusted(cp, ns, new, tools, model)
        assert "unsealed" in status["message"]


# -- the chart: the key Secret it creates is the one it mounts -------------------------------


def keyring_of(secret: dict[str, Any]) -> bytes:
    text = base64.b64decode(secret["data"]["keyring"]).decode()
    sealing.parse(text, "the chart's Secret")  # a valid keyring: one 32-byte key
    return text.encode()


def test_the_chart_mounts_the_key_secret_it_creates(tmp_path: Path) -> None:
    docs = helm_template(tmp_path, namespace="ordo-system")
    (secret,) = [d for d in of_kind(docs, "Secret") if d["metadata"]["name"].endswith("-key")]
    assert secret["metadata"]["namespace"] == "ordo-system"
    deployment = one(docs, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "checkpoint-key"]
    assert volume["secret"]["secretName"] == secret["metadata"]["name"]
    (mount,) = [m for m in container(deployment)["volumeMounts"] if m["name"] == "checkpoint-key"]
    assert mount["readOnly"] is True
    flag = f"--checkpoint-key-file={mount['mountPath']}/keyring"
    assert flag in container(deployment)["args"]
    # Without a cluster to look the Secret up in, each render makes a new key: why GitOps
    # renderers must name a Secret of their own (docs/operations.md#checkpoint-keys).
    again = helm_template(tmp_path, namespace="ordo-system")
    (other,) = [d for d in of_kind(again, "Secret") if d["metadata"]["name"].endswith("-key")]
    assert keyring_of(other) != keyring_of(secret)

    named = helm_template(
        tmp_path, namespace="ordo-system", values={"checkpoints": {"keySecret": {"name": "mine"}}}
    )
    assert not [d for d in of_kind(named, "Secret") if d["metadata"]["name"].endswith("-key")]
    named_pod = one(named, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "checkpoint-key", "secret": {"secretName": "mine", "defaultMode": 0o440}} in (
        named_pod["volumes"]
    )


def test_the_chart_gives_each_runner_namespace_a_key_of_its_own(tmp_path: Path) -> None:
    values = {
        "watchNamespaces": ["team-a", "team-b"],
        "jobs": {"createRunnerServiceAccounts": True},
    }
    docs = helm_template(tmp_path, namespace="ordo-system", values=values)
    runner = {
        d["metadata"]["namespace"]: keyring_of(d)
        for d in of_kind(docs, "Secret")
        if d["metadata"]["name"] == "ordo-runner-checkpoint-key"
    }
    operator_key = [
        d for d in of_kind(docs, "Secret") if d["metadata"]["name"] == "ordo-checkpoint-key"
    ]
    assert sorted(runner) == ["team-a", "team-b"]
    assert len({*runner.values(), keyring_of(operator_key[0])}) == 3  # none shared
