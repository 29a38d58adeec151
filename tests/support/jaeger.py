"""Jaeger v2 on loopback for the tracing tests: built from its Go module by
scripts/build-jaeger (.cache/jaeger/<version>/bin/jaeger), in-memory storage, the OTLP/HTTP
receiver and the query API on free ports, nothing else listening.

    with Jaeger.start(tmp_path) as jaeger:
        env = jaeger.otel_env("ordo-test")     # for `ordo run` / `ordo operator`
        trace = jaeger.trace(trace_id, spans=4)  # the query API's JSON, polled until complete
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import pytest

from ordo_devcluster.processes import terminate_group

from .operator import free_port
from .wire import in_ci

ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:{query_http}
    grpc:
      endpoint: 127.0.0.1:{query_grpc}
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp_http}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
"""


def binary() -> Path | None:
    """The built jaeger binary (scripts/build-jaeger --print names its folder), or None."""
    try:
        out = subprocess.run(
            [str(ROOT / "scripts" / "build-jaeger"), "--print"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(out) / "jaeger"
    return path if os.access(path, os.X_OK) else None


def require_binary() -> Path:
    """The binary; skip locally, fail in CI (scripts/test builds it), when it is missing."""
    path = binary()
    if path is None:
        message = "jaeger is not built: run scripts/build-jaeger"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return path


class Jaeger:
    def __init__(self, workdir: Path) -> None:
        self.otlp_port = free_port()
        self.query_port = free_port()
        self.workdir = workdir
        self.log_path = workdir / "jaeger.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def start(cls, workdir: Path) -> Jaeger:
        jaeger = cls(workdir)
        jaeger._start(require_binary())
        return jaeger

    def _start(self, path: Path) -> None:
        config = self.workdir / "jaeger.yaml"
        config.write_text(
            CONFIG.format(
                query_http=self.query_port, query_grpc=free_port(), otlp_http=self.otlp_port
            )
        )
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [str(path), "--config", f"file:{config}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jaeger exited with {self.proc.returncode}:\n{self.logs()}")
            try:
                if httpx.get(f"{self.query_url}/api/services", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"jaeger not ready in 60s:\n{self.logs()}")

    @property
    def query_url(self) -> str:
        return f"http://127.0.0.1:{self.query_port}"

    @property
    def otlp_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.otlp_port}"

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def otel_env(self, service: str) -> dict[str, str]:
        """The standard OpenTelemetry environment pointing at this Jaeger; short batch delay."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.otlp_endpoint,
            "OTEL_SERVICE_NAME": service,
            "OTEL_BSP_SCHEDULE_DELAY": "200",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }

    def trace(self, trace_id: str, *, spans: int, timeout: float = 60) -> dict[str, Any]:
        """GET /api/traces/{id} until it has at least `spans` spans (export is batched)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            response = httpx.get(f"{self.query_url}/api/traces/{trace_id}", timeout=5)
            if response.status_code == 200:
                last = response.json()
                data = last.get("data") or []
                if data and len(data[0].get("spans") or []) >= spans:
                    return dict(data[0])
            time.sleep(0.3)
        raise AssertionError(
            f"trace {trace_id} did not reach {spans} spans in {timeout}s: "
            f"{json.dumps(last)[:2000]}\n{self.logs()}"
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            terminate_group(self.proc, 15)  # SIGTERM, then SIGKILL after 15 s
        self.proc = None

    def __enter__(self) -> Jaeger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def tags(span: dict[str, Any]) -> dict[str, Any]:
    """A Jaeger span's tags as a dict."""
    return {t["key"]: t["value"] for t in span.get("tags") or []}


def parent_id(span: dict[str, Any]) -> str | None:
    for ref in span.get("references") or []:
        if ref.get("refType") == "CHILD_OF":
            return str(ref["spanID"])
    return None


def tree(trace: dict[str, Any]) -> dict[str, list[str]]:
    """Operation name of each span with children → its children's names, by start time."""
    spans = trace["spans"]
    by_id = {s["spanID"]: s for s in spans}
    out: dict[str, list[str]] = {}
    for span in sorted(spans, key=lambda s: s["startTime"]):
        parent = by_id.get(parent_id(span) or "")
        if parent is not None:
            out.setdefault(parent["operationName"], []).append(span["operationName"])
    return out
