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

Past one process (`SCALING_CONFIGS`, `scaling_section`): the same N Tasks at bound B in four
layouts, measured in the same run: one process; two replicas (two `ordo operator -n NS` on one
namespace, sharing the Tasks through reservations, conditional claims and execution leases);
two shards (two namespaces, N/2 Tasks each, one operator per namespace); two replicas, one
small (bounds B and SMALL_BOUND). Per process: the Tasks it ran (its `ordo_tasks_total`), its
CPU, its API requests, the claims it lost to the other replica
(`ordo_task_claims_total{outcome=lost|held}`), and its fixed CPU (idle rate x wall time). The
CPU a replica spends per Task it does not run comes from the last layout (`unrun_cpu_ms`).
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
LAYOUTS = ("1 process", "2 replicas", "2 shards", "2 replicas, one small")
SMALL_BOUND = 1
"""The small replica's bound in the last layout: it runs a few Tasks and watches the rest."""
IDLE_WINDOW_S = 2.0
"""Before each measured run: each process's CPU while idle, scraped as during the run (its
fixed cost per second: the scrapes, timers, watches), subtracted from its per-Task figures."""
SCALING_CONFIGS = ((300, 50),)
QUICK_SCALING_CONFIGS = ((10, 5),)
TARGET_REQUESTS_EXTRA = 5
"""API requests per Task <= steps + 5 (issue 14) + one per non-idempotent call (issue 23)."""
SIDE_EFFECTS = TOOL_STEPS - 1
"""Non-idempotent calls a Task runs (its 4th tool step's call is refused without running)."""
TARGET_CPU_MS = 30.0
"""Operator CPU per Task <= 30 ms for the 5-step Task (issue 14)."""
TARGET_UNRUN_SHARE = 0.1
"""A replica spends at most a tenth of a run Task's CPU on a Task another replica runs."""
LOST_CLAIM_LOGS = (
    "another process claimed or ended the Task first",
    "another process holds the Task's execution lease",
)
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


def requests_by_verb(metrics: dict[str, dict[str, float]]) -> dict[str, float]:
    """`ordo_kube_api_requests_total` by verb, from `parse_metrics`."""
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
class ProcessFigures:
    """One `ordo operator` process over one measured run."""

    name: str
    tasks_run: float
    """Tasks it ended (its `ordo_tasks_total`)."""
    cpu_ms: float
    requests: float
    claims_lost: float
    """Claims it lost to another process (lost + held)."""
    fixed_cpu_ms: float = 0.0
    """Its idle CPU rate (IDLE_WINDOW_S before the run) times the run's wall time."""


@dataclass
class ScalingRow:
    layout: str
    tasks: int
    bound: int
    wall_s: float
    succeeded: int
    processes: list[ProcessFigures]
    control_plane_cpu_ms: dict[str, float]
    """CPU milliseconds of kube-apiserver and etcd over the run (not per Task)."""

    @property
    def tasks_per_s(self) -> float:
        return self.tasks / self.wall_s

    @property
    def operator_cpu_ms_per_task(self) -> float:
        return sum(p.cpu_ms for p in self.processes) / self.tasks

    @property
    def requests_per_task(self) -> float:
        return sum(p.requests for p in self.processes) / self.tasks

    @property
    def claims_lost(self) -> float:
        return sum(p.claims_lost for p in self.processes)


@dataclass
class OperatorResult:
    rows: list[Row]
    skipped: str | None = None
    control_plane: str = ""
    scaling: list[ScalingRow] = field(default_factory=list)


@dataclass
class _Measured:
    create_s: float
    wall_s: float
    done: float
    max_running: int
    before: list[dict[str, float]]
    after: list[dict[str, float]]
    metrics: list[dict[str, dict[str, float]]]
    cpu_ms: dict[str, float]
    """CPU milliseconds over the run: each operator (op0, op1...), kube-apiserver, etcd."""
    idle_cpu_ms_per_s: dict[str, float]
    """Each operator's CPU per second while idle, just before the run (scraped as in it)."""
    model_calls: float
    phases: list[Any]


def _claims_lost(metrics: dict[str, dict[str, float]], logs: list[dict[str, Any]]) -> float:
    """Claims lost to another process: the claim counter if this operator has it, else its
    log lines (the counter needs the scheduler to hand the Claimer its Metrics)."""
    claims = metrics.get("ordo_task_claims_total")
    if claims:
        return sum(v for k, v in claims.items() if "claimed" not in k)
    return float(sum(1 for r in logs if r.get("msg") in LOST_CLAIM_LOGS))


