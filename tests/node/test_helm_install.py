"""`helm install` of charts/ordo on the real single node, with the image scripts/build-image
built (localhost/ordo:dev, imported into the node's containerd).

One test walks the life of a release, in order, because each stage needs the previous one:

1. install: the Deployment becomes Ready through its probes (readiness `/readyz` on the health
   port), the pod never restarted (liveness `/healthz`), in the restricted securityContext;
2. Tasks: examples/quickstart Succeeded, examples/governance Failed/ToolDenied (both with the
   records their READMEs document), and examples/openai against a scripted OpenAI Chat
   Completions server on this machine (bound to the node's IP; ModelEndpoint `baseUrl`s are not
   SSRF-guarded, docs/security.md), every request carrying the key from the Secret;
3. `helm upgrade` with a changed value (`operator.maxConcurrentTasks`): the Deployment rolls
   (Recreate: a new pod with the new flag), a Task that was Running across the roll resumes in
   the new pod and Succeeds, and new Tasks run;
4. `helm uninstall`: no object with the release's labels is left anywhere (namespaced or
   cluster-scoped; the release's own Secrets included), the CRDs stay (helm never deletes
   what it installed from crds/), and so do the Tasks.

The measured times (install → Ready, first Task) are printed (`-s`), never asserted.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.node.installing import (
    IMAGE,
    MODEL_KEY,
    HostOpenAIServer,
    apply_docs,
    check_governance,
    check_openai,
    check_quickstart,
    diagnostics,
    exists,
    get_json,
    helm_cmd,
    helm_install,
    import_operator_image,
    node_ip,
    openai_manifests,
    release_selector,
    task,
    the_ready_pod,
    values_file,
    wait_deployment_ready,
    wait_for,
    wait_no_leftovers,
    wait_task,
)
from tests.support.packaging import CHART

RELEASE = "ordo"
CRDS = (
    "agentpolicies",
    "agentroles",
    "agents",
    "memories",
    "modelendpoints",
    "tasks",
    "toolpermissions",
    "tools",
)


def test_helm_install_upgrade_uninstall(node_cluster: Any, tmp_path: Path) -> None:
    cluster = node_cluster
    import_operator_image(cluster)
    release_ns = cluster.create_namespace("ordo-helm")
    selector = release_selector(RELEASE)

    def diagnose() -> str:
        return diagnostics(cluster, release_ns, selector)

    # -- 1. install ------------------------------------------------------------------------
    started = time.monotonic()
    helm_install(tmp_path, cluster, RELEASE, release_ns)
    deploy = wait_deployment_ready(cluster, release_ns, RELEASE, selector)
    ready_after = time.monotonic() - started
    pod = the_ready_pod(cluster, release_ns, selector)
    (container,) = pod["spec"]["containers"]
    assert container["image"] == IMAGE
    assert container["imagePullPolicy"] == "Never"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["securityContext"]["runAsUser"] == 65532
    assert "--all-namespaces" in container["args"]
    for crd in CRDS:
        assert exists(cluster, "crd", f"{crd}.ordo.dev"), crd

    # -- 2. Tasks ----------------------------------------------------------------------------
    quick_ns = cluster.create_namespace("quickstart")
    first = time.monotonic()
    check_quickstart(cluster, quick_ns, diagnose=diagnose)
    first_task = time.monotonic() - first
    check_governance(cluster, cluster.create_namespace("governance"), diagnose=diagnose)

    with HostOpenAIServer(node_ip(cluster), require_key=MODEL_KEY) as server:
        check_openai(cluster, cluster.create_namespace("openai"), server, diagnose=diagnose)

        # -- 3. upgrade with a Task in flight ------------------------------------------------
        # Every model answer takes 6 s, so the Task is mid-run when the old pod stops.
        server.set_script(None, fallback={"auto": True, "delay": 6})
        roll_ns = cluster.create_namespace("rolling")
        apply_docs(cluster, roll_ns, openai_manifests(server.url))
        name = next(
            d["metadata"]["name"] for d in openai_manifests(server.url) if d["kind"] == "Task"
        )
        running = wait_task(cluster, roll_ns, name, phases=("Running",), diagnose=diagnose)
        old_execution = running["status"]["executionId"]
        old_pod = pod["metadata"]["uid"]

        values = values_file(tmp_path, "upgrade", {"operator": {"maxConcurrentTasks": 3}})
        helm_cmd(
            tmp_path,
            cluster,
            "upgrade",
            RELEASE,
            str(CHART),
            "--namespace",
            release_ns,
            "--reuse-values",
            "--values",
            str(values),
        )
        wait_for(
            lambda: (
                get_json(cluster, "deployment", RELEASE, "-n", release_ns)["metadata"]["generation"]
                > deploy["metadata"]["generation"]
            ),
            30,
            "the upgrade to change the Deployment",
        )
        wait_deployment_ready(cluster, release_ns, RELEASE, selector)
        new_pod = the_ready_pod(cluster, release_ns, selector)
        assert new_pod["metadata"]["uid"] != old_pod
        args = new_pod["spec"]["containers"][0]["args"]
        assert "--max-concurrent-tasks=3" in args, args
        assert new_pod["spec"]["containers"][0]["image"] == IMAGE  # --reuse-values kept it

        done = wait_task(cluster, roll_ns, name, timeout=180, diagnose=diagnose)
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert done["status"]["executionId"] != old_execution, (
            "the Task did not run across the roll",
            done["status"],
        )

    # New Tasks run on the upgraded operator.
    check_quickstart(cluster, cluster.create_namespace("after-upgrade"), diagnose=diagnose)
    history = helm_cmd(tmp_path, cluster, "history", RELEASE, "-n", release_ns, "-o", "json")
    assert [r["revision"] for r in json.loads(history.stdout)] == [1, 2]

    # -- 4. uninstall ------------------------------------------------------------------------
    helm_cmd(tmp_path, cluster, "uninstall", RELEASE, "--namespace", release_ns, "--wait")
    wait_no_leftovers(cluster, selector)
    # helm's release records (Secrets sh.helm.release.v1.<release>.v<n>) went too.
    assert not exists(cluster, "secrets", "-n", release_ns, "-l", f"owner=helm,name={RELEASE}")
    for crd in CRDS:
        assert exists(cluster, "crd", f"{crd}.ordo.dev"), f"helm uninstall deleted {crd}"
    assert task(cluster, quick_ns, "research-operators")["status"]["phase"] == "Succeeded"

    print(
        f"\nhelm install -> Deployment Ready: {ready_after:.1f} s; "
        f"first Task (quickstart, apply -> Succeeded): {first_task:.1f} s"
    )


@pytest.fixture(autouse=True)
def _release_cleanup(node_cluster: Any, tmp_path: Path) -> Any:
    """A failed test must not leave an all-namespaces operator running for the next tests."""
    yield
    namespaces = get_json(node_cluster, "namespaces")["items"]
    for ns in namespaces:
        name = ns["metadata"]["name"]
        if name.startswith("ordo-helm") and ns["status"].get("phase") == "Active":
            helm_cmd(
                tmp_path,
                node_cluster,
                "uninstall",
                RELEASE,
                "-n",
                name,
                "--wait",
                "--ignore-not-found",
            )
