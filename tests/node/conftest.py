"""Fixtures for tests on a real single-node Kubernetes cluster (kubelet, containerd, runc).

Every test under ``tests/node`` is marked ``node`` and ``cluster`` automatically, so
``scripts/test --quick`` and ``pytest -m "not cluster"`` leave them out and ``pytest -m node``
selects them. The node needs root, the binaries of ``scripts/build-controlplane`` (kubelet,
kube-controller-manager, kube-scheduler besides the control plane) and what
``scripts/node-deps`` installs and builds (containerd, runc, CNI plugins, the pause and busybox
images); without them these tests **fail** when ``CI`` is set and are **skipped** otherwise,
saying what is missing. ``scripts/test`` (full mode) prepares all of it.

Fixtures
--------
``node_cluster`` (session)
    A started :class:`ordo_devcluster.NodeCluster`, CRDs from ``crds/`` installed and
    Established, node ``Ready`` and schedulable. Pods really run; the garbage collector,
    the namespace controller and the Job controller work. Everything ``control_plane`` of
    tests/cluster offers, and:

    * ``node_cluster.kubectl(*args, check=True, input=None)``: ``CompletedProcess[str]``;
      raises ``KubectlError`` (stderr in the message) on failure when ``check``
    * ``node_cluster.kubeconfig``: admin kubeconfig path (``system:masters``)
    * ``node_cluster.server``: ``https://<node IP>:<port>`` (kube-apiserver binds to the node
      IP, an address of this machine on a veth of the node's own, so pods reach it too)
    * ``node_cluster.env()``: environment with ``KUBECONFIG`` set, for subprocesses
    * ``node_cluster.import_image(path)``: import an OCI/docker archive into containerd's
      ``k8s.io`` namespace; returns the image names. There is no registry: pods use
      ``imagePullPolicy: Never`` (or ``IfNotPresent`` with a ``localhost/`` name)
    * ``node_cluster.create_namespace(prefix="test")``: a new namespace, returned once its
      ``default`` ServiceAccount exists
    * ``node_cluster.busybox_image``: ``localhost/ordo-busybox:dev``, imported at start, a
      static busybox (``sh``, ``echo``, ``sleep``, ``wget``, ...)
    * ``node_cluster.node_name`` / ``node_cluster.node_ip``: the node and its InternalIP; a
      server bound to the node IP is reachable from pods with and without ``hostNetwork``
    * ``node_cluster.apiserver_env()``: ``{"KUBERNETES_SERVICE_HOST": ..., "_PORT": ...}``
      to put in a pod's ``env`` so in-cluster clients reach the API (there is no kube-proxy,
      so the ``kubernetes`` Service IP does not route). The ServiceAccount token and
      ``ca.crt`` are mounted as usual
    * ``node_cluster.workdir``: logs (``kubelet.log``, ``containerd.log``,
      ``kube-controller-manager.log``, ...)

    Pod traffic stays on this machine: pods have no route to the internet (no NAT).

``node_namespace`` (function)
    A fresh namespace (with its ``default`` ServiceAccount) for this test. Deleting it works
    (the namespace controller runs), but tests need not: the cluster goes at session end.

``node_cluster_factory`` (function)
    ``node_cluster_factory(**kwargs)`` returns a new, not yet started ``NodeCluster`` (same
    fail/skip rule), for tests that need a node of their own; use it as a context manager.
    Nodes keep apart (own cgroup root, bridge, addresses, sockets), but each costs about
    10 s to start and several hundred MB of memory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ordo_devcluster import BinariesNotFoundError
from ordo_devcluster.node import NodeCluster

REPO_ROOT = Path(__file__).resolve().parents[2]
CRDS_DIR = REPO_ROOT / "crds"
_HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark everything under tests/node with ``node`` and ``cluster`` (before ``-m`` deselects)."""
    for item in items:
        if _HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.node)
            item.add_marker(pytest.mark.cluster)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def _new_node_cluster(**kwargs: Any) -> NodeCluster:
    """A not-yet-started NodeCluster; fails (CI) or skips (elsewhere) when something is missing."""
    try:
        return NodeCluster(**kwargs)
    except BinariesNotFoundError as exc:
        if _in_ci():
            pytest.fail(f"node tests need the single-node cluster: {exc}", pytrace=False)
        pytest.skip(f"single-node cluster not available: {exc}")


@pytest.fixture(scope="session")
def node_cluster() -> Iterator[NodeCluster]:
    with _new_node_cluster(crds=CRDS_DIR) as cluster:
        yield cluster


@pytest.fixture
def node_namespace(node_cluster: NodeCluster) -> str:
    return node_cluster.create_namespace(prefix="node")


@pytest.fixture
def node_cluster_factory() -> Callable[..., NodeCluster]:
    return _new_node_cluster
