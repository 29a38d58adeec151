"""The single-node cluster itself: pods run (with and without hostNetwork), Jobs complete,
the garbage collector and the namespace controller work, and stop() leaves nothing behind."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ordo_devcluster import NodeCluster

TIMEOUT = "120s"


def _pod(name: str, image: str, command: str, *, host_network: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "hostNetwork": host_network,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", command],
                }
            ],
        },
    }


def _apply(cluster: NodeCluster, namespace: str, manifest: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))


def _get(cluster: NodeCluster, namespace: str, *what: str) -> dict[str, Any]:
    result = cluster.kubectl("get", "-n", namespace, *what, "-o", "json")
    return dict(json.loads(result.stdout))


def _wait_gone(cluster: NodeCluster, namespace: str, *what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        result = cluster.kubectl(
            "get", "-n", namespace, *what, "--ignore-not-found", "-o", "name", check=False
        )
        if result.returncode == 0 and not result.stdout.strip():
            return
        assert time.monotonic() < deadline, f"{what} still present: {result.stdout.strip()}"
        time.sleep(0.2)


def test_node_is_ready_with_its_own_address(node_cluster: NodeCluster) -> None:
    node = _get(node_cluster, "default", "node", node_cluster.node_name)
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready["Ready"] == "True"
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == node_cluster.node_ip
    assert not ipaddress.ip_address(node_cluster.node_ip).is_loopback
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")


def test_pods_run_to_completion_and_logs_show_output(
    node_cluster: NodeCluster, node_namespace: str
) -> None:
    image = node_cluster.busybox_image
    _apply(
        node_cluster,
        node_namespace,
        _pod("host", image, "echo host-network-says $((6 * 7))", host_network=True),
    )
    _apply(node_cluster, node_namespace, _pod("bridged", image, "echo bridged-says-hello; id -u"))
    for pod in ("host", "bridged"):
        node_cluster.kubectl(
            "wait",
            "-n",
            node_namespace,
            "--for=jsonpath={.status.phase}=Succeeded",
            f"pod/{pod}",
            f"--timeout={TIMEOUT}",
        )
    assert node_cluster.kubectl("logs", "-n", node_namespace, "host").stdout == (
        "host-network-says 42\n"
    )
    assert node_cluster.kubectl("logs", "-n", node_namespace, "bridged").stdout == (
        "bridged-says-hello\n0\n"
    )
    host = _get(node_cluster, node_namespace, "pod", "host")
    bridged = _get(node_cluster, node_namespace, "pod", "bridged")
    assert host["status"]["podIP"] == node_cluster.node_ip
    assert node_cluster.resources is not None
    pod_subnet = ipaddress.ip_network(node_cluster.resources.pod_subnet)
    assert ipaddress.ip_address(bridged["status"]["podIP"]) in pod_subnet


def test_pod_reaches_a_server_on_the_node_ip(
    node_cluster: NodeCluster, node_namespace: str
) -> None:
    """kube-apiserver listens on the node IP: a bridged pod reaches it through its gateway."""
    env = node_cluster.apiserver_env()
    host, port = env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]
    _apply(
        node_cluster,
        node_namespace,
        _pod("probe", node_cluster.busybox_image, f"nc -w 5 {host} {port} </dev/null && echo open"),
    )
    node_cluster.kubectl(
        "wait",
        "-n",
        node_namespace,
        "--for=jsonpath={.status.phase}=Succeeded",
        "pod/probe",
        f"--timeout={TIMEOUT}",
    )
    assert node_cluster.kubectl("logs", "-n", node_namespace, "probe").stdout == "open\n"


def test_job_completes(node_cluster: NodeCluster, node_namespace: str) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "count"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": node_cluster.busybox_image,
                            "imagePullPolicy": "Never",
                            "command": ["sh", "-c", "seq 1 3"],
                        }
                    ],
                }
            },
        },
    }
    _apply(node_cluster, node_namespace, job)
    node_cluster.kubectl(
        "wait",
        "-n",
        node_namespace,
        "--for=condition=Complete",
        "job/count",
        f"--timeout={TIMEOUT}",
    )
    assert node_cluster.kubectl("logs", "-n", node_namespace, "job/count").stdout == "1\n2\n3\n"


def test_dependents_of_a_deleted_owner_are_garbage_collected(
    node_cluster: NodeCluster, node_namespace: str
) -> None:
    _apply(
        node_cluster,
        node_namespace,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner"}},
    )
    owner = _get(node_cluster, node_namespace, "configmap", "owner")["metadata"]
    reference = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["uid"]}]
    _apply(
        node_cluster,
        node_namespace,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "dependent", "ownerReferences": reference},
            "data": {"k": "v"},
        },
    )
    _apply(
        node_cluster,
        node_namespace,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "dependent", "ownerReferences": reference},
            "spec": {"holderIdentity": "test"},
        },
    )
    node_cluster.kubectl("delete", "-n", node_namespace, "configmap", "owner")
    _wait_gone(node_cluster, node_namespace, "configmap/dependent")
    _wait_gone(node_cluster, node_namespace, "lease.coordination.k8s.io/dependent")


def test_namespace_deletion_completes(node_cluster: NodeCluster) -> None:
    namespace = node_cluster.create_namespace(prefix="doomed")
    _apply(
        node_cluster,
        namespace,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "content"}},
    )
    _apply(node_cluster, namespace, _pod("sleeper", node_cluster.busybox_image, "sleep 3600"))
    node_cluster.kubectl("delete", "namespace", namespace, "--wait=true", f"--timeout={TIMEOUT}")
    result = node_cluster.kubectl("get", "namespace", namespace, check=False)
    assert result.returncode != 0
    assert "NotFound" in result.stderr


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                command = cmdline.replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{proc.name}: {command}")
    return found


def test_stop_leaves_nothing_behind(node_cluster_factory: Callable[..., NodeCluster]) -> None:
    """A second node (its own cgroup root, bridge, addresses and sockets) with a pod still
    running at stop(): afterwards no process, mount, cgroup, interface or cache entry of it
    remains, and its working directory is gone."""
    cluster = node_cluster_factory()
    with cluster:
        namespace = cluster.create_namespace(prefix="leave")
        _apply(cluster, namespace, _pod("sleeper", cluster.busybox_image, "sleep 3600"))
        cluster.kubectl(
            "wait", "-n", namespace, "--for=condition=Ready", "pod/sleeper", f"--timeout={TIMEOUT}"
        )
        resources = cluster.resources
        assert resources is not None and cluster.workdir is not None
        workdir = str(cluster.workdir)
        assert _processes_mentioning(resources.containerd_socket)  # the pod's shim
        assert cluster.leftovers()  # so the check below can fail
    assert cluster.leftovers() == []
    assert _processes_mentioning(workdir) == []
    assert _processes_mentioning(resources.containerd_socket) == []
    assert [
        line for line in Path("/proc/self/mountinfo").read_text().splitlines() if workdir in line
    ] == []
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    for name in (resources.bridge, resources.veth, resources.veth_peer):
        assert f" {name}:" not in links and f" {name}@" not in links
    assert not any(Path("/sys/fs/cgroup").glob(f"*/{resources.cgroup_root.lstrip('/')}"))
    assert not any(Path("/var/lib/cni").glob(f"**/{resources.network}-*"))
    assert not Path(workdir).exists()
