"""The chart's `gateway.enabled` (templates/gateway.yaml): nothing without it; with it, a
Deployment running `ordo gateway` with flags its parser accepts, its own ServiceAccount and
pods no operator selector matches, a Service, probes, a metrics port with its own Service
(and a ServiceMonitor with serviceMonitor.enabled), and least-privilege RBAC (reviews
cluster-wide; Agents read and Tasks written only where the operator watches); the requester
admission policy lets the gateway's ServiceAccount name the A2A caller. Runs helm
(scripts/build-helm): fails in CI, skipped elsewhere without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.support.packaging import container, expand_rules, helm_template, of_kind

from ordo.cli.main import build_parser

pytestmark = pytest.mark.services

GATEWAY = "ordo-gateway"


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def test_no_gateway_by_default(tmp_path: Path) -> None:
    docs = helm_template(tmp_path)
    assert not [d for d in docs if "gateway" in d["metadata"]["name"]]
    policy = named(docs, "ValidatingAdmissionPolicy", "ordo-task-requester")
    gateway = [v for v in policy["spec"]["variables"] if v["name"] == "gateway"]
    assert gateway[0]["expression"].strip() == "false"


def test_gateway_objects(tmp_path: Path) -> None:
    values = {"gateway": {"enabled": True, "publicUrl": "https://a2a.example.com"}}
    docs = helm_template(tmp_path, values=values)
    deployment = named(docs, "Deployment", GATEWAY)
    pod = deployment["spec"]["template"]
    assert pod["spec"]["serviceAccountName"] == GATEWAY
    box = container(deployment)
    assert box["command"] == ["/opt/ordo/bin/ordo", "gateway"]
    args = build_parser().parse_args(["gateway", *box["args"]])
    assert args.audience == ["ordo-gateway"] and args.namespace == []
    assert args.public_url == "https://a2a.example.com"
    assert box["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "a2a"}
    # The operator's Deployment and metrics Service never select the gateway's pods.
    labels = pod["metadata"]["labels"]
    for kind in ("Deployment", "Service"):
        for other in of_kind(docs, kind):
            if other["metadata"]["name"] in (GATEWAY, f"{GATEWAY}-metrics"):
                continue
            spec = other["spec"]
            selector = spec["selector"].get("matchLabels", spec["selector"])
            assert not all(labels.get(k) == v for k, v in selector.items()), other["metadata"]
    service = named(docs, "Service", GATEWAY)
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert named(docs, "ServiceAccount", GATEWAY)
    reviews = named(docs, "ClusterRole", f"{GATEWAY}-reviews")
    assert expand_rules(reviews["rules"]) == {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }
    tasks = named(docs, "ClusterRole", GATEWAY)
    assert expand_rules(tasks["rules"]) == {
        *(("ordo.dev", "agents", v) for v in ("get", "list", "watch")),
        *(("ordo.dev", "tasks", v) for v in ("create", "get", "list", "watch", "patch")),
        # TaskWebhook deliveries: by name only (no list, no watch of Secrets).
        ("ordo.dev", "taskwebhooks", "get"),
        ("ordo.dev", "taskwebhooks/status", "patch"),
        ("", "secrets", "get"),
        ("", "events", "create"),
    }
    binding = named(docs, "ClusterRoleBinding", GATEWAY)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": GATEWAY, "namespace": "ordo-system"}
    ]
    policy = named(docs, "ValidatingAdmissionPolicy", "ordo-task-requester")
    gateway = [v for v in policy["spec"]["variables"] if v["name"] == "gateway"]
    assert "system:serviceaccount:ordo-system:ordo-gateway" in gateway[0]["expression"]
    # A TaskWebhook's requested-by is its creator's, as a Task's (the gateway copies it).
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {"tasks", "taskwebhooks"} <= set(rule["resources"])


def test_gateway_serves_the_watched_namespaces_only(tmp_path: Path) -> None:
    values = {"gateway": {"enabled": True}, "watchNamespaces": ["team-a", "team-b"]}
    docs = helm_template(tmp_path, values=values)
    args = build_parser().parse_args(
        ["gateway", *container(named(docs, "Deployment", GATEWAY))["args"]]
    )
    assert args.namespace == ["team-a", "team-b"]
    bindings = [d for d in of_kind(docs, "RoleBinding") if d["metadata"]["name"] == GATEWAY]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert not [d for d in of_kind(docs, "ClusterRoleBinding") if d["metadata"]["name"] == GATEWAY]


def test_gateway_traces_go_where_the_operators_go(tmp_path: Path) -> None:
    values = {
        "gateway": {"enabled": True, "env": [{"name": "NO_PROXY", "value": ".svc"}]},
        "tracing": {"otlpEndpoint": "http://otel:4318"},
    }
    deployment = named(helm_template(tmp_path, values=values), "Deployment", GATEWAY)
    env = {e["name"]: e.get("value") for e in container(deployment)["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel:4318"
    assert env["OTEL_SERVICE_NAME"] == "ordo-gateway"
    assert env["NO_PROXY"] == ".svc"  # gateway.env
    plain = named(
        helm_template(tmp_path, values={"gateway": {"enabled": True}}), "Deployment", GATEWAY
    )
    assert not [e for e in container(plain)["env"] if e["name"].startswith("OTEL_")]


def test_gateway_metrics_port_service_and_monitor(tmp_path: Path) -> None:
    values = {
        "gateway": {"enabled": True, "metrics": {"annotations": {"prometheus.io/scrape": "true"}}}
    }
    docs = helm_template(tmp_path, values=values)
    deployment = named(docs, "Deployment", GATEWAY)
    box = container(deployment)
    args = build_parser().parse_args(["gateway", *box["args"]])
    assert args.metrics_port == 9090
    assert (args.client_rate_limit, args.client_rate_burst, args.token_cache_ttl) == (20, 50, 30)
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in box["ports"]
    service = named(docs, "Service", f"{GATEWAY}-metrics")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert service["metadata"]["annotations"] == {"prometheus.io/scrape": "true"}
    # The A2A Service callers reach does not expose /metrics.
    assert [p["name"] for p in named(docs, "Service", GATEWAY)["spec"]["ports"]] == ["a2a"]
    assert not [d for d in of_kind(docs, "ServiceMonitor") if "gateway" in d["metadata"]["name"]]

    monitored = {**values, "serviceMonitor": {"enabled": True}}
    monitor = named(helm_template(tmp_path, values=monitored), "ServiceMonitor", GATEWAY)
    assert monitor["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"


def test_gateway_metrics_off(tmp_path: Path) -> None:
    values = {"gateway": {"enabled": True, "metrics": {"port": 0}}}
    docs = helm_template(tmp_path, values=values)
    box = container(named(docs, "Deployment", GATEWAY))
    assert build_parser().parse_args(["gateway", *box["args"]]).metrics_port == 0
    assert [p["name"] for p in box["ports"]] == ["a2a"]
    assert not [
        d
        for d in of_kind(docs, "Service")
        if d["metadata"]["name"].endswith("-metrics") and "gateway" in d["metadata"]["name"]
    ]
