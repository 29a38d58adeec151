"""Finished-Task retention on the real control plane: `spec.ttlSecondsAfterFinished` and the
operator's `--task-ttl` (operator/lifecycle/retention.py). Timing is never asserted: deletions are
polled for with generous bounds, and "kept" is checked after another Task's later deadline
has passed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.support.operator import OperatorProcess, apply, get_json, wait_for, wait_task

from ordo_devcluster import ControlPlane, KubectlError

ENDPOINT = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: model}
spec:
  provider: mock
  model: mock-1
  mock:
    turns: [{toolCalls: [{tool: lookup}]}, {text: "done"}]
---
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {name: lookup}
spec:
  type: mock
  description: a canned tool
  mock: {result: "ok"}
  idempotent: true
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: agent}
spec:
  modelRef: model
  prompt: You are terse.
  tools: [lookup]
"""


def task(name: str, ttl: int | None = None, finalizer: str | None = None) -> str:
    meta = {"name": name} | ({"finalizers": [finalizer]} if finalizer else {})
    spec: dict[str, object] = {"agentRef": "agent", "input": "do the thing"}
    if ttl is not None:
        spec["ttlSecondsAfterFinished"] = ttl
    return json.dumps(
        {"apiVersion": "ordo.dev/v1alpha1", "kind": "Task", "metadata": meta, "spec": spec}
    )


def exists(cp: ControlPlane, ns: str, kind: str, name: str) -> bool:
    out = cp.kubectl("get", kind, name, "-n", ns, "--ignore-not-found", "-o", "name").stdout
    return bool(out.strip())


def deleted_count(op: OperatorProcess, ns: str) -> float:
    m = re.search(rf'^ordo_tasks_deleted_total\{{namespace="{ns}"\}} (\S+)$', op.metrics(), re.M)
    return float(m.group(1)) if m else 0.0


def test_ttl_deletes_finished_tasks_with_their_checkpoints_and_honours_edits_and_finalizers(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp, ns = control_plane, namespace
    op = OperatorProcess(cp, ns, tmp_path, "--keep-checkpoints").start()
    try:
        apply(cp, ns, ENDPOINT)
        for name, ttl, fin in (
            ("kept", None, None),
            ("patched", 3600, None),
            ("held", 1, "example.com/hold"),
            ("short", 2, None),
        ):
            apply(cp, ns, task(name, ttl, fin))
        for name in ("kept", "patched", "held", "short"):
            assert wait_task(cp, ns, name)["status"]["phase"] == "Succeeded"
        patched_uid = get_json(cp, "task", "patched", "-n", ns)["metadata"]["uid"]
        held_uid = get_json(cp, "task", "held", "-n", ns)["metadata"]["uid"]
        # --keep-checkpoints: the checkpoint outlives the run (but not the Task: below).
        assert exists(cp, ns, "configmap", f"ordo-checkpoint-{patched_uid}")

        wait_for(lambda: not exists(cp, ns, "task", "short"), 60, what="short deleted")

        # A finalizer is honoured: the Task is marked for deletion, not removed.
        held = wait_for(
            lambda: get_json(cp, "task", "held", "-n", ns)["metadata"].get("deletionTimestamp"),
            60,
            what="held marked for deletion",
        )
        assert held and exists(cp, ns, "configmap", f"ordo-checkpoint-{held_uid}")
        cp.kubectl(
            "patch",
            "task",
            "held",
            "-n",
            ns,
            "--type=merge",
            "-p",
            '{"metadata":{"finalizers":null}}',
        )
        wait_for(lambda: not exists(cp, ns, "task", "held"), 30, what="held deleted")
        wait_for(
            lambda: not exists(cp, ns, "configmap", f"ordo-checkpoint-{held_uid}"),
            30,
            what="held's checkpoint deleted once the Task is gone",
        )

        # The TTL is mutable (the rest of the spec is not); an edit is re-evaluated.
        with pytest.raises(KubectlError, match="immutable"):
            cp.kubectl(
                "patch", "task", "patched", "-n", ns, "--type=merge",
                "-p", '{"spec":{"instructions":"changed"}}',
            )  # fmt: skip
        assert exists(cp, ns, "task", "patched")
        cp.kubectl(
            "patch", "task", "patched", "-n", ns, "--type=merge",
            "-p", '{"spec":{"ttlSecondsAfterFinished":1}}',
        )  # fmt: skip
        wait_for(lambda: not exists(cp, ns, "task", "patched"), 60, what="patched deleted")
        wait_for(
            lambda: not exists(cp, ns, "configmap", f"ordo-checkpoint-{patched_uid}"),
            30,
            what="its checkpoint deleted with it",
        )

        # A Task without TTL (and no --task-ttl) stays, long after the others went.
        assert exists(cp, ns, "task", "kept")
        assert wait_for(lambda: deleted_count(op, ns) == 3.0, 15, what="3 deletions counted")
    finally:
        op.stop()


def test_a_task_that_expired_while_the_operator_was_down_is_deleted_after_restart(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp, ns = control_plane, namespace
    op = OperatorProcess(cp, ns, tmp_path, "--task-ttl", "1h").start()
    try:
        apply(cp, ns, ENDPOINT)
        apply(cp, ns, task("expired", 3600))
        apply(cp, ns, task("by-default"))
        wait_task(cp, ns, "expired")
        wait_task(cp, ns, "by-default")
    finally:
        op.stop()
    # While no operator runs, the TTL is shortened: it has passed when the next one starts.
    cp.kubectl(
        "patch", "task", "expired", "-n", ns, "--type=merge",
        "-p", '{"spec":{"ttlSecondsAfterFinished":0}}',
    )  # fmt: skip
    assert exists(cp, ns, "task", "expired")
    op = OperatorProcess(cp, ns, tmp_path, "--task-ttl", "1h").start()
    try:
        wait_for(lambda: not exists(cp, ns, "task", "expired"), 60, what="expired deleted")
        assert wait_for(lambda: deleted_count(op, ns) == 1.0, 15, what="the deletion counted")
        # The operator default (1h) has not passed for the Task without its own TTL.
        assert exists(cp, ns, "task", "by-default")
    finally:
        op.stop()
