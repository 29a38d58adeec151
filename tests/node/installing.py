"""Helpers of the install tests on the single-node cluster (tests/node/test_helm_install.py,
test_kustomize_install.py, test_prometheus.py, test_gc.py).

The cluster is the ``node_cluster`` session fixture of tests/node/conftest.py (kubelet,
containerd, kube-controller-manager, kube-scheduler): ``kubectl(*args, check=True,
input=None)``, ``kubeconfig``, ``env()``, ``server``, ``import_image(path)``,
``create_namespace(prefix)``. The operator image is the one scripts/build-image builds
(``localhost/ordo:dev``, tests/support/image.py).

What pods reach on the host: the node's InternalIP is one of this machine's addresses, so a
server bound to it (the scripted model server) is reachable from the operator pod, and the
host reaches pod IPs through the node's bridge (Prometheus scrapes the pod directly).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web
from tests.support.credentials import host_of, opted_in
from tests.support.openai_server import OpenAIServer
from tests.support.packaging import CHART, ROOT, helm

EXAMPLES = ROOT / "examples"
IMAGE_REPOSITORY = "localhost/ordo"
IMAGE_TAG = "dev"
IMAGE = f"{IMAGE_REPOSITORY}:{IMAGE_TAG}"
# The chart's values for the image imported into the node's containerd (no registry).
IMAGE_VALUES: dict[str, Any] = {
    "image": {"repository": IMAGE_REPOSITORY, "tag": IMAGE_TAG, "pullPolicy": "Never"}
}
MODEL_KEY = "sk-node-test-key"
TERMINAL = ("Succeeded", "Failed", "Cancelled")

Cluster = Any  # tests/node/conftest.py's NodeCluster (duck-typed: kubectl, env, kubeconfig, ...)

_imported: set[int] = set()


def import_operator_image(cluster: Cluster) -> None:
    """Import localhost/ordo:dev into the node's containerd (once per cluster)."""
    if id(cluster) in _imported:
        return
    from tests.support.image import ordo_image_archive

    names = cluster.import_image(ordo_image_archive())
    assert IMAGE in names, f"{ordo_image_archive()} holds {names}, not {IMAGE}"
    _imported.add(id(cluster))


