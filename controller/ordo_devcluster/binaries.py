"""Where the pinned etcd, kube-apiserver and kubectl live."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ordo_devcluster.errors import BinariesNotFoundError

__all__ = ["BIN_ENV", "REQUIRED_BINARIES", "default_bin_dir", "find_binaries"]

#: Environment variable naming a directory that holds etcd, kube-apiserver and kubectl.
BIN_ENV = "ORDO_CONTROLPLANE_BIN"
REQUIRED_BINARIES = ("etcd", "kube-apiserver", "kubectl")

_KUBE_PIN = re.compile(r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)", re.MULTILINE)


def _repo_root() -> Path | None:
    """The checkout holding ``tools/controlplane``, searched upwards from cwd and this file."""
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for candidate in (start, *start.parents):
            if (candidate / "tools" / "controlplane" / "kube" / "go.mod").is_file():
                return candidate
    return None


def default_bin_dir() -> Path | None:
    """Where ``scripts/build-controlplane`` puts the binaries of the pinned release."""
    root = _repo_root()
    if root is None:
        return None
    go_mod = (root / "tools" / "controlplane" / "kube" / "go.mod").read_text()
    match = _KUBE_PIN.search(go_mod)
    if match is None:
        return None
    return root / ".cache" / "controlplane" / match.group(1) / "bin"


def find_binaries(bin_dir: str | os.PathLike[str] | None = None) -> Path:
    """The directory holding etcd, kube-apiserver and kubectl.

    Looks at ``bin_dir``, then ``$ORDO_CONTROLPLANE_BIN``, then the build cache of this
    checkout. Raises :class:`BinariesNotFoundError` with instructions when they are missing.
    """
    if bin_dir is not None:
        directory: Path | None = Path(bin_dir)
        source = "the bin_dir argument"
    elif os.environ.get(BIN_ENV):
        directory = Path(os.environ[BIN_ENV])
        source = f"${BIN_ENV}"
    else:
        directory = default_bin_dir()
        source = "the build cache of this checkout"
    if directory is None:
        raise BinariesNotFoundError(
            "cannot locate the control-plane binaries: not inside an ordo checkout and "
            f"${BIN_ENV} is not set. Set {BIN_ENV} to a directory holding "
            f"{', '.join(REQUIRED_BINARIES)}."
        )
    missing = [name for name in REQUIRED_BINARIES if not os.access(directory / name, os.X_OK)]
    if missing:
        raise BinariesNotFoundError(
            f"{', '.join(missing)} not found in {directory} ({source}). Build the pinned "
            "control plane with `scripts/build-controlplane` (Go >= 1.26; the first build "
            f"takes several minutes), or set {BIN_ENV} to a directory holding "
            f"{', '.join(REQUIRED_BINARIES)}."
        )
    return directory.resolve()
