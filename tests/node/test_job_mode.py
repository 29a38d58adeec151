"""Execution mode Job on a real node: the operator runs on the host (as tests/support/operator.py
starts it), creates one batch/v1 Job per Task, and the Task's pod runs `ordo run-task` from the
operator's image under the runner ServiceAccount that the chart creates in the namespace.

- a Job-mode Task succeeds, written by its pod; the Job is owned by the Task;
- a pod deleted mid-run is replaced and the replacement resumes from the checkpoint: each
  non-idempotent tool call (counted by the http tool server on the node IP) ran exactly once;
- a pod over its memory limit is OOMKilled and the Task ends `PodFailed` naming OOMKilled;
- a cancelled Task whose pod is inside a long model call ends `Cancelled` (the Job stopped);
- the runner ServiceAccount's `kubectl auth can-i` matrix: its namespace only, no Secret list;
- the start overhead of Job mode against InProcess (reported, never asserted beyond a bound).
"""

from __future__ import annotations

import json
import re
import statistics
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.http_tool_server import HttpToolServer
from tests.support.operator import OperatorProcess, events, get_json, wait_for, wait_task
from tests.support.packaging import GROUP, ORDO_RESOURCES, RUNNER_RULES, helm_template
from tests.support.threaded_server import serve_aiohttp

from ordo_devcluster import NodeCluster

LEASE_SECONDS = 5
REPORT = Path(__file__).resolve().parents[2] / "build" / "job-mode-overhead.json"


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runner_image(node_cluster: NodeCluster) -> str:
    """The operator's image, built by tests/support/image.py and imported into the node."""
    from tests.support.image import ordo_image_archive

    names = node_cluster.import_image(ordo_image_archive())
    assert names, "the image archive holds no named image"
    return str(names[0])


class NodeHttpToolServer(HttpToolServer):
    """The http tool server bound to the node IP, so a pod reaches it."""

    def __init__(self, host: str) -> None:
        super().__init__()
        self.host = host

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> NodeHttpToolServer:
        from aiohttp import web

        async def setup() -> Any:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handle)
            return await serve_aiohttp(app, host=self.host)

        self.port = self._thread.start(setup)
        return self


def _apply(cluster: NodeCluster, namespace: str, docs: list[dict[str, Any]]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(docs))


def _install_runner(cluster: NodeCluster, namespace: str, tmp: Path) -> None:
    """The chart's runner ServiceAccount, Role, RoleBinding and checkpoint keyring Secret for
    this namespace (without the keyring a replacement pod cannot open its predecessor's
    checkpoint, and a resumed Task ends Interrupted: docs/security.md#job-mode)."""
    docs = helm_template(
        tmp,
        values={"watchNamespaces": [namespace], "jobs": {"secretNames": ["model-key"]}},
    )
    runner = [
        d
        for d in docs
        if d["kind"] in ("ServiceAccount", "Role", "RoleBinding", "Secret")
        and d["metadata"]["labels"].get("app.kubernetes.io/component") == "task-runner"
    ]
    assert sorted(d["kind"] for d in runner) == ["Role", "RoleBinding", "Secret", "ServiceAccount"]
    # Not the install tests' objects: their "nothing left behind" checks select every object
    # labelled as ordo's across the node, and these stay in this test's namespace.
    for doc in runner:
        doc["metadata"]["labels"] = {
            "app.kubernetes.io/component": "task-runner",
            "ordo.dev/test": "job-mode",
        }
    _apply(cluster, namespace, runner)


def _operator(cluster: NodeCluster, namespace: str, tmp: Path, image: str, *extra: str) -> Any:
    api = cluster.apiserver_env()
    return OperatorProcess(
        cluster,
        namespace,
        tmp,
        "--lease-seconds",
        str(LEASE_SECONDS),
        "--job-image",
        image,
        "--job-image-pull-policy",
        "Never",
        "--job-env",
        f"KUBERNETES_SERVICE_HOST={api['KUBERNETES_SERVICE_HOST']}",
        "--job-env",
        f"KUBERNETES_SERVICE_PORT={api['KUBERNETES_SERVICE_PORT']}",
        "--job-cancel-grace-seconds",
        "5",
        *extra,
    ).start()


@pytest.fixture
def job_env(
    node_cluster: NodeCluster, node_namespace: str, runner_image: str, tmp_path: Path
) -> Iterator[tuple[NodeCluster, str, Any]]:
    _install_runner(node_cluster, node_namespace, tmp_path)
    op = _operator(node_cluster, node_namespace, tmp_path, runner_image)
    try:
        yield node_cluster, node_namespace, op
    finally:
        op.stop()


