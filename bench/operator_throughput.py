"""Benchmark 3: the operator on the test control plane (kube-apiserver + etcd on loopback).

For each configuration (Tasks x `--max-concurrent-tasks`), in a fresh namespace with a fresh
`ordo operator -n NS` process:

1. apply a ModelEndpoint (openai-compatible, the bench server, 100 ms per model call), three
   `http` Tools (`lookup`, `convert`, `summarize` on the bench server's `/tool/<name>`; not
   idempotent, the default) and an Agent that uses them;
2. create all Tasks at once (`kubectl create` of one List);
3. wait until the operator's `ordo_tasks_total` counts them all, then check every Task's
   phase with one `kubectl get`.

Every Task makes the loop benchmark's 5 model calls (4 tool steps, the 4th a second call of
`lookup` that the engine answers without running it, then the answer). The ideal time for
N Tasks at bound B is ceil(N / B) waves x 5 x 100 ms. API requests per Task come from the
operator's `ordo_kube_api_requests_total{verb}` (its own requests; kopf's watches are not
counted), minus what it had counted before the Tasks were created.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import REPO
from bench.server import TOOL_DESCRIPTION, TOOL_NAMES, TOOL_PARAMETERS, ServerProcess, model_name

LATENCY_MS = 100
STEPS = 5
TOOL_STEPS = 4
CONFIGS = ((100, 20), (100, 100), (500, 20), (500, 100))
QUICK_CONFIGS = ((10, 5),)
_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def manifests(namespace: str, server_url: str) -> list[dict[str, Any]]:
    meta = {"namespace": namespace}
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "ModelEndpoint",
            "metadata": {"name": "bench", **meta},
            "spec": {
                "provider": "openai-compatible",
                "baseUrl": server_url + "/v1",
                "model": model_name(LATENCY_MS, TOOL_STEPS),
                "timeout": "60s",
                "retry": {"maxAttempts": 1},
            },
        }
    ]
    for name in TOOL_NAMES:
        docs.append(
            {
                "apiVersion": "ordo.dev/v1alpha1",
                "kind": "Tool",
                "metadata": {"name": name, **meta},
                "spec": {
                    "type": "http",
                    "description": TOOL_DESCRIPTION,
                    "inputSchema": TOOL_PARAMETERS,
                    "http": {"url": f"{server_url}/tool/{name}", "method": "POST"},
                    "timeout": "30s",
                },
            }
        )
    docs.append(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Agent",
            "metadata": {"name": "bench", **meta},
            "spec": {
                "modelRef": "bench",
                "prompt": "You are a benchmark agent. Use the tools you are given, then answer.",
                "tools": list(TOOL_NAMES),
                "limits": {"maxSteps": 10, "timeout": "600s"},
            },
        }
    )
    return docs


def task_list(namespace: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "ordo.dev/v1alpha1",
                "kind": "Task",
                "metadata": {"name": f"t{i:04d}", "namespace": namespace},
                "spec": {"agentRef": "bench", "input": "Run the benchmark script."},
            }
            for i in range(count)
        ],
    }


def parse_metrics(text: str) -> dict[str, dict[str, float]]:
    """Counter samples as {metric: {label text: value}}."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            out.setdefault(match["name"], {})[match["labels"] or ""] = float(match["value"])
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _by_verb(metrics: dict[str, dict[str, float]]) -> dict[str, float]:
    verbs: dict[str, float] = {}
    for labels, value in metrics.get("ordo_kube_api_requests_total", {}).items():
        match = re.search(r'verb="([^"]+)"', labels)
        if match:
            verbs[match[1]] = value
    return verbs


@dataclass
class Row:
    tasks: int
    bound: int
    create_s: float
    wall_s: float
    ideal_s: float
    ratio: float
    succeeded: int
    requests_per_task: dict[str, float] = field(default_factory=dict)
    model_calls_per_task: float = 0.0
    max_running: int = 0
    cpu_ms_per_task: dict[str, float] = field(default_factory=dict)
    """CPU milliseconds per Task of the operator, kube-apiserver and etcd over the run."""

    @property
    def total_per_task(self) -> float:
        return sum(self.requests_per_task.values())

    @property
    def status_patches_per_task(self) -> float:
        return self.requests_per_task.get("patch-status", 0.0)