def _measure(
    cp: Any, server: Any, ops: list[Any], namespaces: list[str], count: int, timeout: float
) -> _Measured:
    """Create `count` Tasks spread over `namespaces` while `ops` run; wait until the
    operators' `ordo_tasks_total` add up to `count`."""
    from tests.support.operator import tasks

    time.sleep(1.0)  # let the first resync of the Agent/Tools settle
    pids = {f"op{i}": op.proc.pid for i, op in enumerate(ops)} | dict(cp.pids)
    idle_before = {f"op{i}": cpu_seconds(op.proc.pid) for i, op in enumerate(ops)}
    t_idle = time.monotonic()
    while time.monotonic() - t_idle < IDLE_WINDOW_S:
        for op in ops:
            parse_metrics(op.metrics())
        time.sleep(0.2)
    idle_rate = {
        name: (cpu_seconds(pids[name]) - v) * 1000 / (time.monotonic() - t_idle)
        for name, v in idle_before.items()
    }
    before = [requests_by_verb(parse_metrics(op.metrics())) for op in ops]
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    calls_before = server.stats()["model_calls"]
    share = math.ceil(count / len(namespaces))
    items = [
        item
        for i, ns in enumerate(namespaces)
        for item in task_list(ns, min(share, count - i * share))["items"]
    ]
    t0 = time.monotonic()
    cp.kubectl(
        "create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    )
    created = time.monotonic() - t0
    done = 0.0
    max_running = 0
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        metrics = [parse_metrics(op.metrics()) for op in ops]
        done = sum(sum(m.get("ordo_tasks_total", {}).values()) for m in metrics)
        running = sum(m.get("ordo_tasks_running", {}).get("", 0) for m in metrics)
        max_running = max(max_running, int(running))
        if done >= count:
            break
        time.sleep(0.2)
    wall = time.monotonic() - t0
    cpu_ms = {name: (cpu_seconds(pid) - cpu_before[name]) * 1000 for name, pid in pids.items()}
    time.sleep(0.5)  # the finalizer release follows the terminal status
    metrics = [parse_metrics(op.metrics()) for op in ops]
    return _Measured(
        created,
        wall,
        done,
        max_running,
        before,
        [requests_by_verb(m) for m in metrics],
        metrics,
        cpu_ms,
        idle_rate,
        server.stats()["model_calls"] - calls_before,
        [(t.get("status") or {}).get("phase") for ns in namespaces for t in tasks(cp, ns)],
    )


def _row(count: int, bound: int, m: _Measured) -> Row:
    ideal = math.ceil(count / bound) * STEPS * LATENCY_MS / 1000
    per_task = {
        verb: (m.after[0].get(verb, 0) - m.before[0].get(verb, 0)) / count
        for verb in sorted(set(m.after[0]) | set(m.before[0]))
    }
    cpu = {("operator" if k == "op0" else k): v / count for k, v in m.cpu_ms.items()}
    return Row(
        count,
        bound,
        m.create_s,
        m.wall_s,
        ideal,
        m.wall_s / ideal,
        m.phases.count("Succeeded"),
        {k: v for k, v in per_task.items() if v},
        m.model_calls / count,
        m.max_running,
        cpu,
    )


def _scaling_row(layout: str, count: int, bound: int, m: _Measured, ops: list[Any]) -> ScalingRow:
    processes = [
        ProcessFigures(
            op.namespace,
            sum(m.metrics[i].get("ordo_tasks_total", {}).values()),
            m.cpu_ms[f"op{i}"],
            sum(m.after[i].values()) - sum(m.before[i].values()),
            _claims_lost(m.metrics[i], op.log_records()),
            m.idle_cpu_ms_per_s[f"op{i}"] * m.wall_s,
        )
        for i, op in enumerate(ops)
    ]
    plane = {k: v for k, v in m.cpu_ms.items() if not k.startswith("op")}
    return ScalingRow(layout, count, bound, m.wall_s, m.phases.count("Succeeded"), processes, plane)


def run(
    configs: tuple[tuple[int, int], ...] = CONFIGS,
    log: Any = print,
    timeout: float = 600,
    scaling: tuple[tuple[int, int], ...] | None = None,
) -> OperatorResult:
    """The configurations of one process, then each of `scaling` in every layout (default:
    the quick scaling set with the quick configurations, else `SCALING_CONFIGS`)."""
    from tests.support.operator import OperatorProcess

    from ordo_devcluster import BinariesNotFoundError, ControlPlane

    if scaling is None:
        scaling = QUICK_SCALING_CONFIGS if configs == QUICK_CONFIGS else SCALING_CONFIGS
    try:
        cp = ControlPlane(crds=REPO / "crds")
    except BinariesNotFoundError as exc:
        return OperatorResult([], skipped=f"control plane not built: {exc}")
    result = OperatorResult([])
    with cp, ServerProcess() as server, tempfile.TemporaryDirectory() as logs:
        version = cp.kubectl("version", "-o", "json", check=False).stdout
        try:
            info = json.loads(version).get("serverVersion", {})
            result.control_plane = f"kube-apiserver {info.get('gitVersion', '?')}"
        except ValueError:
            result.control_plane = "kube-apiserver"

        def start(layout: str, count: int, bound: int) -> tuple[list[Any], list[str]]:
            shards = layout == "2 shards"
            namespaces = [cp.create_namespace(prefix="bench") for _ in range(2 if shards else 1)]
            docs = [d for ns in namespaces for d in manifests(ns, server.url)]
            cp.kubectl(
                "apply",
                "-f",
                "-",
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}),
            )
            processes = 1 if layout == "1 process" else 2
            bounds = [bound, SMALL_BOUND] if layout == "2 replicas, one small" else [bound] * 2
            ops = []
            for i in range(processes):
                ns = namespaces[i] if shards else namespaces[0]
                ops.append(
                    OperatorProcess(
                        cp,
                        f"{ns}-{i}",
                        Path(logs),
                        "--max-concurrent-tasks",
                        str(bounds[i]),
                        scope=["-n", ns],
                    ).start()
                )
            return ops, namespaces

        for count, bound in configs:
            ops, namespaces = start("1 process", count, bound)
            try:
                m = _measure(cp, server, ops, namespaces, count, timeout)
            finally:
                for op in ops:
                    op.stop()
            row = _row(count, bound, m)
            result.rows.append(row)
            log(
                f"  {count} Tasks, bound {bound}: {m.wall_s:.1f} s ({row.ratio:.2f}x ideal "
                f"{row.ideal_s:.1f} s; creating them took {m.create_s:.1f} s), "
                f"{row.succeeded}/{count} Succeeded, {row.total_per_task:.1f} API requests per "
                f"Task ({row.status_patches_per_task:.1f} status patches); CPU ms per Task: "
                + ", ".join(f"{k} {v:.0f}" for k, v in row.cpu_ms_per_task.items())
            )
            if m.done < count:
                log(f"  timed out after {timeout:.0f} s with {m.done:.0f}/{count} terminal")
        for count, bound in scaling:
            for layout in LAYOUTS:
                ops, namespaces = start(layout, count, bound)
                try:
                    m = _measure(cp, server, ops, namespaces, count, timeout)
                finally:
                    for op in ops:
                        op.stop()
                srow = _scaling_row(layout, count, bound, m, ops)
                result.scaling.append(srow)
                log(
                    f"  {layout}, {count} Tasks, bound {bound}: {srow.tasks_per_s:.1f} Tasks/s, "
                    f"{srow.succeeded}/{count} Succeeded, operator CPU "
                    f"{srow.operator_cpu_ms_per_task:.0f} ms per Task; per process: "
                    + "; ".join(
                        f"ran {p.tasks_run:.0f}, lost {p.claims_lost:.0f} claims, "
                        f"{p.cpu_ms / 1000:.1f} s CPU"
                        for p in srow.processes
                    )
                )
    return result


