"""Status of every configuration kind on the real control plane, written by an operator that
runs with the kustomize base's RBAC (as a Role in the test namespace), so a missing
watch or status rule shows up as a forbidden request; and the Argo CD health checks
(docs/argocd/) run on Tasks and Agents read back from the API server."""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.credentials import opted_in
from tests.support.operator import OperatorProcess, apply, get_json, wait_for, wait_task
from tests.unit.test_argocd_health import argo_health

from ordo_devcluster import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
CANARY = "sk-canary-object-status-41d2"
FORBIDDEN_MARKERS = ("forbidden", " 403")


def operator_role(namespace: str) -> str:
    """The kustomize base's ClusterRole rules as a Role (+ binding) in `namespace`."""
    docs = list(yaml.safe_load_all((ROOT / "manifests" / "base" / "rbac.yaml").read_text()))
    rules = next(d for d in docs if d and d["kind"] == "ClusterRole")["rules"]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "ordo", "namespace": namespace},
        "rules": rules,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "ordo", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ordo"},
        "subjects": [{"kind": "ServiceAccount", "name": "ordo", "namespace": namespace}],
    }
    return yaml.safe_dump_all([role, binding])


@pytest.fixture
def operator(
    control_plane: ControlPlane, namespace: str, operator_factory: Callable[..., OperatorProcess]
) -> OperatorProcess:
    apply(control_plane, namespace, operator_role(namespace))
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "ordo")
    return operator_factory("--max-concurrent-tasks", "1", kubeconfig=kubeconfig)


class TcpListener:
    """A TCP server on loopback (its own thread) that accepts and counts connections and
    the bytes sent to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.connections = 0
        self.received = b""
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                self.connections += 1
                conn.settimeout(2)
                try:
                    while chunk := conn.recv(4096):
                        self.received += chunk
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ready(cp: ControlPlane, ns: str, kind: str, name: str) -> dict[str, Any]:
    body = get_json(cp, kind, name, "-n", ns)
    for cond in (body.get("status") or {}).get("conditions") or []:
        if cond["type"] == "Ready":
            return dict(cond) | {"_status": body.get("status") or {}}
    return {"_status": body.get("status") or {}}


def wait_ready(
    cp: ControlPlane, ns: str, kind: str, name: str, status: str, reason: str | None = None
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        cond = ready(cp, ns, kind, name)
        if cond.get("status") == status and (reason is None or cond.get("reason") == reason):
            return cond
        return None

    found: dict[str, Any] = wait_for(check, 40, what=f"{kind}/{name} Ready={status} {reason}")
    return found


def secret(name: str, **data: str) -> str:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": opted_in({"name": name}),
            "data": encoded,
        }
    )


OBJECTS = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: keyed}
spec:
  provider: mock
  model: mock-1
  credentials: {secretRef: {name: model-key, key: apiKey}}
  mock: {turns: [{text: done}]}
---
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {name: lookup}
spec: {type: mock, description: a canned tool, mock: {result: ok}, idempotent: true}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: analyst, labels: {team: blue}}
spec: {modelRef: keyed, tools: [lookup], roles: [reader]}
---
apiVersion: ordo.dev/v1alpha1
kind: AgentRole
metadata: {name: reader}
spec: {permissions: ["tool:lookup:invoke"]}
---
apiVersion: ordo.dev/v1alpha1
kind: ToolPermission
metadata: {name: guard-lookup}
spec: {toolRef: lookup, requiredPermissions: ["tool:lookup:invoke"]}
---
apiVersion: ordo.dev/v1alpha1
kind: ToolPermission
metadata: {name: guard-search}
spec: {toolRef: web-search, requiredPermissions: ["tool:web-search:invoke"]}
---
apiVersion: ordo.dev/v1alpha1
kind: AgentPolicy
metadata: {name: blue}
spec: {agentSelector: {matchLabels: {team: blue}}, blockedTools: [lookup]}
---
apiVersion: ordo.dev/v1alpha1
kind: AgentPolicy
metadata: {name: red}
spec: {agentSelector: {matchLabels: {team: red}}}
---
apiVersion: ordo.dev/v1alpha1
kind: AgentPolicy
metadata: {name: typo}
spec: {blockedTools: [lokup]}
"""


