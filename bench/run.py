"""Run ordo's benchmarks, print the tables and write docs/benchmarks.md.

    .venv/bin/pip install -r bench/requirements.txt     # the peer frameworks (once)
    .venv/bin/python bench/run.py                       # everything (~15 min on 2 cores)
    .venv/bin/python bench/run.py --quick               # a tiny version of each (CI smoke)
    .venv/bin/python bench/run.py --only loop --only concurrency

The full run writes docs/benchmarks.md; `--quick` writes only where `--output` says. Without
the peer frameworks installed, the loop benchmark runs ordo and the floor and says the peers
were skipped; without the control plane binaries (scripts/build-controlplane) the operator
benchmark is skipped the same way.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/run.py`
    _repo = Path(__file__).resolve().parents[1]
    sys.path[:0] = [str(_repo), str(_repo / "controller")]

from rich.console import Console
from rich.table import Table

from bench import concurrency, loop_overhead, operator_throughput
from bench.common import REPO, machine, peers_installed, versions

BENCHMARKS = ("loop", "concurrency", "operator")
DOC = REPO / "docs" / "benchmarks.md"

# Targets, each a ratio or a bound measured in the same run (issues 8 and 14). The floor is
# the bare aiohttp + json loop (bench/loop_overhead.py `floor_runner`).
TARGET_CPU_RATIO = 1.5
"""Client CPU per model call, ordo / the floor (benchmark 1, 0 ms latency)."""
TARGET_CONCURRENCY_RATIO = 1.5
"""Wall time of the most runs at once, ordo / the floor (benchmark 2)."""
TARGET_RSS_KIB = 200
"""Peak RSS per in-flight run (benchmark 2)."""
TARGET_STATUS_EXTRA = 2
"""Status patches per Task ≤ steps + this (benchmark 3). The other operator targets (API
requests and CPU per Task, a replica's cost for a Task it does not run) are
operator_throughput's, checked by its `scaling_section`."""


def _fmt(value: float, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}f}"


