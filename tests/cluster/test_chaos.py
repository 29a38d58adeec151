"""Exactly-once under operator crashes: SIGKILL the operator at 30 seeded random moments while
20 Tasks (created over the first part of the run) each call two non-idempotent tools; restart
it at once each time.

Invariants (see `InvariantMonitor`): every Task terminal with a documented reason, within
`timeout + lease + RETRY_BOUND` of starting plus `lease + restart time` for each kill while it
ran; never Running without a live lease holder for longer than `RETRY_BOUND` after its lease
expired; each non-idempotent call executed at most once — a Task whose tool may have run
before a kill may end `Failed/Interrupted`, never repeat it — and exactly once for a
`Succeeded` Task; nothing lost.

    ORDO_CHAOS_SEED=7 .venv/bin/python -m pytest tests/cluster/test_chaos.py

And the most likely crash point of all, on its own: a SIGKILL during the model call that
follows a non-idempotent call (issue 23) resumes the Task, which succeeds with the call run
once (coalesce.py writes the result's checkpoint before that model call is sent).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from tests.support.http_tool_server import HttpToolServer
from tests.support.openai_server import OpenAIServer
from tests.support.operator import (
    InvariantMonitor,
    OperatorProcess,
    TaskTrack,
    apply,
    effect_manifests,
    effect_model,
    effect_tasks,
    events,
    get_json,
    wait_for,
    wait_task,
    write_report,
)

from ordo.operator.tasks.coalesce import FLUSH_SECONDS
from ordo_devcluster import ControlPlane

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SEED = int(os.environ.get("ORDO_CHAOS_SEED", "1"))
KILLS = 30
TASKS = 20
LEASE_SECONDS = 3.0
AGENT_TIMEOUT = 30.0
RETRY_BOUND = 30.0
"""The allowance for the operator's bounded retries on top of the lease and the timeout."""
GAP = (0.3, 3.0)
"""Seconds between an operator being ready and the next SIGKILL (seeded uniform)."""
MODEL_DELAY = 0.4
TOOL_DELAY = 0.6
"""The tool counts its execution, then waits this long before answering: a kill in that
window leaves a side effect whose result the operator never saw."""


