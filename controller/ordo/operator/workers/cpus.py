"""How many CPUs this container may use: what `--workers auto` starts.

The cgroup's CPU quota (v2 `cpu.max`, else v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`),
rounded up, bounded by the CPUs the process may be scheduled on (its affinity); at least 1.
A container with `resources.limits.cpu: 1500m` gets 2 workers, one without a limit as many
as its node's CPUs it may run on."""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _quota_v2(root: Path) -> float | None:
    """`cpu.max` ("max 100000" or "150000 100000") of the process's cgroup (v2)."""
    try:
        fields = (root / "cpu.max").read_text().split()
    except OSError:
        return None
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _quota_v1(root: Path) -> float | None:
    for folder in (root / "cpu", root / "cpu,cpuacct", root):
        try:
            quota = int((folder / "cpu.cfs_quota_us").read_text())
            period = int((folder / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return quota / period if quota > 0 and period > 0 else None
    return None


def cgroup_quota(root: Path = CGROUP_ROOT) -> float | None:
    """The CPU quota in CPUs (1.5 for 1500m), or None when there is none."""
    quota = _quota_v2(root)
    return quota if quota is not None else _quota_v1(root)


def schedulable_cpus() -> int:
    """The CPUs this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def available_cpus(root: Path = CGROUP_ROOT) -> int:
    """The CPUs this container may use: its quota rounded up, at most the schedulable ones,
    at least 1."""
    cpus = schedulable_cpus()
    quota = cgroup_quota(root)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota - 1e-9))
    return max(1, cpus)
