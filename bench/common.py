"""Shared helpers: a clean environment for the peers, worker subprocesses, machine facts."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

PEER_PACKAGES = ("openai-agents", "langgraph", "langgraph-prebuilt", "langchain-openai")
VERSION_PACKAGES = (
    "openai",
    "httpx2",
    "httpx",
    "pydantic",
    "jsonschema",
    "kopf",
    "openai-agents",
    "langgraph",
    "langgraph-prebuilt",
    "langchain-core",
    "langchain-openai",
    "pyinstrument",
)


def bench_env() -> dict[str, str]:
    """The environment of every benchmark process: no real endpoints, no tracing, no
    telemetry (bench-peers.md §4)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "LANGSMITH_", "LANGCHAIN_", "ANTHROPIC_"))
    }
    env.update(
        {
            "OPENAI_AGENTS_DISABLE_TRACING": "1",
            "LANGSMITH_TRACING": "false",
            "LANGCHAIN_TRACING_V2": "false",
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(REPO), str(REPO / "controller"), os.environ.get("PYTHONPATH")])
            ),
            "PYTHONHASHSEED": "0",
        }
    )
    return env


def run_worker(module: str, args: Sequence[str], timeout: float = 600) -> dict[str, Any]:
    """Run `python -m MODULE --worker ARGS` in a fresh process; it prints one JSON line last."""
    proc = subprocess.run(
        [sys.executable, "-m", module, "--worker", *args],
        capture_output=True,
        text=True,
        env=bench_env(),
        cwd=REPO,
        timeout=timeout,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"{module} worker {' '.join(args)} failed ({proc.returncode}):\n"
            f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def peers_installed() -> bool:
    return all(installed(p) for p in PEER_PACKAGES)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "ordo": installed("ordo") or "source"}
    for package in VERSION_PACKAGES:
        version = installed(package)
        if version:
            out[package] = version
    return out


def machine() -> dict[str, str]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    return {
        "cpu": cpu or platform.processor() or "unknown",
        "cores": str(os.cpu_count()),
        "memory": memory,
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
    }


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def status_kib(field: str) -> int:
    """A `VmHWM`/`VmRSS` line of /proc/self/status, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux ≥ 4.0: write 5 to clear_refs)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False
