"""Fewer API writes per Task (issue 14): the claim carries the execution mode, progress and
end-of-step checkpoints are coalesced into one flush per window, and a checkpoint is still
written before every non-idempotent tool call. The hostile cases of the coalescing: a SIGKILL
after a side effect but before the flush (the call is never repeated; the Task ends
`Interrupted`), and one after the flush (the run resumes from the flushed step)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.support.counting_tool import CountingTool
from tests.support.openai_server import OpenAIServer
from tests.support.operator import (
    EFFECT_TOOLS,
    OperatorProcess,
    apply,
    effect_manifests,
    effect_model,
    effect_tasks,
    events,
    get_json,
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
    # No periodic readiness resync inside the measured window: its reads are not the Tasks'.
    return operator_factory("--resync-seconds", "3600")


def test_a_fast_task_makes_one_write_per_side_effect_plus_a_fixed_few(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    """Each Task calls the two non-idempotent effect Tools (one per step) and answers: three
    model calls in well under the flush window. Writes per Task: claim (with the execution
    mode and the execution lease: no Lease object) and terminal status; finalizer add and
    remove; the Started and Succeeded Events; one checkpoint write before each
    non-idempotent call and the checkpoint's delete (no end-of-step checkpoint, no progress
    patch, no lease renewal or release)."""
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
    assert per_task.get("patch-status", 0) == 2, per_task  # claim + terminal, no progress
    assert per_task.get("create", 0) == 3, per_task  # checkpoint, 2 Events
    assert per_task.get("patch", 0) == 2 + len(EFFECT_TOOLS) - 1, per_task  # finalizer, ckpt
    assert per_task.get("delete", 0) == 0, per_task  # checkpoints: in batches, below
    assert per_task.get("replace", 0) == 0, per_task  # no Lease renewal
    assert writes == 6 + len(EFFECT_TOOLS), per_task
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


def _step(cp: ControlPlane, namespace: str, name: str) -> int:
    return int((get_json(cp, "task", name, "-n", namespace).get("status") or {}).get("step") or 0)


@pytest.mark.slow
@pytest.mark.parametrize("flushed", [False, True], ids=["before-flush", "after-flush"])
def test_sigkill_after_a_side_effect(
    control_plane: ControlPlane, namespace: str, tmp_path: Path, flushed: bool
) -> None:
    """The second model call takes 6 s. Killed as it starts, the step's result was not yet
    flushed: the checkpoint says the call started, so the resumed run ends `Interrupted`
    without repeating it. Killed once the flush wrote the step (status.step 1), the resumed
    run continues from it and succeeds. Either way the side effect ran once."""
    op = OperatorProcess(control_plane, namespace, tmp_path).start()
    script = [
        {
            "tool_calls": [
                {
                    "name": "place-order",
                    "arguments": {"task": "order", "call": "order/place-order"},
                    "id": "call_1",
                }
            ]
        },
        {"delay": 6.0, "text": "ordered"},
    ]
    try:
        with CountingTool() as tool, OpenAIServer(script) as model:
            docs = effect_manifests(model.url, tool.url, tool_delay=0, timeout="60s")
            apply(control_plane, namespace, docs)
            apply(control_plane, namespace, effect_tasks(["order"]))
            if flushed:
                wait_for(
                    lambda: model.count >= 2 and _step(control_plane, namespace, "order") >= 1,
                    30,
                    interval=0.05,
                    what="the flush of step 1",
                )
            else:
                wait_for(lambda: model.count >= 2, 30, interval=0.02, what="the second model call")
            op.kill()
            assert tool.count == 1
            mid = get_json(control_plane, "task", "order", "-n", namespace)["status"]
            assert mid["phase"] == "Running"
            model.set_script([{"text": "ordered"}] * 3)
            op.start()
            status = wait_task(control_plane, namespace, "order", timeout=90)["status"]
            if flushed:
                assert status["phase"] == "Succeeded", status
            else:
                assert (status["phase"], status["reason"]) == ("Failed", "Interrupted"), status
            assert tool.count == 1  # never repeated
            assert "Resumed" in [e["reason"] for e in events(control_plane, namespace, "order")]
    finally:
        op.stop()
