"""The operator image, built from the Dockerfile without Docker (scripts/build-image).

``ordo_image_archive()`` returns the OCI archive (``.cache/image/ordo-<version>.oci.tar``,
named ``localhost/ordo:dev`` and ``localhost/ordo:<version>``) for
``node_cluster.import_image(path)``; the first call of a session runs scripts/build-image,
which is a no-op when nothing it builds from changed. ``podman_run`` runs the same image with
podman, the way this sandbox allows (runc, cgroupfs, limits within the hard limits).
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "build-image"
IMAGE = "localhost/ordo:dev"
# crun refuses this machine's cgroup v1 hybrid set-up and there is no systemd.
PODMAN = ("podman", "--runtime", "runc", "--cgroup-manager", "cgroupfs")
# podman's defaults ask for more than the hard limits, which cannot be raised here.
RUN_LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")
# Minutes on a cold machine: mmdebstrap, wheel downloads and the podman build.
BUILD_TIMEOUT = 1800.0

_lock = threading.Lock()
_archive: Path | None = None


class ImageBuildError(RuntimeError):
    """scripts/build-image failed or printed no archive."""


def ordo_image_archive() -> Path:
    """The operator image's OCI archive, built by scripts/build-image once per session."""
    global _archive
    with _lock:
        if _archive is None or not _archive.is_file():
            _archive = _build()
        return _archive


def _build() -> Path:
    try:
        result = subprocess.run(
            [str(BUILD_SCRIPT)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=BUILD_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageBuildError(f"scripts/build-image could not run: {exc}") from exc
    if result.returncode != 0:
        tail = "\n".join(result.stderr.splitlines()[-40:])
        raise ImageBuildError(
            f"scripts/build-image exited {result.returncode}; the end of its output:\n{tail}"
        )
    lines = result.stdout.strip().splitlines()
    path = Path(lines[-1]) if lines else None
    if path is None or not path.is_file():
        raise ImageBuildError(f"scripts/build-image printed no archive path: {result.stdout!r}")
    return path


def podman(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PODMAN, *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


def podman_run(
    *command: str,
    entrypoint: str | None = None,
    options: Sequence[str] = (),
    read_only: bool = True,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """``podman run --rm`` of the image with no network. ``read_only`` runs it as Kubernetes
    does with ``readOnlyRootFilesystem`` and an emptyDir on /tmp: a read-only root and a tmpfs
    on /tmp only (podman's own extra tmpfs mounts on /run and /var/tmp are turned off)."""
    args = ["run", "--rm", "--network=none", *RUN_LIMITS]
    if read_only:
        args += ["--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp"]
    if entrypoint is not None:
        args += ["--entrypoint", entrypoint]
    return podman(*args, *options, IMAGE, *command, timeout=timeout)
