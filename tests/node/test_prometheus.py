"""Prometheus for real: Debian's `prometheus` (scripts/prometheus-deps) scrapes the operator pod
of a Helm release on the single node, and the test reads ordo's metrics back through
Prometheus' HTTP API.

Debian builds Prometheus without Kubernetes service discovery (`kubernetes_sd_configs` is not
in its config schema), so the test does what that discovery would: it reads the EndpointSlices
of the chart's metrics Service (`<release>-metrics`, port `metrics`) and writes their addresses
into a `file_sd_configs` file, with the labels a ServiceMonitor gives its targets (`job` = the
Service's name, `namespace`, `pod`). The job keeps `honor_labels: true`, as the chart's
ServiceMonitor does, so ordo's own `namespace` label (the Task's namespace) wins. The host
reaches the pod's IP through the node's bridge.

Prometheus also loads the chart's alert rules (the PrometheusRule's groups, rendered by helm for
this release): they evaluate without errors, nothing fires while the operator is scraped, and
when the operator's pod goes away (Deployment scaled to 0, so the Service has no endpoint and
the target disappears) `OrdoOperatorDown` becomes pending.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.node.installing import (
    check_quickstart,
    diagnostics,
    get_json,
    helm_cmd,
    helm_install,
    import_operator_image,
    release_selector,
    the_ready_pod,
    wait_deployment_ready,
    wait_for,
    wait_no_pods,
)
from tests.support.operator import free_port
from tests.support.packaging import helm_template, in_ci, one

RELEASE = "ordo-prom"
SERVICE = f"{RELEASE}-metrics"


def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if not path:
        how = "run scripts/prometheus-deps (Debian's prometheus package)"
        if in_ci():
            pytest.fail(f"prometheus is required in CI: {how}", pytrace=False)
        pytest.skip(f"prometheus not available ({how})")
    return path


class Prometheus:
    """`prometheus` as a child process on loopback, its data and config in `directory`."""

    def __init__(self, directory: Path, job: str, rule_groups: list[dict[str, Any]]) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.job = job
        self.port = free_port()
        self.targets_file = self.dir / "targets.json"
        self.set_targets([])
        (self.dir / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups}))
        config = {
            "global": {
                "scrape_interval": "2s",
                "evaluation_interval": "2s",
                "scrape_timeout": "1s",
            },
            "rule_files": [str(self.dir / "rules.yaml")],
            "scrape_configs": [
                {
                    "job_name": job,
                    "honor_labels": True,
                    "file_sd_configs": [
                        {"files": [str(self.targets_file)], "refresh_interval": "1s"}
                    ],
                }
            ],
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = self.dir / "prometheus.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Prometheus:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    prometheus_binary(),
                    f"--config.file={self.dir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=info",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited:\n{self.logs()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_for(ready, 60, "prometheus to be ready", diagnose=self.logs)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def set_targets(self, groups: list[dict[str, Any]]) -> None:
        """Replace the file_sd targets (written aside, then renamed: never read half-written)."""
        tmp = self.targets_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        tmp.replace(self.targets_file)

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        data = self.api("query", query=promql)
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def active_targets(self) -> list[dict[str, Any]]:
        targets: list[dict[str, Any]] = self.api("targets", state="active")["activeTargets"]
        return [t for t in targets if t["labels"].get("job") == self.job]


def service_targets(cluster: Any, namespace: str, service: str) -> list[dict[str, Any]]:
    """The file_sd groups Kubernetes endpoints discovery would give for `service`'s port named
    `metrics`: ready endpoint addresses, with job/namespace/pod labels."""
    slices = get_json(
        cluster, "endpointslices", "-n", namespace, "-l", f"kubernetes.io/service-name={service}"
    )["items"]
    groups = []
    for s in slices:
        ports = [p["port"] for p in s.get("ports") or [] if p.get("name") == "metrics"]
        for endpoint in s.get("endpoints") or []:
            if not (endpoint.get("conditions") or {}).get("ready"):
                continue
            pod = (endpoint.get("targetRef") or {}).get("name", "")
            for port in ports:
                groups.append(
                    {
                        "targets": [f"{a}:{port}" for a in endpoint["addresses"]],
                        "labels": {"job": service, "namespace": namespace, "pod": pod},
                    }
                )
    return groups


@pytest.fixture
def release(node_cluster: Any, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A release `ordo-prom` watching one fresh Task namespace: (release namespace, Task
    namespace). Uninstalled afterwards."""
    prometheus_binary()
    import_operator_image(node_cluster)
    release_ns = node_cluster.create_namespace("ordo-prom")
    task_ns = node_cluster.create_namespace("prom-tasks")
    helm_install(tmp_path, node_cluster, RELEASE, release_ns, {"watchNamespaces": [task_ns]})
    try:
        yield release_ns, task_ns
    finally:
        helm_cmd(tmp_path, node_cluster, "uninstall", RELEASE, "-n", release_ns, "--wait")


