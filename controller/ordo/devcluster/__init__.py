"""A throw-away Kubernetes control plane (etcd + kube-apiserver) on loopback, for development
and the cluster tests.

The binaries are built from pinned Go modules by ``scripts/build-controlplane``; see
``docs/development.md``. Use it as a library::

    from ordo.devcluster import ControlPlane

    with ControlPlane(crds="crds") as cp:
        cp.kubectl("get", "namespaces")

or from a shell: ``python -m ordo.devcluster --crds crds/``.
"""

from ordo.devcluster.controlplane import (
    BinariesNotFoundError,
    ControlPlane,
    ControlPlaneError,
    KubectlError,
    find_binaries,
)

__all__ = [
    "BinariesNotFoundError",
    "ControlPlane",
    "ControlPlaneError",
    "KubectlError",
    "find_binaries",
]
