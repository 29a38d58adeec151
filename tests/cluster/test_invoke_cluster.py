"""`ordo invoke` and `kubectl ordo invoke` against the real control plane, with the operator
running as a subprocess: exit codes for Succeeded, Failed, --no-wait, --timeout, and a SIGINT
or SIGTERM that cancels the Task, also as a CI system sends it: no TTY, stdin closed, and at
any moment, the create request in flight included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.support.faultproxy import FaultProxy
from tests.support.operator import OperatorProcess, apply, get_json, tasks, wait_for, wait_task

from ordo_devcluster import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart"
VENV_BIN = Path(sys.executable).parent
ANSWER = "Kubernetes operators for LLM agents let platform teams declare agents"
CANARY = "CANARY-invoke-input-7f3a"

SLOW = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: slow-model}
spec:
  provider: mock
  model: mock-1
  mock:
    turns:
      - {text: "too late", delay: 120s}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: slow-agent}
spec:
  modelRef: slow-model
  prompt: You take your time.
  limits: {maxSteps: 2, timeout: 300s}
"""

LOOPING = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: looping-model}
spec:
  provider: mock
  model: mock-1
  mock:
    turns:
      - toolCalls: [{tool: web-search, arguments: {query: again}}]
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: looping-agent}
spec:
  modelRef: looping-model
  prompt: You never finish.
  tools: [web-search]
  roles: [researcher]
  limits: {maxSteps: 1, timeout: 60s}