def _endpoint(turns: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "ModelEndpoint",
        "metadata": {"name": "model"},
        "spec": {"provider": "mock", "mock": {"turns": turns}},
    }


def _agent(
    name: str, mode: str, tools: list[str] | None = None, memory: str | None = None
) -> dict[str, Any]:
    execution: dict[str, Any] = {"mode": mode}
    if memory:
        execution["resources"] = {"limits": {"memory": memory}}
    spec: dict[str, Any] = {
        "modelRef": "model",
        "prompt": "Be brief.",
        "limits": {"maxSteps": 5, "timeout": "3m"},
        "execution": execution,
    }
    if tools:
        spec["tools"] = tools
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Agent",
        "metadata": {"name": name},
        "spec": spec,
    }


def _task(name: str, agent: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Task",
        "metadata": {"name": name},
        "spec": {"agentRef": agent, "input": f"task={name}"},
    }


def _effect_tool(name: str, url: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "Tool",
        "metadata": {"name": name},
        "spec": {
            "type": "http",
            "description": f"{name}: a side effect that must not run twice",
            "inputSchema": {
                "type": "object",
                "properties": {"task": {"type": "string"}, "call": {"type": "string"}},
                "required": ["task", "call"],
            },
            "http": {"url": f"{url}/effect"},
            "idempotent": False,
            "timeout": "30s",
        },
    }


def _job(cluster: NodeCluster, namespace: str, task: dict[str, Any]) -> dict[str, Any]:
    return dict(get_json(cluster, "job", f"ordo-task-{task['metadata']['uid']}", "-n", namespace))


