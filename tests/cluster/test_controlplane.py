"""The test control plane itself: it comes up, enforces RBAC, installs CRDs, leaves nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from ordo_devcluster import ControlPlane, KubectlError

pytestmark = pytest.mark.cluster

WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.devcluster.example.com"},
    "spec": {
        "group": "devcluster.example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {"size": {"type": "integer", "minimum": 1}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


def _alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [pid for pid in pids if _alive(pid)]
        if not left:
            return []
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


def _write_widget_crd(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "widgets.yaml").write_text(yaml.safe_dump(WIDGET_CRD))
    return directory


def test_apiserver_is_ready(control_plane: ControlPlane) -> None:
    status, body = control_plane.request("/readyz")
    assert (status, body) == (200, b"ok")
    assert control_plane.server.startswith("https://127.0.0.1:")
    assert control_plane.running


def test_kubectl_matches_apiserver_version(control_plane: ControlPlane) -> None:
    versions = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    client, server = versions["clientVersion"], versions["serverVersion"]
    assert client["gitVersion"] == server["gitVersion"]
    assert server["gitVersion"].startswith("v1.")
    assert "master" not in server["gitVersion"]  # version ldflags were applied


def test_kubectl_lists_system_namespaces(control_plane: ControlPlane) -> None:
    names = control_plane.kubectl("get", "namespaces", "-o", "name").stdout.split()
    assert {"namespace/default", "namespace/kube-system"} <= set(names)


def test_namespace_fixture_gives_a_fresh_active_namespace(
    namespace: str, kubectl: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    phase = kubectl("get", "namespace", namespace, "-o", "jsonpath={.status.phase}").stdout
    assert phase == "Active"
    assert kubectl("get", "configmaps", "-n", namespace, "-o", "name").stdout == ""


def test_rbac_forbids_unprivileged_service_account(
    control_plane: ControlPlane, namespace: str
) -> None:
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "nobody")
    who = control_plane.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig)
    username = json.loads(who.stdout)["status"]["userInfo"]["username"]
    assert username == f"system:serviceaccount:{namespace}:nobody"

    with pytest.raises(KubectlError) as denied:
        control_plane.kubectl("get", "secrets", "-n", namespace, kubeconfig=kubeconfig)
    assert "forbidden" in denied.value.stderr.lower()
    # The admin (system:masters) may.
    control_plane.kubectl("get", "secrets", "-n", namespace)

    # A Role granting it makes the same request succeed: RBAC is evaluated, not a blanket no.
    control_plane.kubectl(
        "create", "role", "read-secrets", "--verb=list", "--resource=secrets", "-n", namespace
    )
    control_plane.kubectl(
        "create",
        "rolebinding",
        "read-secrets",
        "--role=read-secrets",
        f"--serviceaccount={namespace}:nobody",
        "-n",
        namespace,
    )
    deadline = time.monotonic() + 10
    while True:
        allowed = control_plane.kubectl(
            "get", "secrets", "-n", namespace, kubeconfig=kubeconfig, check=False
        )
        if allowed.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert allowed.returncode == 0, allowed.stderr


def test_apply_crds_waits_until_established(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    applied = control_plane.apply_crds(_write_widget_crd(tmp_path / "crds"))
    assert applied == [
        "customresourcedefinition.apiextensions.k8s.io/widgets.devcluster.example.com"
    ]
    widget = {
        "apiVersion": "devcluster.example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": namespace},
        "spec": {"size": 3},
    }
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(widget))
    assert control_plane.kubectl(
        "get", "widgets", "-n", namespace, "-o", "name"
    ).stdout.split() == ["widget.devcluster.example.com/w"]
    # The schema is enforced by the apiserver.
    widget["spec"] = {"size": 0}
    rejected = control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(widget), check=False)
    assert rejected.returncode != 0
    assert "spec.size" in rejected.stderr


def test_empty_crd_directory_is_a_no_op(control_plane: ControlPlane, tmp_path: Path) -> None:
    assert control_plane.apply_crds(tmp_path) == []
    assert control_plane.apply_crds(tmp_path / "missing") == []


def test_stop_leaves_no_processes_even_after_an_exception(
    control_plane_factory: Callable[..., ControlPlane], tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    cp = control_plane_factory(crds=_write_widget_crd(tmp_path / "crds"), kubeconfig=kubeconfig)
    with pytest.raises(RuntimeError, match="boom"), cp:
        pids = cp.pids
        workdir = cp.workdir
        assert set(pids) == {"etcd", "kube-apiserver"}
        assert all(_alive(pid) for pid in pids.values())
        assert cp.kubeconfig == kubeconfig.resolve()
        cp.kubectl("get", "crd", "widgets.devcluster.example.com")
        raise RuntimeError("boom")
    assert _wait_gone(list(pids.values()), timeout=1) == []
    assert workdir is not None and not workdir.exists()
    assert not cp.running
    cp.stop()  # idempotent


def _start_in_subprocess(code: str) -> tuple[subprocess.Popen[str], dict[str, int], Path]:
    """Run ``code`` (which starts a control plane) in a child Python; read its pids line."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    pids: dict[str, int] = {}
    workdir = Path()
    output = []
    for line in proc.stdout:
        output.append(line)
        if line.startswith("pids:"):
            pids = json.loads(line.split(":", 1)[1].strip().replace("'", '"'))
        if line.startswith("workdir:"):
            workdir = Path(line.split(":", 1)[1].strip())
        if "press Ctrl-C" in line:
            break
    else:
        proc.wait()
        pytest.fail("control plane subprocess ended early:\n" + "".join(output))
    return proc, pids, workdir


@pytest.mark.usefixtures("control_plane")  # skip or fail like the rest without binaries
def test_cli_stops_everything_on_sigterm() -> None:
    proc, pids, workdir = _start_in_subprocess(
        "import sys; from ordo_devcluster.__main__ import main; sys.exit(main())"
    )
    try:
        assert all(_alive(pid) for pid in pids.values())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()
    assert _wait_gone(list(pids.values()), timeout=1) == []
    assert not workdir.exists()


@pytest.mark.usefixtures("control_plane")
def test_sigkilled_parent_leaves_no_orphans(
    control_plane_factory: Callable[..., ControlPlane],
) -> None:
    proc, pids, workdir = _start_in_subprocess(
        "import time\n"
        "from ordo_devcluster import ControlPlane\n"
        "cp = ControlPlane().start()\n"
        "print(f'pids: {cp.pids}')\n"
        "print(f'workdir: {cp.workdir}')\n"
        "print('press Ctrl-C')\n"
        "time.sleep(600)\n"
    )
    try:
        assert pids and all(_alive(pid) for pid in pids.values())
    finally:
        proc.kill()  # SIGKILL: no atexit, no finally; PR_SET_PDEATHSIG must do the work
        proc.wait()
    assert _wait_gone(list(pids.values())) == []
    # The next control plane to start sweeps the working directory left behind.
    assert workdir.exists()
    with control_plane_factory() as cp:
        assert cp.running
    assert not workdir.exists()
