"""How many workers `--workers auto` starts: the CPUs this container may use, as far as its
memory limit holds them.

CPUs: the cgroup's CPU quota (v2 `cpu.max`, else v1 `cpu.cfs_quota_us` /
`cpu.cfs_period_us`), rounded up, bounded by the CPUs the process may be scheduled on (its
affinity); at least 1. A container with `resources.limits.cpu: 1500m` gets 2 workers, one
without a limit as many as its node's CPUs it may run on. Memory: with a memory limit
(v2 `memory.max`, v1 `memory.limit_in_bytes`), no more workers than fit beside the control
process at CONTROL_MIB + WORKER_MIB each (docs/scaling.md has the measured figures), so a
pod without a CPU limit on a large node is not OOM-killed by its own workers."""

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


CONTROL_MIB = 192
"""What the control process needs before any run (RSS idle, rounded up: docs/scaling.md)."""
WORKER_MIB = 128
"""What one worker child needs: 69 MiB RSS once ready (bench/workers_startup.py), plus
headroom for its runs."""


def memory_limit(root: Path = CGROUP_ROOT) -> int | None:
    """The cgroup's memory limit in bytes, or None when there is none."""
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            return None
        return value if 0 < value < 1 << 60 else None  # v1 writes a huge number for none
    return None


def auto_workers(root: Path = CGROUP_ROOT) -> int:
    """`--workers auto`: `available_cpus`, at most what the memory limit holds, at least 1."""
    workers = available_cpus(root)
    limit = memory_limit(root)
    if limit is not None:
        fits = (limit // (1024 * 1024) - CONTROL_MIB) // WORKER_MIB
        workers = min(workers, fits)
    return max(1, workers)
