"""Process supervision for the control plane's children (etcd, kube-apiserver).

Every child runs in its own process group (stopped with SIGTERM, then SIGKILL) and, on Linux,
gets ``PR_SET_PDEATHSIG`` = SIGKILL so that a parent that is SIGKILLed leaves nothing behind.
Working directories left by such a parent are swept by :func:`sweep_stale_workdirs`.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ordo_devcluster.errors import ControlPlaneError, PortTakenError

__all__ = [
    "OWNER_FILE",
    "WORKDIR_PREFIX",
    "Child",
    "free_ports",
    "pid_alive",
    "spawn",
    "stop_child",
    "sweep_stale_workdirs",
    "tail",
    "terminate_group",
    "wait_ready",
]

WORKDIR_PREFIX = "ordo-devcluster-"
OWNER_FILE = "owner.pid"

_PR_SET_PDEATHSIG = 1


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that were free a moment ago (the caller retries on a
    :class:`PortTakenError`, since another process may bind one first)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def die_with_parent_hook() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGKILL when this process dies (Linux only).

    The kernel sends the signal when the *thread* that forked the child exits, so start the
    control plane from a thread that outlives it (the main thread, normally).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


@dataclass
class Child:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]


def spawn(
    binary: Path, args: list[str], *, name: str, workdir: Path, die_with_parent: bool
) -> Child:
    """Start ``binary`` in its own session with stdout/stderr appended to ``workdir/name.log``."""
    log_path = workdir / f"{name}.log"
    log_file = log_path.open("ab")
    try:
        popen = subprocess.Popen(
            [str(binary), *args],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            start_new_session=True,
            preexec_fn=die_with_parent_hook() if die_with_parent else None,
        )
    except BaseException:
        log_file.close()
        raise
    return Child(name=name, popen=popen, log_path=log_path, log_file=log_file)


def wait_ready(
    child: Child, deadline: float, ready: Callable[[], bool], what: str, *, timeout: float
) -> None:
    """Poll ``ready`` every 0.1 s until it is true; raise when ``child`` exits first (a
    :class:`PortTakenError` when its log says a port was taken) or at ``deadline``."""
    last_error: BaseException | None = None
    while True:
        code = child.popen.poll()
        if code is not None:
            log = tail(child.log_path)
            if "address already in use" in log:
                raise PortTakenError(log)
            raise ControlPlaneError(
                f"{child.name} exited with code {code} while waiting for {what}; "
                f"last lines of {child.log_path}:\n{log}"
            )
        try:
            if ready():
                return
            last_error = None
        except (OSError, http.client.HTTPException) as exc:
            last_error = exc
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"timed out after {timeout:.0f}s waiting for {what}"
                + (f" (last error: {last_error})" if last_error else "")
                + f"; last lines of {child.log_path}:\n{tail(child.log_path)}"
            )
        time.sleep(0.1)


def terminate_group(popen: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the child's process group, SIGKILL it after ``grace`` seconds, reap the child."""
    pgid = popen.pid  # start_new_session=True: the child leads its own group
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        try:
            popen.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    # Anything else left in the group (nothing, normally) goes too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def stop_child(child: Child, grace: float) -> None:
    """Terminate the child's process group and close its log file."""
    try:
        terminate_group(child.popen, grace)
    finally:
        child.log_file.close()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_workdirs() -> None:
    """Remove working directories whose owning process is gone (e.g. a SIGKILLed pytest)."""
    base = Path(tempfile.gettempdir())
    for directory in base.glob(f"{WORKDIR_PREFIX}*"):
        if (directory / "node.json").exists():
            continue  # a node's: mounts and interfaces first (nodestate.sweep_stale_nodes)
        try:
            owner = int((directory / OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            continue
        if not pid_alive(owner):
            shutil.rmtree(directory, ignore_errors=True)


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
