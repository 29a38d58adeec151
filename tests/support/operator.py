"""Run `ordo operator` as a subprocess against the test control plane, and poll Tasks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ordo_devcluster import ControlPlane

TERMINAL = ("Succeeded", "Failed", "Cancelled")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OperatorProcess:
    """`ordo operator -n NS` in a subprocess; logs go to a file the test can read.

    ``kubeconfig`` makes the operator authenticate with that kubeconfig instead of the admin
    one (e.g. ``control_plane.service_account_kubeconfig(...)``, so RBAC applies).
    ``scope`` replaces ``-n NS`` (e.g. ``["--all-namespaces"]`` or the flags of a rendered
    Deployment); ``namespace`` then only names the log file.
    """

    def __init__(
        self,
        control_plane: ControlPlane,
        namespace: str,
        log_dir: Path,
        *args: str,
        env: dict[str, str] | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        scope: Sequence[str] | None = None,
    ) -> None:
        self.cp = control_plane
        self.namespace = namespace
        self.args = list(args)
        self.scope = ["-n", namespace] if scope is None else list(scope)
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path = log_dir / f"operator-{namespace}.log"
        self.env = control_plane.env(env or os.environ)
        if kubeconfig is not None:
            self.env["KUBECONFIG"] = str(kubeconfig)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> OperatorProcess:
        self.starts += 1
        log = self.log_path.open("ab")
        cmd = [
            sys.executable,
            "-m",
            "ordo.cli",
            "operator",
            *self.scope,
            "--metrics-port",
            str(self.metrics_port),
            "--health-port",
            str(self.health_port),
            "--resync-seconds",
            "5",
            *self.args,
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"operator exited with {self.proc.returncode}:\n{self.logs()[-3000:]}"
                )
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.health_port}/readyz", timeout=1
                ) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"operator not ready in 30s:\n{self.logs()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as when a node dies."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        self.proc = None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metrics(self) -> str:
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return str(r.read().decode())


def get_json(cp: ControlPlane, *args: str) -> Any:
    return json.loads(cp.kubectl("get", *args, "-o", "json").stdout)


def tasks(cp: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(cp, "tasks", "-n", namespace)["items"]
    return items


def wait_for(
    predicate: Callable[[], Any],
    timeout: float = 60,
    interval: float = 0.25,
    what: str = "condition",
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def wait_task(
    cp: ControlPlane,
    namespace: str,
    name: str,
    phases: Iterable[str] = TERMINAL,
    timeout: float = 60,
) -> dict[str, Any]:
    wanted = tuple(phases)

    def check() -> dict[str, Any] | None:
        body: dict[str, Any] = get_json(cp, "task", name, "-n", namespace)
        return body if (body.get("status") or {}).get("phase") in wanted else None

    result: dict[str, Any] = wait_for(check, timeout, what=f"Task {name} to reach {wanted}")
    return result


def apply(cp: ControlPlane, namespace: str, manifest: str | Path) -> None:
    if isinstance(manifest, Path):
        cp.kubectl("apply", "-n", namespace, "-f", str(manifest))
    else:
        cp.kubectl("apply", "-n", namespace, "-f", "-", input=manifest)


def events(cp: ControlPlane, namespace: str, name: str | None = None) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(cp, "events", "-n", namespace)["items"]
    return [e for e in items if name is None or e["involvedObject"].get("name") == name]