def finished(cluster: NodeCluster, namespace: str, task: dict[str, Any]) -> str | None:
    """The Job's terminal condition (Complete or Failed), if any."""
    for c in (_job(cluster, namespace, task).get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"])
    return None


def _pods(cluster: NodeCluster, namespace: str, task: dict[str, Any]) -> list[dict[str, Any]]:
    selector = f"batch.kubernetes.io/job-name=ordo-task-{task['metadata']['uid']}"
    items: list[dict[str, Any]] = get_json(cluster, "pods", "-n", namespace, "-l", selector)[
        "items"
    ]
    return items


def _finish(
    cluster: NodeCluster, ns: str, name: str, op: Any, timeout: float = 180
) -> dict[str, Any]:
    """wait_task, and on a timeout the Task, its Job's pods (status and log) and the operator's
    log in the failure message."""
    try:
        return wait_task(cluster, ns, name, timeout=timeout)
    except AssertionError as exc:
        body: dict[str, Any] = get_json(cluster, "task", name, "-n", ns)
        lines = [str(exc), f"task status: {json.dumps(body.get('status'))[:2000]}"]
        for pod in _pods(cluster, ns, body):
            pod_name = pod["metadata"]["name"]
            lines.append(f"pod {pod_name}: {json.dumps(pod.get('status'))[:3000]}")
            log = cluster.kubectl("logs", "-n", ns, pod_name, check=False)
            lines.append(f"log of {pod_name}: {(log.stdout + log.stderr)[-3000:]}")
        lines.append(f"operator log: {op.logs()[-4000:]}")
        raise AssertionError("\n".join(lines)) from None


# -- tests ------------------------------------------------------------------------------------


def test_job_mode_task_succeeds_in_its_own_pod(job_env: tuple[NodeCluster, str, Any]) -> None:
    cluster, ns, op = job_env
    _apply(cluster, ns, [_endpoint([{"text": "hello from a pod"}]), _agent("agent", "Job")])
    _apply(cluster, ns, [_task("hello", "agent")])
    done = _finish(cluster, ns, "hello", op)
    status = done["status"]
    assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded"), status
    assert status["executionMode"] == "Job"
    assert status["output"] == "hello from a pod"
    job = _job(cluster, ns, done)
    (owner,) = job["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("Task", done["metadata"]["uid"])
    assert job["metadata"]["annotations"]["ordo.dev/execution-id"] == status["executionId"]
    # The pod exits 0 once the Task is terminal: the Job completes.
    wait_for(lambda: finished(cluster, ns, done) == "Complete", 60, what="the Job to complete")
    (pod,) = _pods(cluster, ns, done)
    assert pod["spec"]["serviceAccountName"] == "ordo-runner"
    assert pod["status"]["phase"] == "Succeeded"
    # The printer column shows the mode.
    table = cluster.kubectl("get", "tasks", "-n", ns).stdout
    assert "MODE" in table.splitlines()[0] and "Job" in table.splitlines()[1]
    # The pod ran the run (its Event), the operator only supervised; no forbidden request.
    reasons = [e["reason"] for e in events(cluster, ns, "hello")]
    assert "Started" in reasons and "Succeeded" in reasons
    logs = cluster.kubectl("logs", "-n", ns, pod["metadata"]["name"]).stdout
    assert "forbidden" not in logs.lower() and "run finished" in logs
    assert "forbidden" not in op.logs().lower()
    # The operator counts the Task its pod ended (the pod's own registry dies with it).
    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5) as r:
        metrics = r.read().decode()
    assert re.search(r'ordo_tasks_total\{[^}]*phase="Succeeded"[^}]*\} 1\.0', metrics), metrics
    assert "ordo_task_jobs_running 0.0" in metrics


def test_deleted_pod_is_replaced_and_resumes_without_repeating_a_tool(
    job_env: tuple[NodeCluster, str, Any],
) -> None:
    cluster, ns, op = job_env
    with NodeHttpToolServer(cluster.node_ip) as tools:
        turns: list[dict[str, Any]] = [
            {"toolCalls": [{"tool": "place-order", "arguments": {"task": "r", "call": "r/order"}}]},
            # The pod is deleted while this (slow) model call is in flight.
            {
                "delay": "20s",
                "toolCalls": [
                    {"tool": "send-invoice", "arguments": {"task": "r", "call": "r/invoice"}}
                ],
            },
            {"text": "done r"},
        ]
        _apply(
            cluster,
            ns,
            [
                _endpoint(turns),
                _effect_tool("place-order", tools.url),
                _effect_tool("send-invoice", tools.url),
                _agent("agent", "Job", tools=["place-order", "send-invoice"]),
            ],
        )
        _apply(cluster, ns, [_task("r", "agent")])

        def first_step_done() -> dict[str, Any] | None:
            body: dict[str, Any] = get_json(cluster, "task", "r", "-n", ns)
            return body if (body.get("status") or {}).get("step", 0) >= 1 else None

        body = wait_for(first_step_done, 180, what="the first step")
        assert tools.effects_snapshot()[("r", "r/order")] == 1
        (first,) = [p for p in _pods(cluster, ns, body) if p["status"]["phase"] == "Running"]
        cluster.kubectl("delete", "pod", "-n", ns, first["metadata"]["name"], "--wait=false")
        done = _finish(cluster, ns, "r", op, timeout=240)
        effects = tools.effects_snapshot()
    status = done["status"]
    assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded"), status
    assert effects == {("r", "r/order"): 1, ("r", "r/invoice"): 1}, effects
    assert status["step"] == 3
    # The deleted pod is gone; its replacement (another pod of the same Job) finished the run.
    (second,) = _pods(cluster, ns, done)
    assert second["metadata"]["name"] != first["metadata"]["name"]
    reasons = [e["reason"] for e in events(cluster, ns, "r")]
    assert "Resumed" in reasons, reasons


def test_oomkilled_pod_ends_the_task_with_its_reason(
    job_env: tuple[NodeCluster, str, Any],
) -> None:
    cluster, ns, op = job_env
    _apply(cluster, ns, [_endpoint([{"text": "never"}]), _agent("tiny", "Job", memory="24Mi")])
    _apply(cluster, ns, [_task("oom", "tiny")])
    done = _finish(cluster, ns, "oom", op)
    status = done["status"]
    pods = [(p["metadata"]["name"], p["status"]) for p in _pods(cluster, ns, done)]
    why = f"{status.get('message')}\npods: {json.dumps(pods)[:3000]}\n{op.logs()[-3000:]}"
    assert (status["phase"], status["reason"]) == ("Failed", "PodFailed"), why
    assert "OOMKilled" in status["message"] and "24Mi" in status["message"]
    assert status["executionMode"] == "Job"
    # The Job was stopped: no pod is left running.
    wait_for(
        lambda: all(
            p["status"]["phase"] in ("Succeeded", "Failed") for p in _pods(cluster, ns, done)
        ),
        60,
        what="the Job's pods to stop",
    )


def test_cancel_stops_the_job(job_env: tuple[NodeCluster, str, Any]) -> None:
    cluster, ns, op = job_env
    _apply(cluster, ns, [_endpoint([{"delay": "120s", "text": "late"}]), _agent("slow", "Job")])
    _apply(cluster, ns, [_task("c", "slow")])

    def pod_running() -> bool:
        body: dict[str, Any] = get_json(cluster, "task", "c", "-n", ns)
        if (body.get("status") or {}).get("phase") != "Running":
            return False
        return any(p["status"]["phase"] == "Running" for p in _pods(cluster, ns, body))

    wait_for(pod_running, 180, what="the Task's pod to run")
    cluster.kubectl(
        "patch", "task", "c", "-n", ns, "--type=merge", "-p", '{"spec":{"cancel":true}}'
    )
    done = _finish(cluster, ns, "c", op, timeout=90)
    assert (done["status"]["phase"], done["status"]["reason"]) == ("Cancelled", "Cancelled")
    assert "late" not in (done["status"].get("output") or "")


def test_runner_service_account_can_i_matrix(
    node_cluster: NodeCluster, node_namespace: str, tmp_path: Path
) -> None:
    _install_runner(node_cluster, node_namespace, tmp_path)
    other = node_cluster.create_namespace(prefix="other")
    user = f"system:serviceaccount:{node_namespace}:ordo-runner"
    questions: list[tuple[str | None, str, str, str, bool]] = []
    kinds = [(GROUP, r) for r in ORDO_RESOURCES] + [
        (GROUP, "tasks/status"),
        ("", "configmaps"),
        ("", "events"),
        ("coordination.k8s.io", "leases"),
        ("", "pods"),
        ("batch", "jobs"),
        ("", "serviceaccounts"),
    ]
    verbs = ("get", "list", "watch", "create", "update", "patch", "delete")
    for group, resource in kinds:
        for verb in verbs:
            expected = (group, resource, verb) in RUNNER_RULES
            questions.append((node_namespace, group, resource, verb, expected))
            questions.append((other, group, resource, verb, False))
            questions.append((None, group, resource, verb, False))
    # Secrets: get by the listed name only, never list or watch, nowhere else.
    questions += [
        (node_namespace, "", "secrets", "list", False),
        (node_namespace, "", "secrets", "watch", False),
        (None, "", "secrets", "list", False),
        (other, "", "secrets", "get", False),
    ]
    wrong = []
    for ns, group, resource, verb, expected in questions:
        base, _, sub = resource.partition("/")
        name = f"{base}.{group}" if group else base
        scope = ["--all-namespaces"] if ns is None else ["-n", ns]
        extra = [f"--subresource={sub}"] if sub else []
        answer = node_cluster.kubectl(
            "auth", "can-i", verb, name, *extra, *scope, f"--as={user}", check=False
        ).stdout.strip()
        if (answer == "yes") != expected:
            wrong.append(f"{verb} {resource} in {ns or 'all namespaces'}: {answer}")
    for secret, allowed in (("model-key", "yes"), ("other-secret", "no")):
        answer = node_cluster.kubectl(
            "auth",
            "can-i",
            "get",
            f"secret/{secret}",
            "-n",
            node_namespace,
            f"--as={user}",
            check=False,
        ).stdout.strip()
        if answer != allowed:
            wrong.append(f"get secret/{secret}: {answer}")
    assert not wrong, "\n".join(wrong)
    assert len(questions) > 150


def test_job_mode_start_overhead(
    node_cluster: NodeCluster, node_namespace: str, runner_image: str, tmp_path: Path
) -> None:
    """Creation → Succeeded of a one-call mock Task, InProcess against Job, on this node.
    Reported in build/job-mode-overhead.json and docs/operations.md; only a generous bound
    is asserted."""
    cluster, ns = node_cluster, node_namespace
    _install_runner(cluster, ns, tmp_path)
    op = _operator(cluster, ns, tmp_path, runner_image)
    runs = 3
    try:
        _apply(
            cluster,
            ns,
            [_endpoint([{"text": "ok"}]), _agent("inproc", "InProcess"), _agent("job", "Job")],
        )
        seconds: dict[str, list[float]] = {"InProcess": [], "Job": []}
        for i in range(runs):
            for mode, agent in (("InProcess", "inproc"), ("Job", "job")):
                name = f"{agent}-{i}"
                start = time.monotonic()
                _apply(cluster, ns, [_task(name, agent)])
                done = _finish(cluster, ns, name, op)
                seconds[mode].append(time.monotonic() - start)
                assert done["status"]["phase"] == "Succeeded", done["status"]
                assert done["status"]["executionMode"] == mode
    finally:
        op.stop()
    median = {mode: statistics.median(v) for mode, v in seconds.items()}
    report: dict[str, Any] = {
        mode: {"median": round(median[mode], 2), "min": round(min(v), 2), "max": round(max(v), 2)}
        for mode, v in seconds.items()
    }
    report["overheadMedianSeconds"] = round(median["Job"] - median["InProcess"], 2)
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(json.dumps(report, indent=2) + "\n")
    print("job-mode start overhead:", json.dumps(report))
    assert report["Job"]["max"] < 120
