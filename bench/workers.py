"""Benchmark: runs in worker processes (issue 25), on the test control plane.

1. Runs-bound throughput: TASKS Tasks whose one model call computes BUSY_S seconds (the mock
   provider's `busy`, CPU on the run's own loop), all at once; wall time from the create to
   the last terminal Task with `--workers 1` and `--workers 2`, in the same run. The runs,
   not the API server, are the limit (TASKS x BUSY_S of CPU against ~50 ms of control plane
   per Task), so the ratio is what a second worker buys.
2. Control-loop stall: one Task computing STALL_BUSY_S on its loop, with `--workers 0` (on
   the control process's loop, as before issue 25) and `--workers 2`; the control loop's
   lateness from `ordo_event_loop_stall_seconds` (a 0.1 s tick): the ticks later than 50 ms
   and the bucket the longest fell in.

    python -m bench.workers            # the figures in docs/scaling.md
    python -m bench.workers --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import REPO

TASKS = 24
BUSY_S = 0.5
STALL_BUSY_S = 4.0
_BUCKET = re.compile(r'^ordo_event_loop_stall_seconds_bucket\{le="(?P<le>[^"]+)"\} (?P<n>\S+)$')


def manifests(namespace: str, tasks: int, busy: float, prefix: str) -> dict[str, Any]:
    meta = {"namespace": namespace}
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "ModelEndpoint",
            "metadata": {"name": f"{prefix}-model", **meta},
            "spec": {
                "provider": "mock",
                "model": "mock-1",
                "mock": {"turns": [{"text": "computed", "busy": busy}]},
            },
        },
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Agent",
            "metadata": {"name": f"{prefix}-agent", **meta},
            "spec": {
                "modelRef": f"{prefix}-model",
                "prompt": "Compute.",
                "limits": {"maxSteps": 2, "timeout": "600s"},
            },
        },
    ]
    docs += [
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Task",
            "metadata": {"name": f"{prefix}-{i:04d}", **meta},
            "spec": {"agentRef": f"{prefix}-agent", "input": "go"},
        }
        for i in range(tasks)
    ]
    return {"apiVersion": "v1", "kind": "List", "items": docs}


def _terminal(cp: Any, namespace: str) -> int:
    out = cp.kubectl(
        "get", "tasks", "-n", namespace, "-o", "jsonpath={.items[*].status.phase}"
    ).stdout.split()
    return sum(1 for p in out if p in ("Succeeded", "Failed", "Cancelled"))


def _stall(metrics: str) -> tuple[float, str]:
    """Ticks later than 50 ms, and the smallest bucket bound holding every tick."""
    buckets = [
        (m["le"], float(m["n"])) for line in metrics.splitlines() if (m := _BUCKET.match(line))
    ]
    total = buckets[-1][1] if buckets else 0.0
    at_50ms = next((n for le, n in buckets if le == "0.05"), total)
    longest = next((le for le, n in buckets if n >= total), "+Inf")
    return total - at_50ms, longest


def _operator(cp: Any, namespace: str, logs: str, workers: int) -> Any:
    from tests.support.operator import OperatorProcess

    return OperatorProcess(
        cp,
        f"{namespace}-w{workers}",
        Path(logs),
        "--workers",
        str(workers),
        "--max-concurrent-tasks",
        "100",
        "--resync-seconds",
        "3600",
        "--lease-namespace",
        namespace,
        scope=["-n", namespace],
    ).start()


def run(
    tasks: int = TASKS, busy: float = BUSY_S, stall_busy: float = STALL_BUSY_S, log: Any = print
) -> dict[str, Any]:
    from ordo_devcluster import ControlPlane

    result: dict[str, Any] = {"tasks": tasks, "busy_s": busy, "throughput": {}, "stall": {}}
    cp = ControlPlane(crds=REPO / "crds")
    with cp, tempfile.TemporaryDirectory() as logs:
        for workers in (1, 2):
            namespace = cp.create_namespace(prefix="workers")
            op = _operator(cp, namespace, logs, workers)
            try:
                started = time.monotonic()
                cp.kubectl(
                    "create", "-f", "-", input=json.dumps(manifests(namespace, tasks, busy, "cpu"))
                )
                while _terminal(cp, namespace) < tasks:
                    if time.monotonic() - started > 600:
                        raise RuntimeError("the Tasks did not finish in 10 minutes")
                    time.sleep(0.2)
                wall = time.monotonic() - started
            finally:
                op.stop()
            result["throughput"][workers] = {
                "wall_s": round(wall, 2),
                "model_calls_per_s": round(tasks / wall, 2),
            }
            log(f"  --workers {workers}: {tasks} Tasks of {busy} s CPU in {wall:.1f} s")
        one, two = (result["throughput"][w]["model_calls_per_s"] for w in (1, 2))
        result["throughput_ratio"] = round(two / one, 2)
        for workers in (0, 2):
            namespace = cp.create_namespace(prefix="stall")
            op = _operator(cp, namespace, logs, workers)
            try:
                time.sleep(1)
                before = _stall(op.metrics())[0]
                cp.kubectl(
                    "create",
                    "-f",
                    "-",
                    input=json.dumps(manifests(namespace, 1, stall_busy, "hog")),
                )
                started = time.monotonic()
                while _terminal(cp, namespace) < 1 and time.monotonic() - started < 120:
                    time.sleep(0.2)
                late, longest = _stall(op.metrics())
            finally:
                op.stop()
            result["stall"][workers] = {
                "ticks_later_than_50ms": late - before,
                "longest_within_s": longest,
            }
            log(
                f"  --workers {workers}: {late - before:.0f} ticks later than 50 ms, longest <= {longest} s"
            )
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4 Tasks, short busy times")
    args = parser.parse_args(argv)
    result = run(4, 0.2, 1.0) if args.quick else run()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
