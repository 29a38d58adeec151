"""`--workers auto`: the cgroup's CPU quota, rounded up, within the affinity and what the
memory limit holds, at least 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from ordo.operator.workers import cpus


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [("150000 100000", 1.5), ("max 100000", None), ("50000 100000", 0.5), ("junk", None)],
)
def test_cgroup_v2_quota(tmp_path: Path, cpu_max: str, expected: float | None) -> None:
    (tmp_path / "cpu.max").write_text(cpu_max + "\n")
    assert cpus.cgroup_quota(tmp_path) == expected


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("250000\n")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert cpus.cgroup_quota(tmp_path) == 2.5


def test_unlimited_v1_quota_is_none(tmp_path: Path) -> None:
    (tmp_path / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu.cfs_period_us").write_text("100000\n")
    assert cpus.cgroup_quota(tmp_path) is None


def test_available_rounds_up_within_the_affinity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpus, "schedulable_cpus", lambda: 8)
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cpus.available_cpus(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("1600000 100000\n")
    assert cpus.available_cpus(tmp_path) == 8
    (tmp_path / "cpu.max").write_text("10000 100000\n")
    assert cpus.available_cpus(tmp_path) == 1
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cpus.available_cpus(tmp_path) == 8


def test_auto_is_bounded_by_what_the_memory_limit_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No CPU limit on a 64-CPU node and the chart's 512 Mi: not 64 workers (an OOM kill)."""
    monkeypatch.setattr(cpus, "schedulable_cpus", lambda: 64)
    assert cpus.auto_workers(tmp_path) == 64  # no cgroup files: no limits known
    (tmp_path / "memory.max").write_text(f"{512 * 1024 * 1024}\n")
    assert cpus.auto_workers(tmp_path) == (512 - cpus.CONTROL_MIB) // cpus.WORKER_MIB
    (tmp_path / "memory.max").write_text(f"{64 * 1024 * 1024}\n")
    assert cpus.auto_workers(tmp_path) == 1  # never fewer than one
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "cpu.max").write_text("300000 100000\n")
    assert cpus.auto_workers(tmp_path) == 3


def test_memory_limit_v1_and_none(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("1073741824\n")
    assert cpus.memory_limit(tmp_path) == 1 << 30
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert cpus.memory_limit(tmp_path) is None