def unrun_cpu_ms(result: OperatorResult, count: int, bound: int) -> tuple[float, float] | None:
    """(CPU ms a replica spends per Task it does not run, CPU ms per Task run), both net of
    each process's fixed cost (its idle CPU rate over the run's wall time), from the
    "2 replicas, one small" layout of one scaling config: the big replica runs almost every
    Task, which gives the CPU per Task run; the small one (bound SMALL_BOUND) runs a few and
    watches the rest, all in the same run. Measured in one run rather than as the difference
    of two layouts (run one after the other, whose CPU per Task differs by more than the
    figure sought)."""
    rows = [
        r
        for r in result.scaling
        if (r.tasks, r.bound) == (count, bound) and r.layout == "2 replicas, one small"
    ]
    if not rows or len(rows[0].processes) != 2:
        return None
    big, small = rows[0].processes
    if not big.tasks_run or small.tasks_run >= count:
        return None
    per_run = (big.cpu_ms - big.fixed_cpu_ms) / big.tasks_run
    not_run = count - small.tasks_run
    per_unrun = (small.cpu_ms - small.fixed_cpu_ms - small.tasks_run * per_run) / not_run
    return per_unrun, per_run


Check = tuple[str, bool | None, str]


def scaling_section(report: Any, result: OperatorResult) -> list[Check]:
    """The operator targets of issue 14 and the 1-process / 2-replica / 2-shard tables, for
    bench/run.py (`report` has `text(markdown)` and `table(title, headers, rows)`)."""
    checks: list[Check] = []
    if result.rows:
        worst = max(result.rows, key=lambda r: r.total_per_task)
        limit = STEPS + TARGET_REQUESTS_EXTRA + SIDE_EFFECTS
        checks.append(
            (
                f"API requests per Task ≤ steps + {TARGET_REQUESTS_EXTRA} + side effects",
                worst.total_per_task <= limit,
                f"at most {worst.total_per_task:.1f} per Task for {STEPS} steps (bound {limit}; "
                f"{worst.total_per_task / limit:.2f}x)",
            )
        )
        cpu = max(r.cpu_ms_per_task.get("operator", math.inf) for r in result.rows)
        checks.append(
            (
                f"Operator CPU per Task ≤ {TARGET_CPU_MS:.0f} ms",
                cpu <= TARGET_CPU_MS,
                f"at most {cpu:.0f} ms per {STEPS}-step Task ({cpu / TARGET_CPU_MS:.2f}x)",
            )
        )
    if not result.scaling:
        return checks
    report.text(
        "### Past one process: replicas and shards\n\n"
        "The same Tasks in four layouts, one after the other in this run: one `ordo operator`; "
        "two replicas (two processes on one namespace, sharing the Tasks through reservations, "
        "conditional claims and execution leases); two shards (two namespaces with half the "
        "Tasks each, one process per namespace, as the chart's `shards:` deploys them); two "
        f"replicas, one small (bound {SMALL_BOUND}: it runs a few Tasks and watches the rest, "
        "which measures what a replica spends on a Task it does not run). Each process has "
        "the bound unless said. *x 1 process* = Tasks/s over the 1-process layout's. Claims "
        "lost = claims a process lost to the other (`ordo_task_claims_total{outcome=lost|held}`)."
    )
    base = {(r.tasks, r.bound): r.tasks_per_s for r in result.scaling if r.layout == "1 process"}
    rows = [
        [
            r.layout,
            str(r.tasks),
            str(r.bound),
            f"{r.wall_s:.1f}",
            f"{r.tasks_per_s:.1f}",
            f"{r.tasks_per_s / base[(r.tasks, r.bound)]:.2f}"
            if (r.tasks, r.bound) in base
            else "-",
            f"{r.succeeded}/{r.tasks}",
            f"{r.operator_cpu_ms_per_task:.0f}",
            f"{r.requests_per_task:.1f}",
            f"{r.claims_lost:.0f}",
            f"{sum(r.control_plane_cpu_ms.values()) / r.tasks:.0f}",
        ]
        for r in result.scaling
    ]
    report.table(
        "Replicas and shards",
        [
            "layout",
            "Tasks",
            "bound",
            "wall s",
            "Tasks / s",
            "x 1 process",
            "Succeeded",
            "operator CPU ms / Task",
            "API requests / Task",
            "claims lost",
            "apiserver + etcd CPU ms / Task",
        ],
        rows,
    )
    rows = [
        [
            r.layout,
            p.name.rsplit("-", 1)[-1],
            f"{p.tasks_run:.0f}",
            f"{p.cpu_ms / 1000:.2f}",
            f"{p.fixed_cpu_ms / 1000:.2f}",
            f"{p.cpu_ms / p.tasks_run:.0f}" if p.tasks_run else "-",
            f"{p.requests:.0f}",
            f"{p.claims_lost:.0f}",
        ]
        for r in result.scaling
        for p in r.processes
    ]
    report.table(
        "Per process",
        [
            "layout",
            "process",
            "Tasks run",
            "CPU s",
            "of it fixed (idle rate x wall) s",
            "CPU ms / Task run",
            "API requests",
            "claims lost",
        ],
        rows,
    )
    for count, bound in sorted({(r.tasks, r.bound) for r in result.scaling}):
        figures = unrun_cpu_ms(result, count, bound)
        if figures is None:
            continue
        extra, one = figures
        checks.append(
            (
                "A replica pays ≤ 10% of a Task's CPU for a Task it does not run",
                extra <= TARGET_UNRUN_SHARE * one,
                f"{extra:.1f} ms per Task not run vs {one:.1f} ms per Task run "
                f"({extra / one:.2f}x; {count} Tasks, a replica with bound {SMALL_BOUND} beside "
                f"one with bound {bound}, fixed costs taken out)",
            )
        )
    return checks


if __name__ == "__main__":
    import sys

    quick = "--quick" in sys.argv
    measured = run(QUICK_CONFIGS if quick else CONFIGS)
    for row in measured.rows:
        print(row)
    for srow in measured.scaling:
        print(srow)