def test_prometheus_scrapes_the_operator(
    node_cluster: Any, release: tuple[str, str], tmp_path: Path
) -> None:
    cluster = node_cluster
    release_ns, task_ns = release
    selector = release_selector(RELEASE)

    def diagnose() -> str:
        return diagnostics(cluster, release_ns, selector)

    wait_deployment_ready(cluster, release_ns, RELEASE, selector)
    pod = the_ready_pod(cluster, release_ns, selector)

    # The rules the chart's PrometheusRule carries for this release.
    docs = helm_template(
        tmp_path,
        release=RELEASE,
        namespace=release_ns,
        values={"prometheusRule": {"enabled": True}},
    )
    groups = one(docs, "PrometheusRule")["spec"]["groups"]
    prometheus = Prometheus(tmp_path / "prometheus", SERVICE, groups).start()
    try:
        targets = wait_for(
            lambda: service_targets(cluster, release_ns, SERVICE),
            60,
            f"a ready endpoint of Service {SERVICE}",
            diagnose=diagnose,
        )
        assert targets[0]["targets"] == [f"{pod['status']['podIP']}:8080"], targets
        prometheus.set_targets(targets)

        def up() -> bool:
            found = prometheus.active_targets()
            return len(found) == 1 and found[0]["health"] == "up"

        wait_for(
            up,
            60,
            "Prometheus to scrape the operator pod",
            diagnose=lambda: f"{prometheus.active_targets()}\n{prometheus.logs()}",
        )

        check_quickstart(cluster, task_ns, diagnose=diagnose)
        promql = f'ordo_tasks_total{{namespace="{task_ns}"}}'

        def scraped() -> list[dict[str, Any]]:
            return [
                r
                for r in prometheus.query(promql)
                if r["metric"].get("phase") == "Succeeded" and r["value"][1] == "1"
            ]

        (series,) = wait_for(
            scraped,
            60,
            f"{promql} == 1 in Prometheus",
            diagnose=lambda: str(prometheus.query(promql)),
        )
        labels = series["metric"]
        # honor_labels: the Task's namespace, not the target's (the release namespace).
        assert labels["namespace"] == task_ns, labels
        assert labels["agent"] == "research-agent", labels
        assert labels["job"] == SERVICE, labels
        assert labels["pod"] == pod["metadata"]["name"], labels
        (up_series,) = prometheus.query(f'up{{job="{SERVICE}"}}')
        assert up_series["value"][1] == "1"
        assert up_series["metric"]["namespace"] == release_ns

        # The chart's rules evaluate cleanly, and nothing fires while the operator is up.
        def evaluated() -> list[dict[str, Any]]:
            rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
            done = all(not r.get("lastEvaluation", "0001").startswith("0001") for r in rules)
            return rules if rules and done else []

        rules = wait_for(evaluated, 30, "the chart's rules to be evaluated")
        assert {r["name"] for r in rules} == {
            "OrdoTaskFailureRatioHigh",
            "OrdoModelErrorRatioHigh",
            "OrdoTasksPendingTooLong",
            "OrdoCheckpointUntrusted",
            "OrdoOperatorDown",
        }
        assert all(r["health"] == "ok" for r in rules), rules
        assert prometheus.api("alerts")["alerts"] == []

        # The operator goes away: no endpoint, no target, `up` goes stale. OrdoOperatorDown
        # must notice (pending; it fires after 5 minutes).
        cluster.kubectl("scale", "deployment", RELEASE, "-n", release_ns, "--replicas=0")
        wait_no_pods(cluster, release_ns, selector)
        wait_for(
            lambda: not service_targets(cluster, release_ns, SERVICE),
            60,
            "the Service to lose its endpoint",
        )
        prometheus.set_targets(service_targets(cluster, release_ns, SERVICE))

        def down_alert() -> list[dict[str, Any]]:
            return [
                a
                for a in prometheus.api("alerts")["alerts"]
                if a["labels"]["alertname"] == "OrdoOperatorDown"
            ]

        (alert,) = wait_for(
            down_alert,
            60,
            "OrdoOperatorDown to become pending",
            diagnose=lambda: str(prometheus.api("alerts")),
        )
        assert alert["state"] == "pending", alert
        assert alert["labels"]["namespace"] == release_ns
        assert alert["labels"]["severity"] == "critical"
    finally:
        prometheus.stop()