"""


def env(cp: ControlPlane) -> dict[str, str]:
    out = cp.env(os.environ)
    out["PATH"] = f"{VENV_BIN}{os.pathsep}{out.get('PATH', '')}"
    return out


def invoke(
    cp: ControlPlane, *args: str, stdin: str | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ordo.cli.main", "invoke", *args],
        env=env(cp),
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def created_name(stderr: str) -> str:
    for line in stderr.splitlines():
        if line.startswith("task/") and " created in namespace " in line:
            return line.split()[0].removeprefix("task/")
    raise AssertionError(f"no 'created' line in stderr:\n{stderr}")


def test_invoke_quickstart_succeeds_prints_output(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    apply(control_plane, namespace, QUICKSTART)
    result = invoke(
        control_plane, "research-agent", "-n", namespace, "--input", f"summarise {CANARY}"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(ANSWER), result.stdout
    name = created_name(result.stderr)
    assert name.startswith("research-agent-")
    assert "step 1: tool web-search allowed" in result.stderr
    assert "step 1: tool web-search succeeded" in result.stderr
    assert f"task/{name} Succeeded (2 step(s)" in result.stderr
    # Progress never carries content: neither the input nor the answer.
    assert CANARY not in result.stderr
    assert ANSWER not in result.stderr
    task = get_json(control_plane, "task", name, "-n", namespace)
    assert task["spec"]["agentRef"] == "research-agent"
    assert task["spec"]["input"] == f"summarise {CANARY}"
    assert task["status"]["phase"] == "Succeeded"
    assert result.stdout.strip() == task["status"]["output"].strip()

    # -o json: the Task's status; input from stdin.
    as_json = invoke(control_plane, "research-agent", "-", "-n", namespace, "-o", "json", stdin="x")
    assert as_json.returncode == 0, as_json.stderr
    status = json.loads(as_json.stdout)
    assert status["phase"] == "Succeeded" and status["output"].startswith(ANSWER)
    name = created_name(as_json.stderr)
    assert get_json(control_plane, "task", name, "-n", namespace)["spec"]["input"] == "x"


def test_kubectl_plugin_runs_the_quickstart(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    apply(control_plane, namespace, QUICKSTART)
    assert (VENV_BIN / "kubectl-ordo").exists(), "pip install -e . installs the kubectl plugin"
    plugins = subprocess.run(
        [str(control_plane.binaries / "kubectl"), "plugin", "list", "--name-only"],
        env=env(control_plane),
        capture_output=True,
        text=True,
    )
    assert "kubectl-ordo" in plugins.stdout, plugins.stdout + plugins.stderr
    kubectl = str(control_plane.binaries / "kubectl")
    result = subprocess.run(
        [kubectl, "ordo", "invoke", "research-agent", "-n", namespace, "--input", "go"],
        env=env(control_plane),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(ANSWER)
    assert created_name(result.stderr).startswith("research-agent-")


def test_failing_agent_exits_1_with_reason(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    apply(control_plane, namespace, QUICKSTART)
    apply(control_plane, namespace, LOOPING)
    result = invoke(control_plane, "looping-agent", "-n", namespace, "--input", "go")
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    name = created_name(result.stderr)
    assert f"task/{name} Failed: MaxStepsExceeded" in result.stderr
    status = get_json(control_plane, "task", name, "-n", namespace)["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "MaxStepsExceeded")


def test_missing_agent_and_unreachable_api_exit_2(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    result = invoke(control_plane, "no-such-agent", "-n", namespace)
    assert result.returncode == 2
    assert "Agent 'no-such-agent' not found" in result.stderr
    assert tasks(control_plane, namespace) == []
    # A kubeconfig whose server is a closed port: a connection error, exit 2.
    with open(control_plane.kubeconfig) as f:
        text = f.read()
    dead = tmp_path / "dead-kubeconfig"
    dead.write_text(text.replace(control_plane.server, "https://127.0.0.1:1"))
    result = invoke(control_plane, "research-agent", "-n", namespace, "--kubeconfig", str(dead))
    assert result.returncode == 2
    assert "TransportError" in result.stderr


def test_no_wait_prints_the_name(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    apply(control_plane, namespace, QUICKSTART)
    result = invoke(control_plane, "research-agent", "-n", namespace, "--no-wait")
    assert result.returncode == 0, result.stderr
    name = result.stdout.strip()
    assert name.startswith("research-agent-") and name == created_name(result.stderr)
    assert wait_task(control_plane, namespace, name)["status"]["phase"] == "Succeeded"


def test_timeout_exits_4_and_leaves_the_task_running(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    apply(control_plane, namespace, SLOW)
    result = invoke(control_plane, "slow-agent", "-n", namespace, "--timeout", "1s")
    assert result.returncode == 4, result.stderr
    name = created_name(result.stderr)
    assert f"waiting for task/{name}; it keeps running" in result.stderr
    task = get_json(control_plane, "task", name, "-n", namespace)
    assert task["status"]["phase"] in ("Pending", "Running")
    assert not task["spec"].get("cancel")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_without_tty_cancels_the_task_and_exits(
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorProcess,
    sig: signal.Signals,
    code: int,
) -> None:
    """Ctrl-C without a TTY, or SIGTERM (a CI system stopping the job), cancels the Task
    instead of leaving it running."""
    apply(control_plane, namespace, SLOW)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ordo.cli.main", "invoke", "slow-agent", "-n", namespace],
        env=env(control_plane),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def running() -> str | None:
            for task in tasks(control_plane, namespace):
                if (task.get("status") or {}).get("phase") == "Running":
                    return str(task["metadata"]["name"])
            return None

        name = wait_for(running, timeout=60, what="the invoked Task to run")
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, stderr
    assert f"cancelling task/{name}" in stderr
    assert f"task/{name} Cancelled" in stderr
    assert stdout == ""
    task = get_json(control_plane, "task", name, "-n", namespace)
    assert task["spec"]["cancel"] is True
    assert task["status"]["phase"] == "Cancelled"


def ci_invoke(cp: ControlPlane, *args: str) -> subprocess.Popen[str]:
    """`ordo invoke` as a CI job runs it: CI=true, no TTY, stdin closed (fd 0 not open)."""
    return subprocess.Popen(
        [sys.executable, "-m", "ordo.cli.main", "invoke", *args],
        env={**env(cp), "CI": "true"},
        stdin=None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: os.close(0),
    )


def stopped_like_ci(proc: subprocess.Popen[str], when: Callable[[], object]) -> tuple[str, str]:
    """SIGTERM once `when()` is true, then the process's (stdout, stderr)."""
    try:
        wait_for(when, timeout=60, what="the moment to send SIGTERM")
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def only_task(cp: ControlPlane, namespace: str) -> dict[str, Any] | None:
    found = tasks(cp, namespace)
    return found[0] if found else None


