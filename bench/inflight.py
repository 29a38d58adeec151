"""Benchmark: many Tasks in flight, each waiting on a slow model call (issue 25).

One `ordo operator -n NS` on the test control plane; N Tasks whose only model call takes
longer than the measurement (the mock provider's scripted delay, so no model server is in
the way). Once every Task is Running and the claims' writes have settled, for WINDOW_S:

- the operator's API requests per second (`ordo_kube_api_requests_total`, every verb), beside
  what renewing each Task's own lease every third of `--lease-seconds` would add (the
  mechanism before process Leases: N x 3 / leaseSeconds);
- its RSS before the Tasks and with N in flight: memory per in-flight Task;
- its CPU while they wait (the fixed cost of N parked runs).

    python -m bench.inflight --tasks 2000        # the figures in docs/scaling.md
    python -m bench.inflight --tasks 50          # a smoke run
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import REPO
from bench.operator_throughput import cpu_seconds, parse_metrics, requests_by_verb

WINDOW_S = 30.0
LEASE_SECONDS = 30


@dataclass
class InflightResult:
    tasks: int
    lease_seconds: int
    window_s: float
    requests_per_s: float
    requests_by_verb: dict[str, float]
    per_task_renewals_per_s: float
    """What per-Task renewals (every leaseSeconds / 3) would add for the same Tasks."""
    rss_idle_mib: float
    rss_inflight_mib: float
    kib_per_inflight_task: float
    cpu_busy_while_waiting: float
    """Operator CPU seconds per wall second in the window."""
    claim_s: float
    """From the first create until every Task was Running."""


def manifests(namespace: str, tasks: int) -> dict[str, Any]:
    meta = {"namespace": namespace}
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "ModelEndpoint",
            "metadata": {"name": "slow", **meta},
            "spec": {
                "provider": "mock",
                "model": "mock-1",
                "mock": {"turns": [{"text": "done", "delay": "1800s"}]},
            },
        },
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Agent",
            "metadata": {"name": "waiter", **meta},
            "spec": {
                "modelRef": "slow",
                "prompt": "Wait.",
                "limits": {"maxSteps": 2, "timeout": "3600s"},
            },
        },
    ]
    docs += [
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Task",
            "metadata": {"name": f"wait-{i:05d}", **meta},
            "spec": {"agentRef": "waiter", "input": "wait"},
        }
        for i in range(tasks)
    ]
    return {"apiVersion": "v1", "kind": "List", "items": docs}


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _requests(text: str) -> dict[str, float]:
    return requests_by_verb(parse_metrics(text))


def _running(cp: Any, namespace: str) -> int:
    out = cp.kubectl(
        "get", "tasks", "-n", namespace, "-o", "jsonpath={.items[*].status.phase}"
    ).stdout
    return out.split().count("Running")


def run(tasks: int, *, window_s: float = WINDOW_S, log: Any = print) -> InflightResult:
    from tests.support.operator import OperatorProcess

    from ordo_devcluster import ControlPlane

    cp = ControlPlane(crds=REPO / "crds")
    with cp, tempfile.TemporaryDirectory() as logs:
        namespace = cp.create_namespace(prefix="inflight")
        op = OperatorProcess(
            cp,
            namespace,
            Path(logs),
            "--max-concurrent-tasks",
            str(tasks),
            "--lease-seconds",
            str(LEASE_SECONDS),
            "--lease-namespace",
            namespace,
            "--workers",  # the runs in this process, so its RSS is theirs (docs/scaling.md)
            "0",
            "--resync-seconds",
            "3600",
        ).start()
        try:
            assert op.proc is not None
            pid = op.proc.pid
            time.sleep(2)
            rss_idle = _rss_mib(pid)
            created = time.monotonic()
            cp.kubectl("create", "-f", "-", input=json.dumps(manifests(namespace, tasks)))
            while _running(cp, namespace) < tasks:
                if time.monotonic() - created > 1200:
                    raise RuntimeError("the Tasks did not all start in 20 minutes")
                time.sleep(2)
            claim_s = time.monotonic() - created
            log(f"  {tasks} Tasks Running after {claim_s:.1f} s")
            time.sleep(5)  # the last claims' checkpoint and Event writes
            before, cpu_before = _requests(op.metrics()), cpu_seconds(pid)
            start = time.monotonic()
            time.sleep(window_s)
            elapsed = time.monotonic() - start
            after, cpu_after = _requests(op.metrics()), cpu_seconds(pid)
            rss_inflight = _rss_mib(pid)
        finally:
            op.stop()
    made = {
        v: after.get(v, 0) - before.get(v, 0) for v in after if after.get(v, 0) != before.get(v, 0)
    }
    return InflightResult(
        tasks=tasks,
        lease_seconds=LEASE_SECONDS,
        window_s=round(elapsed, 1),
        requests_per_s=round(sum(made.values()) / elapsed, 2),
        requests_by_verb={v: round(n / elapsed, 2) for v, n in sorted(made.items())},
        per_task_renewals_per_s=round(tasks * 3 / LEASE_SECONDS, 1),
        rss_idle_mib=round(rss_idle, 1),
        rss_inflight_mib=round(rss_inflight, 1),
        kib_per_inflight_task=round((rss_inflight - rss_idle) * 1024 / tasks, 1),
        cpu_busy_while_waiting=round((cpu_after - cpu_before) / elapsed, 3),
        claim_s=round(claim_s, 1),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--window", type=float, default=WINDOW_S, help="seconds measured")
    args = parser.parse_args(argv)
    result = run(args.tasks, window_s=args.window)
    print(json.dumps(asdict(result), indent=2))


if __name__ == "__main__":
    main()
