"""`ordo gateway` in a subprocess against a test control plane (tests/cluster)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from tests.support.operator import free_port
from tests.support.packaging import helm_template, to_yaml

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


def install_chart_gateway(cp: ControlPlane, ns: str, tmp_path: Path) -> str:
    """Apply what the chart (gateway.enabled, admission policies, watching `ns`) gives the
    gateway: its ServiceAccount, roles and bindings, and the requester admission policy.
    Returns the ServiceAccount's name (in `ns`)."""
    release = f"ordo-gw{uuid.uuid4().hex[:6]}"
    values = {
        "watchNamespaces": [ns],
        "admissionPolicies": {"enabled": True},
        "gateway": {"enabled": True},
    }
    docs: list[dict[str, Any]] = helm_template(
        tmp_path, release=release, namespace=ns, values=values
    )
    account = f"{release}-gateway"
    wanted = [
        d
        for d in docs
        if (
            d["metadata"]["name"].startswith(account)
            and d["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RoleBinding")
        )
        or (
            d["kind"].startswith("ValidatingAdmissionPolicy")
            and d["metadata"]["name"] == f"{release}-task-requester"
        )
    ]
    assert len(wanted) == 7  # account, 2 roles, 2 bindings, the policy and its binding
    cp.kubectl("apply", "--server-side", "-f", "-", input=to_yaml(wanted))
    return account
