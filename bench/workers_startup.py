"""Startup time of a WorkerPool (operator/workers/pool.py) with N children and the real
engine: from `start` until every child has logged in (kubeconfig), built its KubeClient,
Runner and Metrics and said hello; and each child's RSS once ready. The kubeconfig points at
a closed port: logging in reads the file only, no request is made.

    .venv/bin/python -m bench.workers_startup --workers 1 2 4 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from pathlib import Path

from ordo.credentials import Destination, Release
from ordo.operator.telemetry.metrics import Metrics
from ordo.operator.workers.pool import WorkerPool

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: bench}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


class NoStore:
    async def get(self, kind: str, namespace: str, name: str) -> None:
        return None

    async def list(self, kind: str, namespace: str) -> list[dict[str, object]]:
        return []

    async def credential(
        self, namespace: str, name: str, key: str, dest: Destination | None
    ) -> Release:
        return Release(None)


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def once(workers: int, env: dict[str, str]) -> tuple[float, list[float]]:
    pool = WorkerPool(workers, NoStore(), Metrics(), env=env, log_level="WARNING")
    await pool.start()
    try:
        assert pool.startup_seconds is not None
        return pool.startup_seconds, [rss_mib(pid) for pid in pool.pids()]
    finally:
        await pool.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "kubeconfig"
        config.write_text(KUBECONFIG)
        env = {**os.environ, "KUBECONFIG": str(config)}
        print(f"cpus (affinity): {len(os.sched_getaffinity(0))}")
        print("workers  startup s (median, min..max)  RSS per child MiB")
        for n in args.workers:
            results = [await once(n, env) for _ in range(args.repeat)]
            times = [t for t, _ in results]
            rss = [r for _, rs in results for r in rs]
            print(
                f"{n:>7}  {statistics.median(times):.2f} ({min(times):.2f}..{max(times):.2f})"
                f"{'':>14}{statistics.median(rss):.0f}"
            )


if __name__ == "__main__":
    asyncio.run(main())