def test_exactly_once_under_sigkill(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    gaps = [rng.uniform(*GAP) for _ in range(KILLS)]
    # The kill before which each Task is created: spread over the first three quarters.
    created_before = sorted(rng.choices(range(KILLS * 3 // 4), k=TASKS))
    names = [f"c{i:02d}" for i in range(TASKS)]
    kills: list[tuple[float, float]] = []
    """(wall time of the SIGKILL, seconds until the restarted operator was ready)."""
    started = time.monotonic()
    with HttpToolServer() as tools, effect_model(delay=MODEL_DELAY) as model:
        apply(
            control_plane,
            namespace,
            effect_manifests(
                model.url, tools.url, tool_delay=TOOL_DELAY, timeout=f"{AGENT_TIMEOUT:g}s"
            ),
        )
        op = OperatorProcess(
            control_plane,
            namespace,
            tmp_path,
            "--lease-seconds",
            f"{LEASE_SECONDS:g}",
            "--max-concurrent-tasks",
            str(TASKS),
        ).start()
        monitor = InvariantMonitor(
            control_plane, namespace, lease_seconds=LEASE_SECONDS, orphan_bound=RETRY_BOUND
        ).start()
        crashed = ""
        try:
            for k in range(KILLS):
                batch = [n for n, before in zip(names, created_before, strict=True) if before == k]
                if batch:
                    apply(control_plane, namespace, effect_tasks(batch))
                time.sleep(gaps[k])
                killed = time.time()
                try:
                    op.kill_and_restart()
                except RuntimeError as exc:
                    crashed = str(exc)[:2000]
                    break
                kills.append((killed, time.time() - killed))
            tail = AGENT_TIMEOUT + LEASE_SECONDS + RETRY_BOUND
            if not crashed:
                monitor.wait_all_terminal(TASKS, tail)
                time.sleep(2 * monitor.interval)
                monitor.poll()
        finally:
            monitor.stop()
            op.stop()
        effects = tools.effects_snapshot()

    def run_bound(track: TaskTrack) -> float:
        end = track.terminal_at or time.time()
        start = track.first_running or track.first_seen
        during = [restart for at, restart in kills if start <= at <= end]
        return (
            AGENT_TIMEOUT
            + LEASE_SECONDS
            + RETRY_BOUND
            + sum(LEASE_SECONDS + restart for restart in during)
        )

    broken = monitor.violations(names, effects, run_bound)
    if crashed:
        broken.append(("operator", f"crashed on its own before a SIGKILL: {crashed}"))
    summary = {
        "test": "chaos",
        "seed": SEED,
        "kills": len(kills),
        "restartSeconds": {
            "max": round(max((r for _, r in kills), default=0), 1),
            "mean": round(sum(r for _, r in kills) / max(1, len(kills)), 1),
        },
        **monitor.summary(effects, names),
        "violations": len(broken),
        "brokenTasks": len({name for name, _ in broken}),
        "seconds": round(time.monotonic() - started, 1),
    }

    def kills_of(track: TaskTrack) -> list[str]:
        end = track.terminal_at or time.time()
        start = track.first_running or track.first_seen
        inside = [i + 1 for i, (at, _) in enumerate(kills) if start <= at <= end]
        calls = {call: n for (task, call), n in effects.items() if task == track.name}
        return [f"SIGKILLs while it ran: {inside}", f"side effects: {calls}"]

    failure = (
        monitor.explain(f"under {len(kills)} SIGKILLs (seed {SEED})", broken, op, kills_of)
        if broken
        else ""
    )
    write_report(tmp_path, "chaos", summary, monitor, failure, effects)
    if broken:
        pytest.fail(failure, pytrace=False)


def test_sigkill_in_the_model_call_after_a_side_effect_resumes(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """Step 1 runs the non-idempotent `place-order`; step 2's model call hangs. SIGKILLed as
    that call arrives, well inside the flush window (status.step still 0: no flush wrote the
    step), the Task resumes in a new operator from the checkpoint written with the result
    before the call was sent, and succeeds with the tool run once."""
    op = OperatorProcess(
        control_plane, namespace, tmp_path, "--lease-seconds", f"{LEASE_SECONDS:g}"
    ).start()
    order = {"task": "order", "call": "order/place-order"}
    script = [
        {"tool_calls": [{"name": "place-order", "arguments": order, "id": "call_1"}]},
        {"delay": 60.0, "text": "never sent: the operator is killed first"},
    ]
    try:
        with HttpToolServer() as tools, OpenAIServer(script) as model:
            docs = effect_manifests(model.url, tools.url, tool_delay=0, timeout="120s")
            apply(control_plane, namespace, docs)
            apply(control_plane, namespace, effect_tasks(["order"]))
            wait_for(lambda: tools.effects_snapshot(), 30, interval=0.005, what="the tool call")
            ran = time.time()
            wait_for(lambda: model.count >= 2, 30, interval=0.005, what="step 2's model call")
            op.kill()
            since = time.time() - ran
            gap = model.requests[1].time - ran  # the tool's answer + one checkpoint write
            assert since < FLUSH_SECONDS, f"killed {since:.2f}s after the tool call"
            mid = get_json(control_plane, "task", "order", "-n", namespace)["status"]
            assert mid["phase"] == "Running" and not mid.get("step"), mid
            model.set_script([{"text": "ordered"}] * 3)
            op.start()
            status = wait_task(control_plane, namespace, "order", timeout=90)["status"]
            assert (status["phase"], status["step"]) == ("Succeeded", 2), status
            assert tools.effects_snapshot() == {("order", "order/place-order"): 1}
            assert "Resumed" in [e["reason"] for e in events(control_plane, namespace, "order")]
            print(f"\ntool call to step 2's model call: {gap * 1000:.0f} ms; killed {since:.2f} s")
    finally:
        op.stop()