def get_json(cluster: Cluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def exists(cluster: Cluster, *args: str) -> bool:
    result = cluster.kubectl("get", *args, "--ignore-not-found", "-o", "name", check=False)
    assert result.returncode == 0, result.stderr
    return bool(result.stdout.strip())


def wait_for(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.5,
    diagnose: Callable[[], str] | None = None,
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{diagnose()}" if diagnose else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def node_ip(cluster: Cluster) -> str:
    """The node's InternalIP: an address of this machine that pods can reach."""
    return str(cluster.node_ip)


# -- diagnostics ------------------------------------------------------------------------------


def diagnostics(cluster: Cluster, namespace: str, selector: str | None = None) -> str:
    """Pods, recent Events and operator logs of `namespace`, for failure messages."""
    out = []
    for args in (
        ("get", "deploy,rs,pods", "-n", namespace, "-o", "wide"),
        ("get", "events", "-n", namespace, "--sort-by=.lastTimestamp"),
    ):
        result = cluster.kubectl(*args, check=False)
        out.append(f"$ kubectl {' '.join(args)}\n{result.stdout}{result.stderr}")
    if selector:
        result = cluster.kubectl(
            "logs", "-n", namespace, "-l", selector, "--tail=40", "--all-containers", check=False
        )
        out.append(f"$ kubectl logs -l {selector}\n{result.stdout[-6000:]}{result.stderr}")
    return "\n".join(out)[-12000:]


# -- the operator Deployment ------------------------------------------------------------------


def deployment_ready(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The Deployment when its rollout is complete: observed, one updated, ready, available
    replica, and no pod of an older ReplicaSet left (Recreate)."""
    deploy = get_json(cluster, "deployment", name, "-n", namespace)
    spec, status = deploy["spec"], deploy.get("status") or {}
    want = spec.get("replicas", 1)
    done = (
        status.get("observedGeneration", 0) >= deploy["metadata"]["generation"]
        and status.get("updatedReplicas", 0) == want
        and status.get("readyReplicas", 0) == want
        and status.get("availableReplicas", 0) == want
        and status.get("replicas", 0) == want
    )
    return deploy if done else None


# A container waiting for one of these will not start by itself: fail at once.
FATAL_WAITING = {
    "ErrImageNeverPull",
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "CrashLoopBackOff",
}


def wait_deployment_ready(
    cluster: Cluster, namespace: str, name: str, selector: str, timeout: float = 240
) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        for pod in operator_pods(cluster, namespace, selector):
            for c in pod["status"].get("containerStatuses") or []:
                reason = ((c.get("state") or {}).get("waiting") or {}).get("reason")
                if reason in FATAL_WAITING:
                    raise AssertionError(
                        f"operator container {reason}\n{diagnostics(cluster, namespace, selector)}"
                    )
        return deployment_ready(cluster, namespace, name)

    result: dict[str, Any] = wait_for(
        ready,
        timeout,
        f"Deployment {namespace}/{name} to be ready",
        diagnose=lambda: diagnostics(cluster, namespace, selector),
    )
    return result


def operator_pods(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = get_json(cluster, "pods", "-n", namespace, "-l", selector)["items"]
    return pods


def the_ready_pod(cluster: Cluster, namespace: str, selector: str) -> dict[str, Any]:
    """The one operator pod: Running, Ready (its readiness probe passed), not restarted, and
    not about to go away."""
    pods = [
        p
        for p in operator_pods(cluster, namespace, selector)
        if not p["metadata"].get("deletionTimestamp")
    ]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    pod = pods[0]
    status = pod["status"]
    assert status["phase"] == "Running", status
    ready = {c["type"]: c["status"] for c in status.get("conditions", [])}
    assert ready.get("Ready") == "True", status.get("conditions")
    (container,) = status["containerStatuses"]
    assert container["ready"] is True, container
    assert container["restartCount"] == 0, container
    return pod


def wait_no_pods(cluster: Cluster, namespace: str, selector: str, timeout: float = 120) -> None:
    wait_for(
        lambda: not operator_pods(cluster, namespace, selector),
        timeout,
        f"the pods {selector} in {namespace} to be gone",
        diagnose=lambda: diagnostics(cluster, namespace),
    )


def leftovers(cluster: Cluster, selector: str) -> list[str]:
    """Every object, namespaced (all namespaces) or cluster-scoped, of every listable kind that
    matches the label `selector`, as `kind/name (namespace)`; CustomResourceDefinitions and
    Events left out. Objects already being deleted count: an orphan may hang on a finalizer."""
    kinds = cluster.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    skip = {"events", "events.events.k8s.io", "customresourcedefinitions.apiextensions.k8s.io"}
    kinds = [k for k in kinds if k not in skip]
    result = cluster.kubectl(
        "get", ",".join(kinds), "-A", "-l", selector, "-o", "json", "--ignore-not-found"
    )
    if not result.stdout.strip():
        return []
    items = json.loads(result.stdout).get("items", [])
    return sorted(
        f"{i['kind']}/{i['metadata']['name']} ({i['metadata'].get('namespace', '-')})"
        for i in items
    )


def wait_no_leftovers(cluster: Cluster, selector: str, timeout: float = 150) -> None:
    """Deleting a Deployment leaves its ReplicaSet and pod to the garbage collector and the
    kubelet (graceful termination): wait for them, then nothing may be left."""
    found: list[str] = []

    def clean() -> bool:
        found[:] = leftovers(cluster, selector)
        return not found

    wait_for(
        clean,
        timeout,
        f"no objects labelled {selector}",
        interval=2,
        diagnose=lambda: f"left: {found}",
    )


# -- helm -------------------------------------------------------------------------------------


def helm_cmd(tmp: Path, cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    return helm(tmp, *args, "--kubeconfig", str(cluster.kubeconfig))


def values_file(tmp: Path, name: str, *values: Mapping[str, Any]) -> Path:
    merged: dict[str, Any] = {}
    for v in values:
        merged = _merge(merged, v)
    path = tmp / f"values-{name}.yaml"
    path.write_text(yaml.safe_dump(merged))
    return path


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def apiserver_env(cluster: Cluster) -> list[dict[str, str]]:
    """The operator container's `env` entries that point in-cluster clients at kube-apiserver on
    the node IP: the test node has no kube-proxy, so the `kubernetes` Service IP does not route.
    The only difference from a production install; the chart's `env` value carries them."""
    return [{"name": k, "value": v} for k, v in sorted(cluster.apiserver_env().items())]


def helm_install(
    tmp: Path, cluster: Cluster, release: str, namespace: str, *values: Mapping[str, Any]
) -> subprocess.CompletedProcess[str]:
    """`helm install RELEASE charts/ordo` (no --wait: the tests time the rollout themselves)
    with the node's image, the apiserver address (`env`) and `values`."""
    path = values_file(
        tmp, f"{release}-install", IMAGE_VALUES, {"env": apiserver_env(cluster)}, *values
    )
    return helm_cmd(
        tmp,
        cluster,
        "install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--values",
        str(path),
    )


def release_selector(release: str) -> str:
    return f"app.kubernetes.io/instance={release},app.kubernetes.io/name=ordo"


# -- Tasks --------------------------------------------------------------------------------------


def task(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = get_json(cluster, "task", name, "-n", namespace)
    return body


def wait_task(
    cluster: Cluster,
    namespace: str,
    name: str,
    phases: Iterable[str] = TERMINAL,
    timeout: float = 120,
    diagnose: Callable[[], str] | None = None,
) -> dict[str, Any]:
    wanted = tuple(phases)

    def check() -> dict[str, Any] | None:
        body = task(cluster, namespace, name)
        return body if (body.get("status") or {}).get("phase") in wanted else None

    def explain() -> str:
        status = task(cluster, namespace, name).get("status") or {}
        return f"status: {json.dumps(status)[:2000]}\n" + (diagnose() if diagnose else "")

    result: dict[str, Any] = wait_for(
        check, timeout, f"Task {namespace}/{name} {wanted}", diagnose=explain
    )
    return result


def apply_dir(cluster: Cluster, namespace: str, path: Path) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", str(path))


def apply_docs(cluster: Cluster, namespace: str, docs: Iterable[Mapping[str, Any]]) -> None:
    text = yaml.safe_dump_all([dict(d) for d in docs], sort_keys=False)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=text)


def warning_events(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items = get_json(cluster, "events", "-n", namespace)["items"]
    return [
        e for e in items if e["involvedObject"].get("name") == name and e.get("type") == "Warning"
    ]


def check_quickstart(
    cluster: Cluster,
    namespace: str,
    timeout: float = 120,
    diagnose: Callable[[], str] | None = None,
) -> dict[str, Any]:
    """examples/quickstart: `research-operators` Succeeded after two steps, one toolCalls
    record web-search allowed (examples/quickstart/README.md)."""
    apply_dir(cluster, namespace, EXAMPLES / "quickstart")
    body = wait_task(cluster, namespace, "research-operators", timeout=timeout, diagnose=diagnose)
    status = body["status"]
    assert status["phase"] == "Succeeded", status
    assert status["step"] == 2, status
    calls = [(c["tool"], c["decision"]) for c in status.get("toolCalls", [])]
    assert calls == [("web-search", "allowed")], status
    return body


def check_governance(
    cluster: Cluster,
    namespace: str,
    timeout: float = 120,
    diagnose: Callable[[], str] | None = None,
) -> None:
    """examples/governance: both Tasks Failed/ToolDenied with the documented records and a
    Warning Event per denial (examples/governance/README.md)."""
    apply_dir(cluster, namespace, EXAMPLES / "governance")
    intern = wait_task(cluster, namespace, "intern-cleanup", timeout=timeout, diagnose=diagnose)
    auditor = wait_task(cluster, namespace, "auditor-cleanup", timeout=timeout, diagnose=diagnose)
    for body in (intern, auditor):
        status = body["status"]
        assert (status["phase"], status["reason"]) == ("Failed", "ToolDenied"), status
    records = intern["status"]["toolCalls"]
    assert [(r["tool"], r["decision"], r["reason"]) for r in records] == [
        ("delete-records", "denied", "BlockedByPolicy: interns-no-deletes")
    ], records
    assert intern["status"]["step"] == 1
    records = auditor["status"]["toolCalls"]
    assert [(r["tool"], r["decision"], r["step"]) for r in records] == [
        ("read-records", "allowed", 1),
        ("delete-records", "denied", 2),
    ], records
    assert records[1]["reason"].startswith("MissingPermission:"), records
    assert "tool:delete-records:invoke" in records[1]["reason"], records
    for name in ("intern-cleanup", "auditor-cleanup"):
        wait_for(
            lambda n=name: warning_events(cluster, namespace, n), 30, f"a Warning Event on {name}"
        )


# -- the OpenAI-wire model on the host ----------------------------------------------------------


class HostOpenAIServer(OpenAIServer):
    """The scripted OpenAI Chat Completions server, bound to `host` (the node's IP) instead of
    loopback, so the operator pod can reach it."""

    def __init__(self, host: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.host = host

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def serve(self) -> web.AppRunner:
        runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return runner


def openai_manifests(base_url: str, *, timeout: str = "60s") -> list[dict[str, Any]]:
    """examples/openai's Tool, Agent and Task, with its ModelEndpoint `openai` pointed at the
    scripted server and a Secret holding the test key."""
    docs = [d for d in yaml.safe_load_all((EXAMPLES / "openai" / "agent.yaml").read_text()) if d]
    model = yaml.safe_load((EXAMPLES / "openai" / "model.yaml").read_text())
    model["spec"]["baseUrl"] = f"{base_url}/v1"
    model["spec"]["timeout"] = timeout
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": opted_in({"name": "openai-api-key"}, host_of(base_url)),
        "type": "Opaque",
        "stringData": {"apiKey": MODEL_KEY},
    }
    return [secret, model, *docs]


def openai_task_name() -> str:
    docs = yaml.safe_load_all((EXAMPLES / "openai" / "agent.yaml").read_text())
    return next(str(d["metadata"]["name"]) for d in docs if d and d["kind"] == "Task")


def check_openai(
    cluster: Cluster,
    namespace: str,
    server: HostOpenAIServer,
    timeout: float = 120,
    diagnose: Callable[[], str] | None = None,
) -> None:
    """examples/openai against the scripted server: the model calls order-status, then
    answers; Succeeded; every request carried the key from the Secret."""
    before = server.count
    apply_docs(cluster, namespace, openai_manifests(server.url))
    name = openai_task_name()
    body = wait_task(cluster, namespace, name, timeout=timeout, diagnose=diagnose)
    status = body["status"]
    assert status["phase"] == "Succeeded", status
    assert [(c["tool"], c["decision"]) for c in status.get("toolCalls", [])] == [
        ("order-status", "allowed")
    ], status
    requests = server.requests[before:]
    model_calls = [r for r in requests if r.path.endswith("/chat/completions")]
    assert len(model_calls) == 2, [r.path for r in requests]
    assert all(r.headers.get("Authorization") == f"Bearer {MODEL_KEY}" for r in model_calls)
    assert model_calls[0].body["model"] == "gpt-4o-mini"
