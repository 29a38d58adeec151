"""`helm install` with `gateway.enabled=true` on the real single node (the image
scripts/build-image built): the gateway's pod runs to Ready through its probes, and an
opted-in Agent's card is fetched through the gateway's Service (the API server's Service
proxy: the node has no kube-proxy, so a Service IP does not route from the host, but the
proxy goes through the Service's endpoints); an Agent that did not opt in is 404 there, and
the card fetch is counted on the gateway's metrics Service. The gateway pod reaches the API
server through `gateway.env` (as the operator does through `env`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from a2a.types.a2a_pb2 import AgentCard
from google.protobuf import json_format
from tests.node.installing import (
    IMAGE,
    apiserver_env,
    apply_docs,
    diagnostics,
    helm_cmd,
    helm_install,
    import_operator_image,
    the_ready_pod,
    wait_deployment_ready,
)

RELEASE = "ordo-a2a"
GATEWAY = f"{RELEASE}-gateway"


def agent(name: str, a2a: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"modelRef": "model"}
    if a2a is not None:
        spec["a2a"] = a2a
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Agent",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_the_chart_runs_the_gateway_and_serves_a_card_through_its_service(
    node_cluster: Any, tmp_path: Path
) -> None:
    cluster = node_cluster
    import_operator_image(cluster)
    release_ns = cluster.create_namespace("ordo-a2a")
    agents_ns = cluster.create_namespace("a2a-agents")
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/name=ordo-gateway"

    def diagnose() -> str:
        return diagnostics(cluster, release_ns, selector)

    values = {
        "watchNamespaces": [agents_ns],
        "gateway": {"enabled": True, "env": apiserver_env(cluster)},
    }
    helm_install(tmp_path, cluster, RELEASE, release_ns, values)
    try:
        wait_deployment_ready(cluster, release_ns, GATEWAY, selector)
        pod = the_ready_pod(cluster, release_ns, selector)
        (container,) = pod["spec"]["containers"]
        assert container["image"] == IMAGE
        assert container["command"] == ["/opt/ordo/bin/ordo", "gateway"]
        assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
        assert pod["spec"]["serviceAccountName"] == GATEWAY

        a2a = {
            "enabled": True,
            "description": "Answers questions.",
            "skills": [{"name": "answer", "description": "answers", "tags": ["qa"]}],
        }
        apply_docs(cluster, agents_ns, [agent("helper", a2a), agent("hidden", None)])
        proxy = f"/api/v1/namespaces/{release_ns}/services"
        card_path = (
            f"{proxy}/{GATEWAY}:a2a/proxy/a2a/{agents_ns}/helper/.well-known/agent-card.json"
        )
        raw = cluster.kubectl("get", "--raw", card_path, check=False)
        assert raw.returncode == 0, f"{raw.stderr}\n{diagnose()}"
        card = json_format.ParseDict(
            json.loads(raw.stdout), AgentCard(), ignore_unknown_fields=True
        )
        assert card.name == "helper" and card.description == "Answers questions."
        assert [s.id for s in card.skills] == ["answer"]
        assert "kubernetes" in card.security_schemes
        hidden = f"{proxy}/{GATEWAY}:a2a/proxy/a2a/{agents_ns}/hidden/.well-known/agent-card.json"
        refused = cluster.kubectl("get", "--raw", hidden, check=False)
        assert refused.returncode != 0, refused.stdout  # the 404 is counted below

        metrics = cluster.kubectl(
            "get", "--raw", f"{proxy}/{GATEWAY}-metrics:metrics/proxy/metrics"
        ).stdout
        assert 'ordo_gateway_requests_total{code="200",method="agentCard"} 1.0' in metrics
        assert 'ordo_gateway_requests_total{code="404",method="agentCard"} 1.0' in metrics
        # Still the same pod, never restarted (liveness on /healthz).
        assert (
            the_ready_pod(cluster, release_ns, selector)["metadata"]["uid"]
            == pod["metadata"]["uid"]
        )
    finally:
        helm_cmd(tmp_path, cluster, "uninstall", RELEASE, "-n", release_ns, "--wait")
