"""Exactly-once under API faults: the operator talks to kube-apiserver through a seeded,
fault-injecting proxy (409 / 429 / 500, connection resets before and after the request is
applied, delays, dropped watch streams) while 100 Tasks each call two non-idempotent tools.

Invariants (see `InvariantMonitor`): every Task terminal with a documented reason within
`timeout + lease + RETRY_BOUND` of starting, never Running without a live lease holder for
longer than `lease + RETRY_BOUND`, each non-idempotent call executed at most once (exactly
once for a `Succeeded` Task), nothing lost.

    ORDO_FAULT_SEED=7 ORDO_FAULT_RATE=0.1 .venv/bin/python -m pytest tests/cluster/test_faults.py
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import time
from pathlib import Path

import httpx
import pytest
import yaml
from tests.support.faultproxy import FaultProxy
from tests.support.http_tool_server import HttpToolServer
from tests.support.operator import (
    InvariantMonitor,
    OperatorProcess,
    TaskTrack,
    apply,
    effect_manifests,
    effect_model,
    effect_tasks,
    write_report,
)

from ordo_devcluster import ControlPlane

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SEED = int(os.environ.get("ORDO_FAULT_SEED", "1"))
RATE = float(os.environ.get("ORDO_FAULT_RATE", "0.08"))
TASKS = 100
LEASE_SECONDS = 5.0
AGENT_TIMEOUT = 30.0
RETRY_BOUND = 30.0
"""How long the operator may take to get through a transient API failure (its bounded
retries and backoff): the allowance on top of the lease and the Task's own timeout."""
DEADLINE = 200.0


def test_exactly_once_under_api_faults(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    with (
        HttpToolServer() as tools,
        effect_model(delay=0.1) as model,
        FaultProxy(control_plane.kubeconfig, tmp_path / "proxy", seed=SEED, rate=RATE) as proxy,
    ):
        apply(
            control_plane,
            namespace,
            effect_manifests(model.url, tools.url, tool_delay=0.1, timeout=f"{AGENT_TIMEOUT:g}s"),
        )
        op = OperatorProcess(
            control_plane,
            namespace,
            tmp_path,
            "--lease-seconds",
            f"{LEASE_SECONDS:g}",
            "--max-concurrent-tasks",
            "20",
            kubeconfig=proxy.kubeconfig,
        ).start()
        monitor = InvariantMonitor(
            control_plane,
            namespace,
            lease_seconds=LEASE_SECONDS,
            orphan_bound=RETRY_BOUND,
        ).start()
        names = [f"t{i:03d}" for i in range(TASKS)]
        try:
            proxy.arm()
            apply(control_plane, namespace, effect_tasks(names))
            monitor.wait_all_terminal(TASKS, DEADLINE)
            # A last look: a Task that ended may still change phase (it must not).
            time.sleep(2 * monitor.interval)
            monitor.poll()
            operator_alive = op.alive
        finally:
            monitor.stop()
            proxy.disarm()
            op.stop()
        effects = tools.effects_snapshot()

    def run_bound(track: TaskTrack) -> float:
        return AGENT_TIMEOUT + LEASE_SECONDS + RETRY_BOUND

    broken = monitor.violations(names, effects, run_bound)
    if not operator_alive:
        broken.append(("operator", "the operator process exited during the test"))
    summary = {
        "test": "faults",
        **proxy.summary(),
        **monitor.summary(effects, names),
        "violations": len(broken),
        "brokenTasks": len({name for name, _ in broken}),
        "seconds": round(time.monotonic() - started, 1),
    }
    (tmp_path / "faults-injected.jsonl").write_text(proxy.fault_log())

    def faults_of(track: TaskTrack) -> list[str]:
        faults = sorted(
            proxy.faults_on(track.name) + proxy.faults_on(track.uid), key=lambda f: f.at
        )
        return [
            "faults on its requests: "
            + ", ".join(
                f"{f.kind} {f.method} {'/'.join(f.path.rsplit('/', 2)[-2:])}" for f in faults
            )
        ]

    failure = (
        monitor.explain(f"under API faults (seed {SEED})", broken, op, faults_of) if broken else ""
    )
    write_report(tmp_path, "faults", summary, monitor, failure, effects)
    if broken:
        pytest.fail(failure, pytrace=False)


def test_fault_proxy_is_deterministic_per_seed(control_plane: ControlPlane, tmp_path: Path) -> None:
    """The harness itself: the same seed gives the same faults for the same request sequence,
    every kind happens, and `reset-after` really applies the write whose answer it drops."""
    namespace = control_plane.create_namespace("proxy")

    def run(seed: int, directory: Path) -> tuple[list[str], set[str]]:
        outcomes: list[str] = []
        with FaultProxy(
            control_plane.kubeconfig, directory, seed=seed, rate=0.5, delay_range=(0.01, 0.02)
        ) as proxy:
            proxy.arm()
            ca = yaml_ca(proxy.kubeconfig)
            base = f"{proxy.url}/api/v1/namespaces/{namespace}/configmaps"
            with httpx.Client(verify=ca, timeout=10) as client:
                for i in range(60):
                    name = f"s{seed}-{directory.name}-{i}"
                    body = {"metadata": {"name": name}, "data": {"n": str(i)}}
                    try:
                        reply = client.post(base, json=body)
                        outcomes.append(str(reply.status_code))
                    except httpx.TransportError:
                        outcomes.append("reset")
            kinds = {f.kind for f in proxy.injected}
            applied_lost = [
                f.path.rsplit("/", 1)[1] for f in proxy.injected if f.kind == "reset-after"
            ]
        stored = {
            item["metadata"]["name"]
            for item in json.loads(
                control_plane.kubectl("get", "configmaps", "-n", namespace, "-o", "json").stdout
            )["items"]
        }
        for name in applied_lost:
            assert name in stored, f"reset-after on {name}: the write was not applied"
        return outcomes, kinds

    first, kinds = run(11, tmp_path / "a")
    second, _ = run(11, tmp_path / "b")
    other, _ = run(12, tmp_path / "c")
    assert first == second
    assert first != other
    assert kinds == {"http-409", "http-429", "http-500", "reset-before", "reset-after", "delay"}


def yaml_ca(kubeconfig: Path) -> ssl.SSLContext:
    """The client TLS context that trusts the proxy, from its kubeconfig."""
    config = yaml.safe_load(kubeconfig.read_text())
    pem = base64.b64decode(config["clusters"][0]["cluster"]["certificate-authority-data"])
    return ssl.create_default_context(cadata=pem.decode())
