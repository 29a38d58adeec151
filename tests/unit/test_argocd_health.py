"""The Argo CD health checks in docs/argocd/ run in a real Lua 5.1 interpreter (lupa; Argo CD
runs gopher-lua, a Lua 5.1) on Task and Agent objects shaped as the operator writes them.
tests/cluster/test_object_status.py runs them on objects read back from the control plane."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import lupa.lua51 as lupa
import pytest

ROOT = Path(__file__).resolve().parents[2]
ARGOCD = ROOT / "docs" / "argocd"
HEALTH = {"Task": ARGOCD / "health-task.lua", "Agent": ARGOCD / "health-agent.lua"}
ARGO_STATUSES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing"}


def argo_health(obj: dict[str, Any]) -> dict[str, str]:
    """Run the kind's health script as Argo CD does: `obj` is the object as a Lua table, the
    script returns {status = ..., message = ...}. Libraries Argo CD's sandbox lacks (io, os,
    require, loading code) are removed first, so a script that needs them fails here."""
    lua = lupa.LuaRuntime(register_eval=False, register_builtins=False)
    lua.execute("io, os, require, dofile, loadfile, loadstring, load, debug = nil")
    script = HEALTH[obj["kind"]].read_text()
    check = lua.execute("return function(obj)\n" + script + "\nend")
    result = check(lua.table_from(obj, recursive=True))
    out = {"status": result["status"], "message": result["message"]}
    assert out["status"] in ARGO_STATUSES, out
    assert isinstance(out["message"], str), out
    return out


def condition(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 1,
    }


def task(status: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Task",
        "metadata": {"name": "t", "namespace": "team-a", "generation": 1},
        "spec": {"agentRef": "agent", "input": "summarise the incident"},
    }
    if status is not None:
        body["status"] = status
    return body


SUCCEEDED = task(
    {
        "phase": "Succeeded",
        "reason": "Succeeded",
        "message": "finished in 2 steps",
        "step": 2,
        "output": "the answer",
        "conditions": [
            condition("Complete", "True", "Succeeded", "finished in 2 steps"),
            condition("Ready", "True", "Succeeded", "finished in 2 steps"),
            condition("Running", "False", "Succeeded", "the run ended"),
            condition("Scheduled", "True", "Claimed"),
            condition("Succeeded", "True", "Succeeded", "finished in 2 steps"),
        ],
    }
)
FAILED = task(
    {
        "phase": "Failed",
        "reason": "Timeout",
        "message": "the Task ran past its timeout of 1s",
        "step": 1,
        "conditions": [
            condition("Failed", "True", "Timeout", "the Task ran past its timeout of 1s"),
            condition("Ready", "False", "Timeout", "the Task ran past its timeout of 1s"),
            condition("Running", "False", "Timeout", "the run ended"),
            condition("Stalled", "True", "Timeout", "the Task ran past its timeout of 1s"),
            condition("Succeeded", "False", "Timeout", "the Task ran past its timeout of 1s"),
        ],
    }
)
RUNNING = task(
    {
        "phase": "Running",
        "step": 3,
        "executionId": "e-1",
        "conditions": [
            condition("Running", "True", "Started", "step 3"),
            condition("Scheduled", "True", "Claimed"),
        ],
    }
)
PENDING = task(
    {
        "phase": "Pending",
        "conditions": [
            condition(
                "Scheduled",
                "False",
                "WaitingForCapacity",
                "1 Task(s) are running, the limit of this operator (--max-concurrent-tasks 1)",
            )
        ],
    }
)


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (SUCCEEDED, "Healthy", ["Succeeded", "finished in 2 steps"]),
        (FAILED, "Degraded", ["Failed", "Timeout", "timeout of 1s"]),
        (RUNNING, "Progressing", ["Running", "step 3"]),
        (PENDING, "Progressing", ["Pending", "WaitingForCapacity"]),
        (task(None), "Progressing", ["Waiting"]),
        (task({"phase": "Pending"}), "Progressing", ["Pending"]),
    ],
    ids=["succeeded", "failed", "running", "pending", "no-status", "pending-bare"],
)
def test_task_health(body: dict[str, Any], status: str, words: list[str]) -> None:
    health = argo_health(body)
    assert health["status"] == status, health
    for word in words:
        assert word in health["message"], health


def test_cancelled_task_is_degraded() -> None:
    body = copy.deepcopy(FAILED)
    body["status"].update(phase="Cancelled", reason="Cancelled", message="cancelled by spec.cancel")
    health = argo_health(body)
    assert health["status"] == "Degraded" and "Cancelled" in health["message"], health


def test_task_output_never_reaches_the_message() -> None:
    body = copy.deepcopy(SUCCEEDED)
    body["status"]["output"] = "CANARY-output-5b1e"
    assert "CANARY" not in argo_health(body)["message"]


def agent(conditions: list[dict[str, Any]] | None, generation: int = 1) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Agent",
        "metadata": {"name": "a", "namespace": "team-a", "generation": generation},
        "spec": {"modelRef": "model"},
    }
    if conditions is not None:
        body["status"] = {"observedGeneration": 1, "conditions": conditions}
    return body


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (agent([condition("Ready", "True", "Resolved", "every referenced object exists")]),
         "Healthy", ["Resolved"]),
        (
            agent([condition("Ready", "False", "SecretNotFound",
                             "ModelEndpoint/model: Secret 'key' not found")]),
            "Degraded",
            ["SecretNotFound", "Secret 'key' not found"],
        ),
        (agent([condition("Ready", "Unknown", "CannotRead", "503")]), "Progressing", ["CannotRead"]),
        (agent(None), "Progressing", ["Waiting"]),
        (
            agent([condition("Ready", "True", "Resolved", "ok")], generation=2),
            "Progressing",
            ["generation 2"],
        ),
    ],
    ids=["ready", "not-ready", "unknown", "no-status", "stale-generation"],
)  # fmt: skip
def test_agent_health(body: dict[str, Any], status: str, words: list[str]) -> None:
    health = argo_health(body)
    assert health["status"] == status, health
    for word in words:
        assert word in health["message"], health


def test_argocd_cm_snippet_embeds_the_scripts() -> None:
    """docs/argocd/argocd-cm.yaml carries exactly the two scripts under Argo CD's keys."""
    import yaml

    cm = yaml.safe_load((ARGOCD / "argocd-cm.yaml").read_text())
    data = cm["data"]
    assert data["resource.customizations.health.ordo.dev_Task"] == HEALTH["Task"].read_text()
    assert data["resource.customizations.health.ordo.dev_Agent"] == HEALTH["Agent"].read_text()
