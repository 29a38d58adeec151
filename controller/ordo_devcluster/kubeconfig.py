"""Self-contained kubeconfig files (CA and credentials inlined, mode 0600)."""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import yaml

from ordo_devcluster.pki import Pki

__all__ = ["CONTEXT", "admin_credentials", "write_kubeconfig"]

#: The cluster and context name in every kubeconfig written here.
CONTEXT = "ordo-devcluster"


def admin_credentials(pki: Pki) -> dict[str, str]:
    """The ``user`` entry of the admin client certificate (``system:masters``)."""
    return {
        "client-certificate-data": _b64(pki.admin_cert),
        "client-key-data": _b64(pki.admin_key),
    }


def write_kubeconfig(
    path: Path, *, server: str, ca_cert: Path, user: str, credentials: Mapping[str, str]
) -> Path:
    """Write a kubeconfig with one cluster, one user and one context; return its path."""
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)},
            }
        ],
        "users": [{"name": user, "user": dict(credentials)}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": user}}],
        "current-context": CONTEXT,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with _private_file(path) as handle:
        yaml.safe_dump(config, handle, sort_keys=False)
    return path


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


@contextlib.contextmanager
def _private_file(path: Path) -> Iterator[IO[str]]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yield handle