def test_sigterm_with_stdin_closed_cancels_the_task(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    apply(control_plane, namespace, SLOW)
    proc = ci_invoke(control_plane, "slow-agent", "-n", namespace)

    def running() -> bool:
        task = only_task(control_plane, namespace)
        return task is not None and (task.get("status") or {}).get("phase") == "Running"

    stdout, stderr = stopped_like_ci(proc, running)
    assert proc.returncode == 143, stderr
    task = only_task(control_plane, namespace)
    assert task is not None and task["spec"]["cancel"] is True
    name = task["metadata"]["name"]
    assert f"task/{name} Cancelled" in stderr and stdout == ""
    assert task["status"]["phase"] == "Cancelled"


def test_sigterm_while_the_task_is_being_created_cancels_it(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    """The create request is applied but its answer is late (a slow API server, or just bad
    timing): a SIGTERM then must not leave a Task running that nobody waits for."""
    apply(control_plane, namespace, SLOW)
    with FaultProxy(
        control_plane.kubeconfig, tmp_path / "proxy", rate=1.0, kinds=("delay",),
        delay_range=(3.0, 3.0),
    ) as proxy:  # fmt: skip
        proxy.arm()  # every request answered 3 s after it was applied
        proc = ci_invoke(
            control_plane, "slow-agent", "-n", namespace, "--kubeconfig", str(proxy.kubeconfig)
        )
        _, stderr = stopped_like_ci(proc, lambda: only_task(control_plane, namespace))
    assert proc.returncode == 143, stderr
    task = only_task(control_plane, namespace)
    assert task is not None and task["spec"].get("cancel") is True, stderr
    name = task["metadata"]["name"]
    status = wait_task(control_plane, namespace, name)["status"]
    assert status["phase"] == "Cancelled"


def test_sigterm_before_the_task_is_created_creates_none(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    apply(control_plane, namespace, SLOW)
    with FaultProxy(
        control_plane.kubeconfig, tmp_path / "proxy", rate=1.0, kinds=("delay",),
        delay_range=(3.0, 3.0),
    ) as proxy:  # fmt: skip
        proxy.arm()
        proc = ci_invoke(
            control_plane, "slow-agent", "-n", namespace, "--kubeconfig", str(proxy.kubeconfig)
        )
        # The Agent is being read (its answer takes 3 s): no Task exists yet.
        _, stderr = stopped_like_ci(proc, lambda: proxy.requests["GET"] >= 1)
    assert proc.returncode == 143, stderr
    assert "no Task was created" in stderr
    assert tasks(control_plane, namespace) == []


def test_without_watch_or_agent_read_permission_it_polls(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    """A user who may create, get and patch Tasks, but not watch them nor read Agents: the
    Agent check is skipped and the Task is followed with a GET every 0.5 s."""
    apply(control_plane, namespace, QUICKSTART)
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "invoker"},
        "rules": [
            {"apiGroups": ["ordo.dev"], "resources": ["tasks"], "verbs": ["create", "get", "patch"]}
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "invoker"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "invoker"},
        "subjects": [{"kind": "ServiceAccount", "name": "invoker", "namespace": namespace}],
    }
    apply(control_plane, namespace, json.dumps(role) + "\n---\n" + json.dumps(binding))
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "invoker")
    watch = control_plane.kubectl(
        "get",
        "tasks",
        "-n",
        namespace,
        "--watch-only",
        "--request-timeout=2s",
        kubeconfig=kubeconfig,
        check=False,
    )
    assert "forbidden" in watch.stderr.lower()
    result = invoke(
        control_plane, "research-agent", "-n", namespace, "--kubeconfig", str(kubeconfig)
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(ANSWER)
    assert "step 1: tool web-search allowed" in result.stderr
