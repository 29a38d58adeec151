"""`--workers auto`: the cgroup's CPU quota, rounded up, within the affinity, at least 1."""

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
