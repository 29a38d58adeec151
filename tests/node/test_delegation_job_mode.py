"""Delegation in execution mode Job on a real node: a parent whose pod's run waits for a child
Task parks (its pod exits 0, the operator removes the Job and waits holding no slot), the
child runs in its own Job, and the parent resumes in a new Job from its checkpoint, with
`--max-concurrent-tasks 1`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.operator import OperatorProcess, events, get_json, tasks, wait_task
from tests.support.packaging import GROUP, helm_template

from ordo.runtime.delegation import PARENT_LABEL
from ordo_devcluster import NodeCluster


@pytest.fixture(scope="module")
def runner_image(node_cluster: NodeCluster) -> str:
    """The operator's image, built by tests/support/image.py and imported into the node."""
    from tests.support.image import ordo_image_archive

    names = node_cluster.import_image(ordo_image_archive())
    assert names, "the image archive holds no named image"
    return str(names[0])


def _apply(cluster: NodeCluster, namespace: str, docs: list[dict[str, Any]]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(docs))


def _obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture
def operator(
    node_cluster: NodeCluster, node_namespace: str, runner_image: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    """The chart's runner objects in the namespace (their Role may create the child Tasks),
    and the operator with one slot."""
    docs = helm_template(tmp_path, values={"watchNamespaces": [node_namespace]})
    runner = [
        d
        for d in docs
        if d["kind"] in ("ServiceAccount", "Role", "RoleBinding", "Secret")
        and d["metadata"]["labels"].get("app.kubernetes.io/component") == "task-runner"
    ]
    for doc in runner:
        doc["metadata"]["labels"] = {
            "app.kubernetes.io/component": "task-runner",
            "ordo.dev/test": "delegation-job-mode",
        }
    _apply(node_cluster, node_namespace, runner)
    api = node_cluster.apiserver_env()
    op = OperatorProcess(
        node_cluster,
        node_namespace,
        tmp_path,
        "--max-concurrent-tasks",
        "1",
        "--lease-seconds",
        "5",
        "--job-image",
        runner_image,
        "--job-image-pull-policy",
        "Never",
        "--job-env",
        f"KUBERNETES_SERVICE_HOST={api['KUBERNETES_SERVICE_HOST']}",
        "--job-env",
        f"KUBERNETES_SERVICE_PORT={api['KUBERNETES_SERVICE_PORT']}",
    ).start()
    try:
        yield op
    finally:
        op.stop()


def test_a_job_mode_parent_with_a_job_mode_child_completes_with_one_slot(
    node_cluster: NodeCluster, node_namespace: str, operator: OperatorProcess
) -> None:
    cluster, ns = node_cluster, node_namespace
    call = {"tool": "ask-helper", "arguments": {"input": "what is it"}}
    boss_turns = [{"toolCalls": [call]}, {"text": "the helper said 42"}]
    docs = [
        _obj("ModelEndpoint", "boss-model", {"provider": "mock", "mock": {"turns": boss_turns}}),
        _obj(
            "ModelEndpoint",
            "helper-model",
            {"provider": "mock", "mock": {"turns": [{"text": "42"}]}},
        ),
        _obj(
            "Tool",
            "ask-helper",
            {"type": "agent", "description": "ask", "agent": {"ref": "helper"}},
        ),
    ]
    for name, tools in (("boss", ["ask-helper"]), ("helper", [])):
        docs.append(
            _obj(
                "Agent",
                name,
                {
                    "modelRef": f"{name}-model",
                    "prompt": "Be brief.",
                    "tools": tools,
                    "limits": {"maxSteps": 4, "timeout": "5m"},
                    "execution": {"mode": "Job"},
                },
            )
        )
    docs.append(_obj("Task", "parent", {"agentRef": "boss", "input": "go"}))
    _apply(cluster, ns, docs)
    try:
        status = wait_task(cluster, ns, "parent", timeout=300)["status"]
    except AssertionError as exc:
        raise AssertionError(f"{exc}\noperator log: {operator.logs()[-4000:]}") from None
    assert (status["phase"], status.get("output")) == ("Succeeded", "the helper said 42"), status
    assert status["executionMode"] == "Job"
    children = [
        t
        for t in tasks(cluster, ns)
        if (t["metadata"].get("labels") or {}).get(PARENT_LABEL) == "parent"
    ]
    (child,) = children
    assert (child["status"]["phase"], child["status"]["executionMode"]) == ("Succeeded", "Job")
    (listed,) = status["children"]
    assert (listed["name"], listed["phase"]) == (child["metadata"]["name"], "Succeeded")
    reasons = [e["reason"] for e in events(cluster, ns, "parent")]
    assert "AwaitingChildren" in reasons and "ChildCreated" in reasons, reasons
    assert get_json(cluster, "task", "parent", "-n", ns)["status"]["phase"] == "Succeeded"
