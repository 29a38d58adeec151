"""The kustomize base (manifests/base) on the real single node: the same life as the Helm
release in test_helm_install.py.

An overlay in the test's directory takes the base and sets the image the way the base's
kustomization.yaml tells users to (`images: [{name: ordo, newName: ..., newTag: ...}]`):
localhost/ordo:dev, imported into the node's containerd. The base's `imagePullPolicy:
IfNotPresent` stays (the image is present). It is applied with the command the base documents,
`kubectl apply --server-side -k`.

1. apply: the Deployment `ordo-system/ordo` becomes Ready through its probes, its pod admitted
   by the namespace's `restricted` Pod Security level;
2. examples/quickstart, examples/governance and examples/openai (scripted OpenAI server on the
   node's IP) reach their documented phases;
3. a changed overlay (`--max-concurrent-tasks=3`) re-applied rolls the Deployment, and Tasks
   still run;
4. deleting everything but the CRDs (they hold every team's ordo objects) leaves no object with
   the base's labels anywhere, and the namespace `ordo-system` goes away.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.node.installing import (
    IMAGE,
    MODEL_KEY,
    HostOpenAIServer,
    apiserver_env,
    check_governance,
    check_openai,
    check_quickstart,
    diagnostics,
    exists,
    get_json,
    import_operator_image,
    node_ip,
    the_ready_pod,
    wait_deployment_ready,
    wait_for,
    wait_no_leftovers,
)
from tests.support.packaging import KUSTOMIZE_BASE, documents

NAMESPACE = "ordo-system"
NAME = "ordo"
POD_SELECTOR = "app.kubernetes.io/name=ordo,app.kubernetes.io/instance=ordo"
# kustomize adds part-of to every object of the base (not to the pod template, so the pods and
# ReplicaSets are found by POD_SELECTOR).
BASE_SELECTOR = "app.kubernetes.io/part-of=ordo"
KEYRING = base64.b64encode(os.urandom(32)).decode()
"""One key for every overlay of the run: an update keeps it, as a real overlay would."""


def write_overlay(
    directory: Path, env: list[dict[str, str]], *, max_concurrent: int | None = None
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # kustomize refuses absolute paths for a base.
        "resources": [os.path.relpath(KUSTOMIZE_BASE, directory)],
        "images": [{"name": "ordo", "newName": "localhost/ordo", "newTag": "dev"}],
        # The checkpoint keyring the base mounts (docs/operations.md: kustomize cannot make
        # up a key; an overlay generates the Secret from a key of its own).
        "secretGenerator": [
            {
                "name": "ordo-checkpoint-key",
                "namespace": "ordo-system",
                "literals": [f"keyring={KEYRING}"],
                "options": {"disableNameSuffixHash": True},
            }
        ],
    }
    # The apiserver address for in-cluster clients (no kube-proxy on the test node).
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": e} for e in env
    ]
    if max_concurrent is not None:
        ops.append(
            {
                "op": "replace",
                "path": "/spec/template/spec/containers/0/args/1",
                "value": f"--max-concurrent-tasks={max_concurrent}",
            }
        )
    kustomization["patches"] = [
        {"target": {"kind": "Deployment", "name": NAME}, "patch": yaml.safe_dump(ops)}
    ]
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return directory


def delete_all_but_crds(cluster: Any, overlay: Path, *, wait: bool = True) -> None:
    rendered = cluster.kubectl("kustomize", str(overlay)).stdout
    docs = [d for d in documents(rendered) if d["kind"] != "CustomResourceDefinition"]
    cluster.kubectl(
        "delete",
        "--ignore-not-found",
        f"--wait={'true' if wait else 'false'}",
        "--timeout=180s",
        "-f",
        "-",
        input=yaml.safe_dump_all(docs),
    )


@pytest.fixture
def overlay(node_cluster: Any, tmp_path: Path) -> Iterator[Path]:
    path = write_overlay(tmp_path / "overlay", apiserver_env(node_cluster))
    yield path
    # A failed test must not leave an all-namespaces operator running for the next tests.
    if exists(node_cluster, "namespace", NAMESPACE):
        delete_all_but_crds(node_cluster, path)


def test_kustomize_apply_update_delete(node_cluster: Any, overlay: Path, tmp_path: Path) -> None:
    cluster = node_cluster
    import_operator_image(cluster)
    assert not exists(cluster, "namespace", NAMESPACE), "ordo-system exists before the test"

    def diagnose() -> str:
        return diagnostics(cluster, NAMESPACE, POD_SELECTOR)

    # -- 1. apply ----------------------------------------------------------------------------
    started = time.monotonic()
    cluster.kubectl("apply", "--server-side", "-k", str(overlay))
    deploy = wait_deployment_ready(cluster, NAMESPACE, NAME, POD_SELECTOR)
    ready_after = time.monotonic() - started
    pod = the_ready_pod(cluster, NAMESPACE, POD_SELECTOR)
    (container,) = pod["spec"]["containers"]
    assert container["image"] == IMAGE
    assert container["imagePullPolicy"] == "IfNotPresent"
    ns = get_json(cluster, "namespace", NAMESPACE)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"

    # -- 2. Tasks ----------------------------------------------------------------------------
    first = time.monotonic()
    check_quickstart(cluster, cluster.create_namespace("kz-quickstart"), diagnose=diagnose)
    first_task = time.monotonic() - first
    check_governance(cluster, cluster.create_namespace("kz-governance"), diagnose=diagnose)
    with HostOpenAIServer(node_ip(cluster), require_key=MODEL_KEY) as server:
        check_openai(cluster, cluster.create_namespace("kz-openai"), server, diagnose=diagnose)

    # -- 3. a changed overlay ------------------------------------------------------------------
    changed = write_overlay(tmp_path / "overlay-changed", apiserver_env(cluster), max_concurrent=3)
    cluster.kubectl("apply", "--server-side", "-k", str(changed))
    wait_for(
        lambda: (
            get_json(cluster, "deployment", NAME, "-n", NAMESPACE)["metadata"]["generation"]
            > deploy["metadata"]["generation"]
        ),
        30,
        "the changed overlay to change the Deployment",
    )
    wait_deployment_ready(cluster, NAMESPACE, NAME, POD_SELECTOR)
    new_pod = the_ready_pod(cluster, NAMESPACE, POD_SELECTOR)
    assert new_pod["metadata"]["uid"] != pod["metadata"]["uid"]
    assert "--max-concurrent-tasks=3" in new_pod["spec"]["containers"][0]["args"]
    check_quickstart(cluster, cluster.create_namespace("kz-after-update"), diagnose=diagnose)

    # -- 4. delete (the CRDs stay) -----------------------------------------------------------
    delete_all_but_crds(cluster, changed)
    wait_no_leftovers(cluster, POD_SELECTOR)
    wait_no_leftovers(cluster, BASE_SELECTOR)
    wait_for(
        lambda: not exists(cluster, "namespace", NAMESPACE),
        120,
        "namespace ordo-system to be deleted",
    )
    for crd in ("tasks", "agents", "modelendpoints", "tools"):
        assert exists(cluster, "crd", f"{crd}.ordo.dev"), crd

    print(
        f"\nkubectl apply -k -> Deployment Ready: {ready_after:.1f} s; "
        f"first Task (quickstart): {first_task:.1f} s"
    )