class Report:
    """Collects tables once, renders them to the console (rich) and to Markdown."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.parts: list[str] = []

    def text(self, markdown: str) -> None:
        self.parts.append(markdown.rstrip() + "\n")

    def table(self, title: str, headers: list[str], rows: list[list[str]]) -> None:
        table = Table(title=title, title_justify="left")
        for i, header in enumerate(headers):
            table.add_column(header, justify="left" if i == 0 else "right")
        for row in rows:
            table.add_row(*row)
        self.console.print(table)
        lines = [
            f"**{title}**",
            "",
            "| " + " | ".join(headers) + " |",
            "|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        self.parts.append("\n".join(lines) + "\n")

    def markdown(self) -> str:
        return "\n".join(self.parts)


def _verdict(ok: bool | None) -> str:
    return "**not measured**" if ok is None else "**met**" if ok else "**not met**"


def loop_section(
    report: Report, result: loop_overhead.LoopResult
) -> list[tuple[str, bool | None, str]]:
    report.text("## 1. Loop overhead: one agent, 3 tools, 5 model calls\n")
    report.text(
        f"Same server, same tools, same script for every loop; {result.rounds} round(s), each "
        "framework in a fresh process per round, interleaved. Median of all timed runs. "
        "*Per-step overhead* = run time / 5 - model latency: everything that is not the "
        "model, the same server round trip included for all (bench server: "
        f"{result.server['round_trip_us']:.0f} µs round trip, "
        f"{result.server['server_cpu_us']:.0f} µs of its CPU per request). *Client-only ratio* "
        "takes that round trip out of both sides. *Spread*: (max - min) / median of the "
        "per-round medians."
    )
    if result.skipped:
        report.text(
            "Peer frameworks skipped (not installed, or `--no-peers`): "
            + ", ".join(result.skipped)
            + ". Install them with `.venv/bin/pip install -r bench/requirements.txt`."
        )
    headers = [
        "loop",
        "runs",
        "ms / run",
        "overhead ms / step",
        "client CPU ms / step",
        "CPU ratio to floor",
        "overhead ratio to floor",
        "client-only ratio",
        "tools run / run",
        "spread",
    ]
    for latency in sorted({r.latency_ms for r in result.rows}):
        rows = [
            [
                r.framework,
                str(r.runs),
                _fmt(r.run_ms),
                _fmt(r.overhead_ms, 3),
                _fmt(r.cpu_step_ms, 3),
                _fmt(r.cpu_ratio),
                _fmt(r.ratio),
                _fmt(r.client_ratio),
                _fmt(r.tool_executions, 0),
                f"{r.round_spread * 100:.0f}%",
            ]
            for r in result.rows
            if r.latency_ms == latency
        ]
        report.table(f"Model latency {latency} ms", headers, rows)
    if not result.model_calls_checked:
        report.text("**Warning:** a loop made a different number of model calls than 5 per run.")
    checks: list[tuple[str, bool | None, str]] = []
    ordo0, floor0 = result.row("ordo", 0), result.row("floor", 0)
    if ordo0 is not None and floor0 is not None:
        sdk0 = result.row("raw-sdk", 0)
        checks.append(
            (
                f"Client CPU per model call ≤ {TARGET_CPU_RATIO}x the bare aiohttp floor",
                ordo0.cpu_ratio <= TARGET_CPU_RATIO,
                f"ordo {ordo0.cpu_step_ms:.3f} ms vs floor {floor0.cpu_step_ms:.3f} ms per call "
                f"at 0 ms: {ordo0.cpu_ratio:.2f}x"
                + (f" (raw SDK loop {sdk0.cpu_ratio:.2f}x)" if sdk0 is not None else ""),
            )
        )
    peers = [f for f in loop_overhead.PEER_FRAMEWORKS if result.row(f, 0) is not None]
    if peers:
        detail = []
        faster = True
        for latency in sorted({r.latency_ms for r in result.rows}):
            mine = result.row("ordo", latency)
            assert mine is not None
            for peer in peers:
                other = result.row(peer, latency)
                assert other is not None
                faster = faster and mine.overhead_ms < other.overhead_ms
                detail.append(
                    f"{peer} {other.overhead_ms / mine.overhead_ms:.1f}x ordo's at {latency} ms"
                )
        checks.append(
            ("Faster than both frameworks", faster, "per-step overhead: " + "; ".join(detail))
        )
    else:
        checks.append(("Faster than both frameworks", None, "the peers were skipped"))
    return checks


def concurrency_section(
    report: Report, result: concurrency.ConcurrencyResult
) -> list[tuple[str, bool | None, str]]:
    report.text("## 2. Concurrency: runs at once in one ordo process, 100 ms model latency\n")
    report.text(
        "Each level in a fresh process; every ordo run builds its own model client, as a Task "
        "does. Ideal = 5 model calls x 100 ms. *RSS per run* = (peak RSS during the runs - RSS "
        "before them) / runs. The floor is the bare aiohttp + json loop sharing one session; "
        "raw-sdk the hand-written `openai` SDK loop (`create`, default httpx2 transport) "
        "sharing one client."
        + ("" if result.peak_reset else " (VmHWM could not be reset: peaks include start-up.)")
    )
    headers = [
        "loop",
        "runs at once",
        "wall s",
        "ideal s",
        "x ideal",
        "client CPU s",
        "server CPU s",
        "peak RSS MiB",
        "RSS KiB / run",
        "errors",
    ]
    rows = [
        [
            r.framework,
            str(r.level),
            _fmt(r.wall_s),
            _fmt(r.ideal_s),
            _fmt(r.ratio),
            _fmt(r.cpu_s),
            _fmt(r.server_cpu_s),
            _fmt(r.peak_rss_mib, 1),
            _fmt(r.rss_per_run_kib, 0),
            str(r.errors),
        ]
        for r in result.rows
    ]
    report.table("Concurrent runs", headers, rows)
    checks: list[tuple[str, bool | None, str]] = []
    top = max((r.level for r in result.rows if r.framework == "ordo"), default=0)
    row, floor = result.row("ordo", top), result.row("floor", top)
    if row is not None and floor is not None:
        calls = row.level * concurrency.STEPS
        ratio = row.wall_s / floor.wall_s
        checks.append(
            (
                f"{top} concurrent runs within {TARGET_CONCURRENCY_RATIO}x the floor's wall time",
                ratio <= TARGET_CONCURRENCY_RATIO and row.errors == 0,
                f"ordo {row.wall_s:.2f} s ({row.ratio:.2f}x ideal) vs floor {floor.wall_s:.2f} s "
                f"({floor.ratio:.2f}x ideal): {ratio:.2f}x; ordo's client CPU "
                f"{row.cpu_s / calls * 1000:.2f} ms per model call, the floor's "
                f"{floor.cpu_s / calls * 1000:.2f} ms, on one event loop",
            )
        )
    if row is not None:
        checks.append(
            (
                f"≤ {TARGET_RSS_KIB} KiB RSS per in-flight run",
                row.rss_per_run_kib <= TARGET_RSS_KIB,
                f"{row.rss_per_run_kib:.0f} KiB per run at {top} runs",
            )
        )
    return checks


def operator_section(
    report: Report, result: operator_throughput.OperatorResult
) -> list[tuple[str, bool | None, str]]:
    report.text("## 3. Operator: Tasks created at once on the test control plane\n")
    if result.skipped:
        report.text(f"Skipped: {result.skipped}.")
        return []
    report.text(
        f"{result.control_plane} + etcd on loopback, `ordo operator` in its own process, the "
        "bench server at 100 ms per model call, 3 `http` Tools. Each Task makes 5 model calls. "
        "Ideal = ceil(Tasks / bound) x 5 x 100 ms. Wall time from the first create to the "
        "last terminal Task (as counted by `ordo_tasks_total`). API requests per Task are "
        "the operator's own (`ordo_kube_api_requests_total`), by verb."
    )
    verbs = sorted({v for r in result.rows for v in r.requests_per_task})
    headers = [
        "Tasks",
        "bound",
        "wall s",
        "ideal s",
        "x ideal",
        "Tasks / s",
        "Succeeded",
        "model calls / Task",
    ]
    rows = [
        [
            str(r.tasks),
            str(r.bound),
            _fmt(r.wall_s, 1),
            _fmt(r.ideal_s, 1),
            _fmt(r.ratio, 1),
            _fmt(r.tasks / r.wall_s, 1),
            f"{r.succeeded}/{r.tasks}",
            _fmt(r.model_calls_per_task, 1),
        ]
        for r in result.rows
    ]
    report.table("Operator throughput", headers, rows)
    report.text(
        "API requests per Task, by verb (`patch-status` is the status subresource; "
        "`create`/`replace`/`delete` are checkpoint ConfigMaps and Events):"
    )
    rows = [
        [
            str(r.tasks),
            str(r.bound),
            _fmt(r.total_per_task, 1),
            *[_fmt(r.requests_per_task.get(v, 0.0), 2) for v in verbs],
        ]
        for r in result.rows
    ]
    report.table("API requests per Task", ["Tasks", "bound", "all", *verbs], rows)
    names = sorted({n for r in result.rows for n in r.cpu_ms_per_task})
    report.text(
        "CPU milliseconds per Task spent by the operator, kube-apiserver and etcd during the "
        "run; *operator busy* = the operator's CPU seconds per wall second (it is one "
        "asyncio process: 100% is one core, its ceiling); *of 2 cores* = all three together "
        "as a share of the machine (the bench server and kubectl not counted):"
    )
    rows = [
        [
            str(r.tasks),
            str(r.bound),
            *[_fmt(r.cpu_ms_per_task.get(n, float("nan")), 0) for n in names],
            _fmt(r.cpu_ms_per_task.get("operator", float("nan")) * r.tasks / r.wall_s / 10, 0)
            + "%",
            _fmt(sum(r.cpu_ms_per_task.values()) * r.tasks / r.wall_s / 20, 0) + "%",
        ]
        for r in result.rows
    ]
    report.table("CPU per Task", ["Tasks", "bound", *names, "operator busy", "of 2 cores"], rows)
    return operator_targets(result)


def operator_targets(
    result: operator_throughput.OperatorResult,
) -> list[tuple[str, bool | None, str]]:
    """The status-patch target (issue 8), from the worst configuration of the run; the issue
    14 operator targets come from `operator_throughput.scaling_section`."""
    if not result.rows:
        return []
    steps = operator_throughput.STEPS
    patches = max(r.status_patches_per_task for r in result.rows)
    return [
        (
            f"Status patches per Task ≤ steps + {TARGET_STATUS_EXTRA}",
            patches <= steps + TARGET_STATUS_EXTRA,
            f"at most {patches:.2f} per Task for {steps} steps",
        ),
    ]


def profile_section(report: Report, path: str | None) -> None:
    if not path or not Path(path).exists():
        return
    text = Path(path).read_text()
    lines = [line for line in text.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if "run_forever" in line), 0)
    report.text(
        "## Profile of ordo's loop\n\npyinstrument, 200 runs at 0 ms latency in a separate "
        "process after the timed rounds (its numbers are not in the tables above).\n"
    )
    report.text("```\n" + "\n".join(lines[start : start + 40]) + "\n```")


def write_doc(
    path: Path,
    report: Report,
    checks: list[tuple[str, bool | None, str]],
    args: argparse.Namespace,
    elapsed: float,
) -> None:
    info = machine()
    vers = versions()
    head = [
        "# Benchmarks",
        "",
        "Written by `bench/run.py` (see `bench/README.md` for the method). Re-run it to "
        "update this page; numbers are from one run on the machine below.",
        "",
        f"- Date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Command: `{' '.join(['bench/run.py', *map(shlex.quote, args.argv)])}` "
        f"({elapsed / 60:.1f} min)",
        f"- Machine: {info['cpu']}, {info['cores']} cores, {info['memory']}, {info['os']}",
        f"- Load average (1 min) before / after: {args.load_before[0]:.2f} / "
        f"{os.getloadavg()[0]:.2f} (other processes on the machine show up in the numbers)",
        f"- Versions: {', '.join(f'{k} {v}' for k, v in vers.items())}",
        f"- ordo commit: {_git_commit()}",
        "",
        "## Targets (issues 8 and 14)",
        "",
        "| target | result | detail |",
        "|---|---|---|",
        *[f"| {name} | {_verdict(ok)} | {detail} |" for name, ok, detail in checks],
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    body = report.markdown()
    tail = _explanations(set(args.ran))
    path.write_text("\n".join(head) + "\n" + body + ("\n" + tail if tail else ""))


def _explanations(ran: set[str]) -> str:
    """Standing notes on why targets are met or not; numbers are in the tables above."""
    notes: list[str] = ["## Reading the results", ""]
    if "loop" in ran:
        notes += _LOOP_NOTES
    if "concurrency" in ran:
        notes += _CONCURRENCY_NOTES
    if "operator" in ran:
        notes += _OPERATOR_NOTES
    return "\n".join(notes) + "\n" if len(notes) > 2 else ""


_LOOP_NOTES: tuple[str, ...] = (
    (
        "- **The floor is the bare loop; ordo stays on the SDKs.** `floor` is the least a "
        "Python agent loop can do: one aiohttp session, `json.dumps` of the request, "
        "`json.loads` of the answer, local tools; `raw-sdk` is the same loop on `openai`'s "
        "`chat.completions.create` as a user writes it (httpx2, request transform, pydantic "
        "response models). ordo calls through the official SDKs on their cheapest "
        "configuration (providers/sdk_http.py: one httpx2 client per event loop on ordo's "
        "bounded aiohttp transport, the generic `post` with an already-JSON body, the raw "
        "answer parsed once). The SDK's own request path, measured with no I/O at all, costs "
        "1.5-1.9x the floor's whole call, so the 1.5x target cannot be met with the SDKs on "
        'the path; ordo keeps them by choice (docs/decisions.md, "Model calls through the '
        "SDKs\", with the split of the rest: `python -m bench.call_split`). ordo's engine "
        "(transcript items, governance, argument validation, usage, events) is about 0.06 ms "
        "of it per call."
    ),
    (
        "- **ordo runs the benchmark script the way a Task does.** A tool is offered until it "
        "has been called (DESIGN §3), so the 4th tool step's second `lookup` call gets the "
        "engine's error result instead of running again (3 tool executions per run instead "
        "of 4); governance and argument validation run for every call."
    ),
)

_CONCURRENCY_NOTES: tuple[str, ...] = (
    (
        "- **Concurrency is CPU-bound.** One asyncio process spends the client CPU of every "
        "model call on one core (HTTP client, JSON, response parsing). The wall time of N "
        "runs cannot be shorter than N x 5 x that CPU time; at 1000 runs that is far above "
        "0.5 s for any Python loop, the floor included, so ordo is measured against the "
        "floor's wall time in the same run. Past one process ordo scales on Kubernetes "
        "(DESIGN §7: sharded operators, Task execution in Jobs). Memory is not the limit: "
        "every run's model client shares the event loop's one SDK HTTP client (its "
        "connection pool), as Tasks in the operator do."
    ),
)

_OPERATOR_NOTES: tuple[str, ...] = (
    (
        "- **The operator is CPU-bound, not bound by `--max-concurrent-tasks`.** It is one "
        "asyncio process, so one core is its ceiling, and every Task costs it the CPU in "
        "the table above: the API requests by verb (claim, finalizer, per-step status and "
        "checkpoint writes, Events, reference reads), the engine and the tool calls. Once "
        "*operator busy* is near 100%, Tasks per second stay the same whatever the bound, "
        "and the time to finish N Tasks is N x CPU per Task rather than the waves of the "
        "ideal. More throughput comes from less CPU per Task, or from sharding the operator "
        "(DESIGN §7)."
    ),
)


def _git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def install_peers(console: Console) -> None:
    console.print("installing the peer frameworks (bench/requirements.txt)")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "-r", str(REPO / "bench/requirements.txt")],
        check=True,
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tiny version of each (smoke)")
    parser.add_argument("--only", action="append", choices=BENCHMARKS, help="repeatable")
    parser.add_argument("--no-peers", action="store_true", help="skip the peer frameworks")
    parser.add_argument(
        "--quick-peers", action="store_true", help="with --quick: run the peers too (if installed)"
    )
    parser.add_argument(
        "--install-peers", action="store_true", help="pip install -r bench/requirements.txt"
    )
    parser.add_argument("--no-profile", action="store_true", help="skip the pyinstrument pass")
    parser.add_argument(
        "--output",
        type=Path,
        help=f"Markdown report (default: {DOC.relative_to(REPO)} for a full run, none for --quick)",
    )
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    console = Console(width=160)
    if args.install_peers:
        install_peers(console)
    only = args.only or list(BENCHMARKS)
    args.ran = only
    output = args.output or (None if args.quick else DOC)
    started = time.monotonic()
    args.load_before = os.getloadavg()
    report = Report(console)
    checks: list[tuple[str, bool | None, str]] = []
    results: dict[str, Any] = {}
    log = console.print

    if "loop" in only:
        console.rule("1. loop overhead")
        settings = loop_overhead.Settings.quick() if args.quick else loop_overhead.Settings()
        settings.peers = not args.no_peers and (not args.quick or args.quick_peers)
        if settings.peers and not peers_installed():
            log(
                "peer frameworks not installed: skipping them (pip install -r bench/requirements.txt)"
            )
        profile = None
        if not args.no_profile and not args.quick:
            try:
                import pyinstrument  # noqa: F401

                profile = str((output or DOC).parent / ".ordo-loop-profile.txt")
            except ImportError:
                log("pyinstrument not installed: no profile")
        result = loop_overhead.run(settings, profile=profile, log=log)
        results["loop"] = result
        checks += loop_section(report, result)
        if profile:
            profile_section(report, profile)
            for suffix in (".txt", ".html"):
                Path(profile.removesuffix(".txt") + suffix).unlink(missing_ok=True)

    if "concurrency" in only:
        console.rule("2. concurrency")
        levels = concurrency.QUICK_LEVELS if args.quick else concurrency.LEVELS
        result_c = concurrency.run(levels, log=log)
        results["concurrency"] = result_c
        checks += concurrency_section(report, result_c)

    if "operator" in only:
        console.rule("3. operator")
        configs = operator_throughput.QUICK_CONFIGS if args.quick else operator_throughput.CONFIGS
        result_o = operator_throughput.run(configs, log=log)
        results["operator"] = result_o
        if result_o.skipped:
            log(f"operator benchmark skipped: {result_o.skipped}")
        checks += operator_section(report, result_o)
        checks += operator_throughput.scaling_section(report, result_o)

    elapsed = time.monotonic() - started
    console.rule("targets")
    for name, ok, detail in checks:
        console.print(f"{_verdict(ok).strip('*').upper():12} {name}: {detail}")
    console.print(f"total {elapsed:.0f} s")
    if output is not None:
        write_doc(output, report, checks, args, elapsed)
        console.print(f"wrote {output}")
    results["checks"] = checks
    results["elapsed"] = elapsed
    results["markdown"] = output.read_text() if output is not None else report.markdown()
    return results


if __name__ == "__main__":
    main()
