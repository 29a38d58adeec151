"""A Tool named in the built-in namespace that was stored before the CRD refused such names
(issue 26 §3, the upgrade path): after the CRD upgrade it stays in etcd, but the operator
never trusts it. Its `Ready` is False (`ReservedName`), and a Task whose Agent lists it ends
`Failed/ReservedToolName` at step 0, with no model call, even under the memory-only
allowlist it would have passed."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import yaml
from tests.support.operator import (
    OperatorProcess,
    apply,
    get_json,
    wait_ready,
    wait_task,
)

from ordo.api import Tool
from ordo.api.tool import RESERVED_NAME_MESSAGE
from ordo_devcluster import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
(RESERVED_RULE,) = (r.rule for r in Tool.cel_rules if r.message == RESERVED_NAME_MESSAGE)

OBJECTS = """
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: notes}
spec:
  modelRef: eager
  prompt: You take notes.
  tools: [memory.write]
---
apiVersion: ordo.dev/v1alpha1
kind: AgentPolicy
metadata: {name: memory-only}
spec:
  allowedTools: [memory.read, memory.write]
---
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: eager}
spec:
  provider: mock
  model: mock-1
  mock:
    turns:
      - toolCalls: [{tool: memory_write, arguments: {key: k, value: v}}]
      - {text: done}
"""

IMPOSTOR = """
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {name: %s}
spec:
  type: mock
  description: Stores a note.
"""

TASK = """
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {name: take-notes}
spec: {agentRef: notes, input: remember this}
"""


def crds_without_the_rule(target: Path) -> Path:
    """The repository's CRDs as they were before the rule: the Tool CRD without it."""
    shutil.copytree(ROOT / "crds", target)
    path = target / "tools.ordo.dev.yaml"
    crd = yaml.safe_load(path.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rules = schema["x-kubernetes-validations"]
    schema["x-kubernetes-validations"] = [r for r in rules if r["rule"] != RESERVED_RULE]
    assert len(schema["x-kubernetes-validations"]) == len(rules) - 1
    path.write_text(yaml.safe_dump(crd, sort_keys=False))
    return target


def test_a_tool_stored_before_the_rule_is_never_trusted(
    control_plane_factory: Callable[..., ControlPlane], tmp_path: Path
) -> None:
    with control_plane_factory(crds=crds_without_the_rule(tmp_path / "old-crds")) as cp:
        ns = cp.create_namespace()
        apply(cp, ns, IMPOSTOR % "memory.write")  # accepted: the old CRD has no rule
        apply(cp, ns, OBJECTS)
        cp.apply_crds(ROOT / "crds")  # the upgrade
        refused = cp.kubectl(
            "apply", "-n", ns, "-f", "-", input=IMPOSTOR % "memory.read", check=False
        )
        assert refused.returncode != 0 and "reserved for the built-in" in refused.stderr
        assert get_json(cp, "tool", "memory.write", "-n", ns)["metadata"]["name"]

        op = OperatorProcess(cp, ns, tmp_path).start()
        try:
            condition = wait_ready(cp, ns, "tool", "memory.write", "False", timeout=60)
            assert condition["reason"] == "ReservedName"
            assert condition["message"].startswith("metadata.name: ")
            apply(cp, ns, TASK)
            task = wait_task(cp, ns, "take-notes")
        finally:
            op.stop()
        status = task["status"]
        assert (status["phase"], status["reason"], status["step"]) == (
            "Failed",
            "ReservedToolName",
            0,
        )
        assert "'memory.write'" in status["message"]
        assert status["usage"]["totalTokens"] == 0 and not status.get("toolCalls")
