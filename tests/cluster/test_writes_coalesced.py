"""Fewer API writes per Task (issue 14): the claim carries the execution mode, progress and
end-of-step checkpoints are coalesced into one flush per window, and a checkpoint is still
written before every non-idempotent tool call and, with its result, before the next model
call (issue 23: a SIGKILL during that model call resumes the run; test_chaos.py kills there).
The budget: at most steps + 5 writes, plus one per non-idempotent call."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from tests.support.counting_tool import CountingTool
from tests.support.operator import (
    EFFECT_TOOLS,
    OperatorProcess,
    apply,
    effect_manifests,
    effect_model,
    effect_tasks,
    events,
    ready_condition,
    wait_for,
    wait_task,
)

from ordo_devcluster import ControlPlane

WRITE_VERBS = ("create", "delete", "patch", "patch-status", "replace")


def checkpoints(cp: ControlPlane, namespace: str) -> list[str]:
    """Names of the checkpoint ConfigMaps in `namespace`."""
    out = cp.kubectl(
        "get", "configmaps", "-n", namespace, "-l", "ordo.dev/checkpoint-uid", "-o", "name"
    ).stdout
    return out.split()


_SAMPLE = re.compile(r'^ordo_kube_api_requests_total\{verb="(?P<verb>[^"]+)"\} (?P<value>\S+)$')


def requests_by_verb(op: OperatorProcess) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in op.metrics().splitlines():
        m = _SAMPLE.match(line)
        if m:
            out[m["verb"]] = float(m["value"])
    return out


@pytest.fixture
def operator(operator_factory: Callable[..., OperatorProcess]) -> OperatorProcess:
    # No periodic readiness resync inside the measured window: its reads are not the Tasks';
    # and no renewal of the process Lease in it (a patch, every lease / 6): not the Tasks'.
    return operator_factory("--resync-seconds", "3600", "--lease-seconds", "600")


def test_a_fast_task_makes_one_write_per_side_effect_plus_a_fixed_few(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    """Each Task calls the two non-idempotent effect Tools (one per step) and answers: three
    model calls in well under the flush window. Writes per Task: claim (with the execution
    mode and the execution lease: no Lease object) and terminal status; finalizer add and
    remove; the Started and Succeeded Events; one checkpoint write before each
    non-idempotent call and its sequence anchored in the status (checkpoint.py), one with its
    result before the next model call, and the checkpoint's delete (no progress patch, no
    lease renewal or release): 3 steps + 5 + 3 per side effect."""
    n = 4
    with CountingTool() as tool, effect_model() as model:
        apply(
            control_plane,
            namespace,
            effect_manifests(model.url, tool.url, tool_delay=0, timeout="60s"),
        )
        # The operator reports the Agent's and Tools' readiness (status writes of its own):
        # measure once it has.
        wait_for(
            lambda: (
                (c := ready_condition(control_plane, namespace, "agent", "agent"))
                and c["status"] == "True"
            ),
            30,
            what="the Agent Ready",
        )
        before = _settled(operator)
        names = [f"w{i}" for i in range(n)]
        apply(control_plane, namespace, effect_tasks(names))
        for name in names:
            status = wait_task(control_plane, namespace, name, timeout=60)["status"]
            assert status["phase"] == "Succeeded", status
            assert status["executionMode"] == "InProcess"
            assert status["step"] == 3
        assert tool.count == n * len(EFFECT_TOOLS)
        # The checkpoints of finished Tasks are deleted in batches (reaper.py), a moment
        # after the terminal writes.
        wait_for(
            lambda: (
                not checkpoints(control_plane, namespace)
                and requests_by_verb(operator).get("deletecollection", 0)
                > before.get("deletecollection", 0)
            ),
            20,
            what="the checkpoints deleted",
        )
        after = requests_by_verb(operator)
    per_task = {v: (after.get(v, 0) - before.get(v, 0)) / n for v in after}
    writes = sum(per_task.get(v, 0) for v in WRITE_VERBS)
    # claim + terminal + one anchor per side effect (status.checkpointSequence), no progress
    assert per_task.get("patch-status", 0) == 2 + len(EFFECT_TOOLS), per_task
    assert per_task.get("create", 0) == 3, per_task  # checkpoint, 2 Events
    # finalizer add and remove; the checkpoint (created before the first call) before the
    # second call and after each result
    assert per_task.get("patch", 0) == 2 + 2 * len(EFFECT_TOOLS) - 1, per_task
    assert per_task.get("delete", 0) == 0, per_task  # checkpoints: in batches, below
    assert per_task.get("replace", 0) == 0, per_task  # no Lease renewal
    assert writes == 6 + 3 * len(EFFECT_TOOLS), per_task  # steps + 5 + 3 per side effect
    # One request deletes the checkpoints of every Task that ended within a flush period
    # (how many share one depends on timing: unit-tested in test_reaper.py).
    assert 0 < per_task.get("deletecollection", 0) * n <= n, per_task
    # References come from the watch-fed cache and a Pending Task is claimed from its watch
    # event; the endpoint's Secret is read once per Task (the pre-check and the run share it).
    assert per_task.get("list", 0) == 0, per_task
    assert per_task.get("get", 0) == 1, per_task
    reasons = [e["reason"] for e in events(control_plane, namespace, "w0")]
    assert sorted(reasons) == ["Started", "Succeeded"], reasons


def _settled(op: OperatorProcess) -> dict[str, float]:
    """The request counters once two reads half a second apart agree."""
    last: dict[str, float] = {}

    def same() -> bool:
        nonlocal last
        now = requests_by_verb(op)
        stable, last = now == last, now
        return stable

    wait_for(same, 30, interval=0.5, what="the request counters to settle")
    return last
