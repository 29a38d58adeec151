"""Errors of the test control plane."""

from __future__ import annotations

import subprocess

__all__ = [
    "BinariesNotFoundError",
    "ControlPlaneError",
    "KubectlError",
    "NodeDependenciesError",
    "PortTakenError",
]


class ControlPlaneError(RuntimeError):
    """The control plane could not be started or used."""


class BinariesNotFoundError(ControlPlaneError):
    """etcd, kube-apiserver or kubectl is missing: run ``scripts/build-controlplane``."""


class NodeDependenciesError(BinariesNotFoundError):
    """The node mode lacks kubelet & co., containerd, runc, CNI plugins, the pause image or
    root: run ``scripts/build-controlplane`` and ``scripts/node-deps`` (as root)."""


class PortTakenError(ControlPlaneError):
    """A port picked as free was taken before the child bound it; the start is retried."""


class KubectlError(subprocess.CalledProcessError):
    """A kubectl command failed; ``str()`` includes its stderr."""

    def __str__(self) -> str:
        stderr = (self.stderr or "").strip()
        return f"{super().__str__()}\n{stderr}" if stderr else super().__str__()
