"""The generated CRDs on the real API server: they establish, every example applies, every
invalid manifest is rejected with a message naming the field, the status subresource is
split from spec, printer columns and defaults show on read-back."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ordo.api import KINDS
from ordo_devcluster import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
INVALID = sorted((ROOT / "tests" / "data" / "invalid").glob("*.yaml"))
EXAMPLES = sorted(p for p in (ROOT / "examples").iterdir() if p.is_dir())


def _expectations(path: Path) -> tuple[str, str | None]:
    text = path.read_text()
    field = re.search(r"^# expect: (\S+)", text, re.MULTILINE)
    message = re.search(r"^# expect-message: (.+)$", text, re.MULTILINE)
    assert field, f"{path.name} has no '# expect:' line"
    return field.group(1), message.group(1).strip() if message else None


def test_every_crd_is_established(control_plane: ControlPlane) -> None:
    for info in KINDS.values():
        crd = json.loads(
            control_plane.kubectl("get", "crd", f"{info.plural}.ordo.dev", "-o", "json").stdout
        )
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions.get("Established") == "True", info.plural
        assert conditions.get("NamesAccepted") == "True", info.plural
    names = control_plane.kubectl(
        "api-resources", "--api-group=ordo.dev", "-o", "name"
    ).stdout.split()
    assert len(names) == len(KINDS)  # one API resource per kind the API defines


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_applies(control_plane: ControlPlane, namespace: str, example: Path) -> None:
    docs = [p for p in example.glob("*.yaml")]
    assert docs
    control_plane.kubectl("apply", "-n", namespace, "-f", str(example))
    applied = control_plane.kubectl("get", "ordo", "-n", namespace, "-o", "name").stdout.split()
    assert applied, f"nothing from {example.name} is in the namespace"


@pytest.mark.parametrize("manifest", INVALID, ids=lambda p: p.name)
def test_invalid_manifest_is_rejected_naming_the_field(
    control_plane: ControlPlane, namespace: str, manifest: Path
) -> None:
    field, message = _expectations(manifest)
    result = control_plane.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", str(manifest), check=False
    )
    assert result.returncode != 0, f"{manifest.name} was accepted by the API server"
    if manifest.name == "empty-name.yaml":
        assert "name" in result.stderr
        return
    error = result.stderr
    leaf = field.rsplit(".", 1)[-1].split("[")[0]
    named = field in error or leaf in error or (message is not None and message in error)
    assert named, f"{manifest.name}: the API server's message does not name {field}:\n{error}"


def test_status_subresource_rejects_spec_changes(
    control_plane: ControlPlane, namespace: str
) -> None:
    control_plane.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "quickstart"))
    control_plane.kubectl(
        "patch",
        "task",
        "research-operators",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"spec":{"agentRef":"changed"},"status":{"phase":"Pending"}}',
    )
    task = json.loads(
        control_plane.kubectl(
            "get", "task", "research-operators", "-n", namespace, "-o", "json"
        ).stdout
    )
    assert task["spec"]["agentRef"] == "research-agent"  # the status subresource ignored spec
    assert task["status"]["phase"] == "Pending"
    # And the main resource ignores status.
    control_plane.kubectl(
        "patch",
        "task",
        "research-operators",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"status":{"phase":"Succeeded"}}',
    )
    task = json.loads(
        control_plane.kubectl(
            "get", "task", "research-operators", "-n", namespace, "-o", "json"
        ).stdout
    )
    assert task["status"]["phase"] == "Pending"


def test_printer_columns_and_defaults_on_read_back(
    control_plane: ControlPlane, namespace: str
) -> None:
    control_plane.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input="""
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: plain}
spec: {modelRef: m}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {name: t}
spec: {agentRef: plain}
""",
    )
    agent = json.loads(
        control_plane.kubectl("get", "agent", "plain", "-n", namespace, "-o", "json").stdout
    )
    assert agent["spec"]["limits"] == {"maxSteps": 10, "timeout": "5m"}
    header = control_plane.kubectl("get", "tasks", "-n", namespace).stdout.splitlines()[0].split()
    assert header == [
        "NAME",
        "AGENT",
        "TEAM",  # a Team Task names a Team instead of an Agent
        "PARENT",  # a child Task's parent (label ordo.dev/parent): the tree at a glance
        "PHASE",
        "REASON",
        "STEPS",
        "TOKENS",
        "MODE",
        "AWAITING-APPROVAL",  # a waiting Task stays Running: this column tells it apart
        "AGE",
    ]
    header = control_plane.kubectl("get", "agents", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "MODEL", "TOOLS", "READY", "SUSPENDED-BY", "AGE"]
    short = control_plane.kubectl("get", "otask,agt", "-n", namespace, "-o", "name").stdout.split()
    assert "task.ordo.dev/t" in short and "agent.ordo.dev/plain" in short


def test_tool_in_the_builtin_namespace_is_refused(
    control_plane: ControlPlane, namespace: str
) -> None:
    """A Tool `memory.write` would be `memory_write` to the model and pass the allowlists and
    ToolPermissions of the built-in: `kubectl apply` is refused naming metadata.name, a
    `memory.`-prefixed generateName too, and a name that only looks alike is accepted."""
    manifest = "apiVersion: ordo.dev/v1alpha1\nkind: Tool\nmetadata: {%s}\nspec: {type: mock}\n"
    for meta in ("name: memory.write", "name: memory.read", "generateName: memory."):
        verb = "create" if meta.startswith("generateName") else "apply"
        result = control_plane.kubectl(
            verb, "-n", namespace, "-f", "-", input=manifest % meta, check=False
        )
        assert result.returncode != 0, meta
        assert "metadata.name" in result.stderr, result.stderr
        assert "reserved for the built-in memory tools" in result.stderr, result.stderr
    control_plane.kubectl(
        "apply", "-n", namespace, "-f", "-", input=manifest % "name: memory-write"
    )
    names = control_plane.kubectl("get", "tools", "-n", namespace, "-o", "name").stdout.split()
    assert names == ["tool.ordo.dev/memory-write"]