def test_every_kind_reports_ready(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    cp, ns = control_plane, namespace
    apply(cp, ns, OBJECTS)

    # AgentRole: Ready, and which Agents hold it.
    role = wait_ready(cp, ns, "agentrole", "reader", "True", "Valid")
    assert role["_status"]["agents"] == 1 and "analyst" in role["message"]

    # ToolPermission: the one whose Tool is missing names it, until the Tool appears.
    assert wait_ready(cp, ns, "toolpermission", "guard-lookup", "True", "Resolved")
    missing = wait_ready(cp, ns, "toolpermission", "guard-search", "False", "ToolNotFound")
    assert "'web-search'" in missing["message"]

    # AgentPolicy: what it selects; SelectsNothing; a blocked Tool that does not exist.
    blue = wait_ready(cp, ns, "agentpolicy", "blue", "True", "Selected")
    assert blue["_status"]["selectedAgents"] == 1 and "analyst" in blue["message"]
    red = wait_ready(cp, ns, "agentpolicy", "red", "False", "SelectsNothing")
    assert red["_status"]["selectedAgents"] == 0
    typo = wait_ready(cp, ns, "agentpolicy", "typo", "False", "ToolNotFound")
    assert "lokup" in typo["message"] and typo["_status"]["selectedAgents"] == 1

    # The Agent names its ModelEndpoint's missing Secret, then the missing key.
    agent = wait_ready(cp, ns, "agent", "analyst", "False", "SecretNotFound")
    assert agent["message"] == (
        "ModelEndpoint/keyed: Secret 'model-key' not found or is not labelled "
        "ordo.dev/credential=true"
    )
    apply(cp, ns, secret("model-key", other=CANARY))
    agent = wait_for(
        lambda: "no key" in (c := ready(cp, ns, "agent", "analyst")).get("message", "") and c,
        40,
        what="Agent names the missing key",
    )
    assert agent["message"] == "ModelEndpoint/keyed: Secret 'model-key' has no key 'apiKey'"
    apply(cp, ns, secret("model-key", apiKey=CANARY))
    wait_ready(cp, ns, "agent", "analyst", "True", "Resolved")

    # Watches reach dependents: a new Tool readies its ToolPermission; a relabelled Agent moves
    # from one policy to the other; an Agent that drops the role is no longer counted.
    apply(cp, ns, "apiVersion: ordo.dev/v1alpha1\nkind: Tool\nmetadata: {name: web-search}\n"
          "spec: {type: mock, description: search}")  # fmt: skip
    wait_ready(cp, ns, "toolpermission", "guard-search", "True", "Resolved")
    cp.kubectl("label", "agent", "analyst", "-n", ns, "team=red", "--overwrite")
    red = wait_ready(cp, ns, "agentpolicy", "red", "True", "Selected")
    assert red["_status"]["selectedAgents"] == 1
    wait_ready(cp, ns, "agentpolicy", "blue", "False", "SelectsNothing")
    cp.kubectl("patch", "agent", "analyst", "-n", ns, "--type=merge", "-p",
               '{"spec":{"roles":null}}')  # fmt: skip
    wait_for(
        lambda: ready(cp, ns, "agentrole", "reader")["_status"].get("agents") == 0,
        40,
        what="AgentRole count drops to 0",
    )

    # Printer columns.
    table = cp.kubectl("get", "agentpolicies", "-n", ns).stdout
    assert table.split("\n")[0].split()[-3:] == ["AGENTS", "READY", "AGE"], table
    table = cp.kubectl("get", "agentroles", "-n", ns).stdout
    assert table.split("\n")[0].split()[-3:] == ["AGENTS", "READY", "AGE"], table
    assert "READY" in cp.kubectl("get", "toolpermissions", "-n", ns).stdout

    # Nothing secret in any status; no request the operator's RBAC refused.
    everything = cp.kubectl("get", "ordo", "-n", ns, "-o", "yaml").stdout
    assert CANARY not in everything
    refused = [
        line
        for line in operator.logs().lower().splitlines()
        if "could not write ready" in line
        or ("ordo.dev" in line and any(m in line for m in FORBIDDEN_MARKERS))
    ]
    assert not refused, "\n".join(refused[-5:])


def test_memory_and_http_tool_probe_reachability(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    cp, ns = control_plane, namespace
    listener = TcpListener()
    down = closed_port()
    try:
        apply(
            cp,
            ns,
            f"""
apiVersion: ordo.dev/v1alpha1
kind: Memory
metadata: {{name: up}}
spec: {{provider: redis, url: "redis://127.0.0.1:{listener.port}/0"}}
---
apiVersion: ordo.dev/v1alpha1
kind: Memory
metadata: {{name: down}}
spec: {{provider: postgres, url: "postgresql://ordo@127.0.0.1:{down}/ordo"}}
---
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {{name: fetch}}
spec:
  type: http
  description: fetch
  http: {{url: "http://127.0.0.1:{listener.port}/run?token={CANARY}"}}
---
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {{name: gone}}
spec:
  type: http
  description: gone
  http: {{url: "http://127.0.0.1:{down}/run"}}
""",
        )
        assert wait_ready(cp, ns, "memory", "up", "True", "Reachable")
        gone = wait_ready(cp, ns, "memory", "down", "False", "Unreachable")
        assert f"127.0.0.1:{down}" in gone["message"]
        assert wait_ready(cp, ns, "tool", "fetch", "True", "Reachable")
        assert wait_ready(cp, ns, "tool", "gone", "False", "Unreachable")
        assert listener.connections >= 2 and listener.received == b""
        # Re-checked on resync (every 5 s here): the server goes away, the Memory follows.
        listener.close()
        wait_ready(cp, ns, "memory", "up", "False", "Unreachable")
        wait_ready(cp, ns, "tool", "fetch", "False", "Unreachable")
        statuses = [t.get("status") for t in get_json(cp, "tools", "-n", ns)["items"]]
        assert CANARY not in json.dumps(statuses)
    finally:
        listener.close()


AGENTS = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: slow}
spec: {provider: mock, model: mock-1, mock: {turns: [{text: late, delay: 30s}]}}
---
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: quick}
spec: {provider: mock, model: mock-1, mock: {turns: [{text: done}]}}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: slow}
spec: {modelRef: slow, limits: {timeout: 8s}}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: quick}
spec: {modelRef: quick}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: broken}
spec: {modelRef: nowhere}
"""

TASK = """
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: {name}}}
spec: {{agentRef: {agent}, input: do the thing}}
"""


def test_argocd_health_of_real_tasks_and_agents(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    """With one Task slot: a slow Task runs (Progressing), a second waits (Progressing,
    WaitingForCapacity); the slow one times out (Degraded), the second then succeeds
    (Healthy). A resolved Agent is Healthy, one with a missing ModelEndpoint Degraded."""
    cp, ns = control_plane, namespace
    apply(cp, ns, AGENTS)

    def health(kind: str, name: str) -> dict[str, str]:
        return argo_health(get_json(cp, kind, name, "-n", ns))

    wait_ready(cp, ns, "agent", "quick", "True")
    assert health("agent", "quick")["status"] == "Healthy"
    wait_ready(cp, ns, "agent", "broken", "False")
    broken = health("agent", "broken")
    assert broken["status"] == "Degraded" and "ModelEndpoint/nowhere" in broken["message"]

    apply(cp, ns, TASK.format(name="runs", agent="slow"))
    wait_for(
        lambda: (
            (get_json(cp, "task", "runs", "-n", ns).get("status") or {}).get("phase") == "Running"
        ),
        30,
        what="Task running",
    )
    apply(cp, ns, TASK.format(name="waits", agent="quick"))
    waiting = wait_for(
        lambda: (
            (h := health("task", "waits"))["status"] == "Progressing"
            and "WaitingForCapacity" in h["message"]
            and h
        ),
        30,
        what="second Task waiting for capacity",
    )
    assert waiting["message"].startswith("Pending")
    running = health("task", "runs")
    assert running["status"] == "Progressing" and running["message"].startswith("Running")

    assert wait_task(cp, ns, "runs", timeout=60)["status"]["phase"] == "Failed"
    failed = health("task", "runs")
    assert failed["status"] == "Degraded" and "Timeout" in failed["message"], failed
    assert wait_task(cp, ns, "waits", timeout=60)["status"]["phase"] == "Succeeded"
    assert health("task", "waits")["status"] == "Healthy"
