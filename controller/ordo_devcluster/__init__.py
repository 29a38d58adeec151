"""A throw-away Kubernetes control plane (etcd + kube-apiserver) on loopback, for development
and the cluster tests. Test infrastructure: not part of the ``ordo`` runtime package and not
installed in the operator image (see ``docs/development.md``).

The binaries are built from pinned Go modules by ``scripts/build-controlplane``. Use it as a
library::

    from ordo_devcluster import ControlPlane

    with ControlPlane(crds="crds") as cp:
        cp.kubectl("get", "namespaces")

or from a shell: ``python -m ordo_devcluster --crds crds/``.

``NodeCluster`` adds kube-controller-manager, kube-scheduler, containerd and a kubelet: a real
single node where pods run (``python -m ordo_devcluster node up``).

Modules: :mod:`~ordo_devcluster.controlplane` (the :class:`ControlPlane` class),
:mod:`~ordo_devcluster.node` (:class:`NodeCluster`), :mod:`~ordo_devcluster.nodeconfig`,
:mod:`~ordo_devcluster.nodestate` (host resources and their cleanup),
:mod:`~ordo_devcluster.ociimage` (FROM-scratch OCI archives),
:mod:`~ordo_devcluster.processes` (child supervision), :mod:`~ordo_devcluster.pki`
(certificates), :mod:`~ordo_devcluster.kubeconfig`, :mod:`~ordo_devcluster.binaries`,
:mod:`~ordo_devcluster.errors`.
"""

from ordo_devcluster.binaries import BIN_ENV, REQUIRED_BINARIES, default_bin_dir, find_binaries
from ordo_devcluster.controlplane import ControlPlane
from ordo_devcluster.errors import (
    BinariesNotFoundError,
    ControlPlaneError,
    KubectlError,
    NodeDependenciesError,
)
from ordo_devcluster.node import NodeCluster

__all__ = [
    "BIN_ENV",
    "REQUIRED_BINARIES",
    "BinariesNotFoundError",
    "ControlPlane",
    "ControlPlaneError",
    "KubectlError",
    "NodeCluster",
    "NodeDependenciesError",
    "default_bin_dir",
    "find_binaries",
]
