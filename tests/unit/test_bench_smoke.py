"""The benchmark harness still works: `bench/run.py --quick` produces well-formed tables.

Nothing here asserts on speed (DESIGN §8): only that every benchmark ran to the end, that
its rows are complete and finite, and that the Markdown report has its sections and tables.
The peer frameworks are never needed: quick mode skips them and says so. The operator part
needs the test control plane and is marked `cluster`.
"""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import run as bench_run  # noqa: E402
from bench.server import ServerProcess, completion, measure_round_trip, parse_model  # noqa: E402


def _tables(markdown: str) -> list[list[list[str]]]:
    """Every Markdown table as rows of cells (header first, separator dropped)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def _assert_well_formed(table: list[list[str]]) -> None:
    header, rows = table[0], table[1:]
    assert rows, f"table {header} has no rows"
    for row in rows:
        assert len(row) == len(header), (header, row)
        assert all(cell for cell in row), (header, row)


def _finite(*values: float) -> bool:
    return all(isinstance(v, int | float) and math.isfinite(v) for v in values)


def test_bench_server_follows_the_script() -> None:
    body: dict[str, Any] = {"model": "bench-l0-s2", "messages": [{"role": "user"}]}
    assert parse_model("bench-l50-s4") == (0.05, 4)
    first = completion(body, 100, 1)["choices"][0]
    assert first["message"]["tool_calls"][0]["function"]["name"] == "lookup"
    body["messages"] += [{"role": "assistant"}, {"role": "tool"}, {"role": "assistant"}]
    last = completion(body, 100, 2)
    assert last["choices"][0]["finish_reason"] == "stop"
    assert last["usage"]["total_tokens"] > 0
    with ServerProcess() as server:
        measured = measure_round_trip(server.url, 20)
        assert _finite(*measured.values())
        assert server.stats()["model_calls"] == 20


def test_quick_loop_and_concurrency(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    results = bench_run.main(
        ["--quick", "--only", "loop", "--only", "concurrency", "--output", str(out)]
    )
    loop = results["loop"]
    assert {(r.framework, r.latency_ms) for r in loop.rows} == {
        (f, latency) for f in ("floor", "raw-sdk", "ordo") for latency in (0, 50)
    }
    assert loop.skipped == ["openai-agents", "langgraph"]
    assert loop.model_calls_checked
    for r in loop.rows:
        assert r.runs >= 1
        assert _finite(r.run_ms, r.overhead_ms, r.cpu_step_ms, r.ratio, r.cpu_ratio, r.client_ratio)
    conc = results["concurrency"]
    assert {(r.framework, r.level) for r in conc.rows} == {
        (f, n) for f in ("ordo", "floor", "raw-sdk") for n in (1, 10)
    }
    for c in conc.rows:
        assert c.errors == 0
        assert _finite(c.wall_s, c.ratio, c.cpu_s, c.rss_per_run_kib, c.peak_rss_mib)

    markdown = out.read_text()
    assert markdown == results["markdown"]
    for heading in ("# Benchmarks", "## Targets", "## 1. Loop overhead", "## 2. Concurrency"):
        assert heading in markdown
    assert "Peer frameworks skipped" in markdown
    tables = _tables(markdown)
    assert len(tables) == 4  # targets, loop at 0 ms and at 50 ms, concurrency
    assert "**Model latency 0 ms**" in markdown
    for table in tables:
        _assert_well_formed(table)
    targets = tables[0]
    assert targets[0] == ["target", "result", "detail"]
    assert all(row[1] in ("**met**", "**not met**", "**not measured**") for row in targets[1:])
    assert ["Faster than both frameworks", "**not measured**", "the peers were skipped"] in targets


def test_call_split_measures_every_part_and_tables_them(capsys: pytest.CaptureFixture[str]) -> None:
    """bench/call_split.py: each part ran its five recorded calls (it raises otherwise) and
    the table has one finite row per part."""
    from bench import call_split

    call_split.main(["--runs", "1", "--rounds", "1"])
    table = _tables(capsys.readouterr().out)
    assert len(table) == 1
    _assert_well_formed(table[0])
    assert len(table[0]) == 1 + 11
    for row in table[0][1:]:
        assert _finite(float(row[1]), float(row[2].removesuffix("x")))


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@pytest.mark.cluster
@pytest.mark.slow
def test_quick_operator(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    results = bench_run.main(["--quick", "--only", "operator", "--output", str(out)])
    operator = results["operator"]
    if operator.skipped:
        if _in_ci():
            pytest.fail(operator.skipped)
        pytest.skip(operator.skipped)
    (row,) = operator.rows
    assert row.succeeded == row.tasks
    assert row.model_calls_per_task == 5
    assert row.requests_per_task.get("patch-status", 0) > 0
    assert _finite(row.wall_s, row.ratio, row.total_per_task)
    markdown = out.read_text()
    assert "## 3. Operator" in markdown
    tables = _tables(markdown)
    # targets, throughput, API requests by verb, CPU per process; replicas and shards, per
    # process (operator_throughput.scaling_section)
    assert len(tables) == 6
    assert "### Past one process: replicas and shards" in markdown
    names = [name for name, _, _ in results["checks"]]
    assert len(names) == len(set(names)), names  # each target reported once
    for table in tables:
        _assert_well_formed(table)


@pytest.mark.cluster
@pytest.mark.slow
def test_inflight_bench_measures_a_few_waiting_runs() -> None:
    """bench/inflight.py end to end with a handful of Tasks: every figure present and sane
    (the process Lease's renewals are the only requests while runs wait)."""
    from bench import inflight

    result = inflight.run(8, window_s=6, log=lambda _line: None)
    assert result.tasks == 8 and result.per_task_renewals_per_s == 8 * 3 / inflight.LEASE_SECONDS
    assert set(result.requests_by_verb) <= {"patch", "list", "watch", "get"}
    assert _finite(result.requests_per_s, result.rss_idle_mib, result.kib_per_inflight_task)
    assert result.rss_inflight_mib > 0 and result.claim_s > 0