@dataclass
class OperatorResult:
    rows: list[Row]
    skipped: str | None = None
    control_plane: str = ""


def run(
    configs: tuple[tuple[int, int], ...] = CONFIGS, log: Any = print, timeout: float = 600
) -> OperatorResult:
    from tests.support.operator import OperatorProcess, tasks

    from ordo_devcluster import BinariesNotFoundError, ControlPlane

    try:
        cp = ControlPlane(crds=REPO / "crds")
    except BinariesNotFoundError as exc:
        return OperatorResult([], skipped=f"control plane not built: {exc}")
    rows: list[Row] = []
    with cp, ServerProcess() as server, tempfile.TemporaryDirectory() as logs:
        version = cp.kubectl("version", "-o", "json", check=False).stdout
        try:
            info = json.loads(version).get("serverVersion", {})
            cp_version = f"kube-apiserver {info.get('gitVersion', '?')}"
        except ValueError:
            cp_version = "kube-apiserver"
        for count, bound in configs:
            namespace = cp.create_namespace(prefix="bench")
            cp.kubectl(
                "apply",
                "-f",
                "-",
                input=json.dumps(
                    {"apiVersion": "v1", "kind": "List", "items": manifests(namespace, server.url)}
                ),
            )
            op = OperatorProcess(
                cp, namespace, Path(logs), "--max-concurrent-tasks", str(bound)
            ).start()
            try:
                time.sleep(1.0)  # let the first resync of the Agent/Tools settle
                before = _by_verb(parse_metrics(op.metrics()))
                assert op.proc is not None
                pids = {"operator": op.proc.pid, **cp.pids}
                cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                calls_before = server.stats()["model_calls"]
                t0 = time.monotonic()
                cp.kubectl("create", "-f", "-", input=json.dumps(task_list(namespace, count)))
                created = time.monotonic() - t0
                done = 0.0
                max_running = 0
                deadline = t0 + timeout
                while time.monotonic() < deadline:
                    metrics = parse_metrics(op.metrics())
                    done = sum(metrics.get("ordo_tasks_total", {}).values())
                    running = metrics.get("ordo_tasks_running", {}).get("", 0)
                    max_running = max(max_running, int(running))
                    if done >= count:
                        break
                    time.sleep(0.2)
                wall = time.monotonic() - t0
                cpu_used = {
                    name: (cpu_seconds(pid) - cpu_before[name]) * 1000 / count
                    for name, pid in pids.items()
                }
                time.sleep(0.5)  # the finalizer release follows the terminal status
                after = _by_verb(parse_metrics(op.metrics()))
                calls = server.stats()["model_calls"] - calls_before
                phases = [(t.get("status") or {}).get("phase") for t in tasks(cp, namespace)]
            finally:
                op.stop()
            ideal = math.ceil(count / bound) * STEPS * LATENCY_MS / 1000
            per_task = {
                verb: (after.get(verb, 0) - before.get(verb, 0)) / count
                for verb in sorted(set(after) | set(before))
            }
            row = Row(
                count,
                bound,
                created,
                wall,
                ideal,
                wall / ideal,
                phases.count("Succeeded"),
                {k: v for k, v in per_task.items() if v},
                calls / count,
                max_running,
                cpu_used,
            )
            rows.append(row)
            log(
                f"  {count} Tasks, bound {bound}: {wall:.1f} s ({row.ratio:.2f}x ideal "
                f"{ideal:.1f} s; creating them took {created:.1f} s), "
                f"{row.succeeded}/{count} Succeeded, {row.total_per_task:.1f} API requests per "
                f"Task ({row.status_patches_per_task:.1f} status patches); CPU ms per Task: "
                + ", ".join(f"{k} {v:.0f}" for k, v in cpu_used.items())
            )
            if done < count:
                log(f"  timed out after {timeout:.0f} s with {done:.0f}/{count} terminal")
    return OperatorResult(rows, control_plane=cp_version)


if __name__ == "__main__":
    import sys

    for row in run(QUICK_CONFIGS if "--quick" in sys.argv else CONFIGS).rows:
        print(row)
