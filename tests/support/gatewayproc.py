"""`ordo gateway` in a subprocess against a test control plane (tests/cluster)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support.operator import free_port

from ordo_devcluster import ControlPlane

AUDIENCE = "ordo-gateway"


class GatewayProcess:
    """`ordo gateway -n NS` in a subprocess, as the admin of the control plane."""

    def __init__(
        self, cp: ControlPlane, namespace: str, log_dir: Path, kubeconfig: Path | None = None
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.metrics_port = free_port()
        self.log_path = log_dir / "gateway.log"
        cmd = [
            sys.executable,
            "-m",
            "ordo.cli.main",
            "gateway",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--namespace",
            namespace,
            "--audience",
            AUDIENCE,
            "--metrics-port",
            str(self.metrics_port),
        ]
        env = cp.env(os.environ)
        if kubeconfig is not None:
            env["KUBECONFIG"] = str(kubeconfig)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited:\n{self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"gateway not ready:\n{self.log_path.read_text()[-3000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def metric(self, line_start: str) -> float:
        """The value of the /metrics sample line that starts with `line_start` (0: none)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            lines = r.read().decode().splitlines()
        found = [float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(line_start)]
        return found[0] if found else 0.0
