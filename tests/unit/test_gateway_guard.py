"""The gateway's cheap guards and its metrics, against a fake API server (httpx transport):
a per-address limit answers 429 before any TokenReview, successful TokenReviews are reused
for a short time under the token's hash (never past the token's expiry), and requests,
rejections and created Tasks are counted with bounded labels only."""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from tests.support.fakeapi import mock_kube, tasks_answer
from tests.support.operator import free_port

from ordo.gateway.app import Gateway, GatewayConfig
from ordo.gateway.metrics import GatewayMetrics
from ordo.gateway.tokencache import TokenCache, token_expiry

GOOD = "good-token"
AGENT = {
    "apiVersion": "ordo.dev/v1alpha1",
    "kind": "Agent",
    "metadata": {"name": "helper", "namespace": "ns"},
    "spec": {"modelRef": "m", "a2a": {"enabled": True}},
}


class Api:
    """Answers TokenReviews (only GOOD authenticates), SubjectAccessReviews (allowed), the
    served Agent and Tasks (created once, then 409)."""

    def __init__(self) -> None:
        self.token_reviews = 0
        self.tasks: dict[str, dict[str, Any]] = {}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/tokenreviews"):
            self.token_reviews += 1
            ok = json.loads(request.content)["spec"]["token"] == GOOD
            user = {"username": "system:serviceaccount:ns:caller", "uid": "u1"}
            status = {"authenticated": ok, "user": user if ok else {}, "audiences": ["gw"]}
            return httpx.Response(201, json={"status": status})
        if path.endswith("/subjectaccessreviews"):
            return httpx.Response(201, json={"status": {"allowed": True}})
        if path.endswith("/agents/helper"):
            return httpx.Response(200, json=AGENT)
        return tasks_answer(self.tasks, request)


def gateway(api: Api, **config: Any) -> Gateway:
    kube = mock_kube(api)
    settings = GatewayConfig(namespaces=("ns",), audiences=("gw",), **config)
    return Gateway(kube, settings, GatewayMetrics(CollectorRegistry()))


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


SEND = rpc(
    "SendMessage",
    {
        "message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
        "configuration": {"returnImmediately": True},
    },
)


def sample(gw: Gateway, name: str, **labels: str) -> float:
    value = gw.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


async def post(gw: Gateway, body: dict[str, Any], token: str, address: str = "10.0.0.1") -> int:
    transport = httpx.ASGITransport(app=gw.app(), client=(address, 4000))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        response = await http.post(
            "/a2a/ns/helper",
            json=body,
            headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"},
        )
    return response.status_code


async def test_an_unauthenticated_flood_is_refused_per_address_before_any_token_review() -> None:
    api = Api()
    gw = gateway(api, client_rate=0.001, client_burst=3, token_cache_ttl=0)
    codes = [await post(gw, SEND, "bad") for _ in range(6)]
    assert codes == [401, 401, 401, 429, 429, 429]
    assert api.token_reviews == 3  # the refused three cost the API server nothing
    # Another address has its own bucket.
    assert await post(gw, SEND, "bad", address="10.0.0.2") == 401
    assert sample(gw, "ordo_gateway_rejections_total", kind="clientRateLimited") == 3
    assert sample(gw, "ordo_gateway_rejections_total", kind="unauthenticated") == 4
    assert sample(gw, "ordo_gateway_requests_total", method="unknown", code="429") == 3
    assert sample(gw, "ordo_gateway_requests_total", method="unknown", code="401") == 4


async def test_a_successful_review_is_reused_and_only_created_tasks_are_counted() -> None:
    api = Api()
    gw = gateway(api, token_cache_ttl=30)
    assert [await post(gw, SEND, GOOD) for _ in range(3)] == [200, 200, 200]
    assert api.token_reviews == 1
    assert len(api.tasks) == 1  # the retried sends found the Task
    created = sample(gw, "ordo_gateway_tasks_created_total", namespace="ns", agent="helper")
    assert created == 1
    assert sample(gw, "ordo_gateway_requests_total", method="SendMessage", code="200") == 3
    # Failed reviews are not cached: each bad token is reviewed.
    assert [await post(gw, SEND, "bad") for _ in range(2)] == [401, 401]
    assert api.token_reviews == 3


async def test_without_the_cache_every_request_is_reviewed_and_other_methods_are_other() -> None:
    api = Api()
    gw = gateway(api, token_cache_ttl=0)
    assert await post(gw, rpc("GetTask", {"id": "nope"}), GOOD) == 200
    assert await post(gw, rpc("Invented", {}), GOOD) == 200
    assert api.token_reviews == 2
    assert sample(gw, "ordo_gateway_requests_total", method="GetTask", code="200") == 1
    assert sample(gw, "ordo_gateway_requests_total", method="other", code="200") == 1


async def test_the_per_caller_limit_counts_as_rate_limited() -> None:
    api = Api()
    gw = gateway(api, rate=0.001, burst=1)
    assert [await post(gw, SEND, GOOD) for _ in range(2)] == [200, 429]
    assert sample(gw, "ordo_gateway_rejections_total", kind="rateLimited") == 1


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def jwt(claims: dict[str, Any]) -> str:
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJSUzI1NiJ9.{payload}.c2ln"


def test_cache_entries_live_ttl_seconds_and_never_past_the_tokens_expiry() -> None:
    clock = Clock()
    cache: TokenCache[str] = TokenCache(30, clock=clock)
    cache.put("opaque", "a")
    cache.put(jwt({"exp": 1010}), "b")
    cache.put(jwt({"exp": 999}), "expired")
    clock.now = 1009
    assert cache.get("opaque") == "a" and cache.get(jwt({"exp": 1010})) == "b"
    assert cache.get(jwt({"exp": 999})) is None
    clock.now = 1010
    assert cache.get(jwt({"exp": 1010})) is None
    clock.now = 1030
    assert cache.get("opaque") is None


def test_cache_is_bounded_and_keeps_no_token() -> None:
    cache: TokenCache[str] = TokenCache(30, max_entries=2)
    for token in ("t1", "t2", "t3"):
        cache.put(token, token.upper())
    assert cache.get("t1") is None and cache.get("t3") == "T3"
    assert "t3" not in repr(vars(cache))


@pytest.mark.parametrize("ttl", [-1, 61])
def test_cache_ttl_is_bounded(ttl: float) -> None:
    with pytest.raises(ValueError, match="0-60 seconds"):
        TokenCache(ttl)


def test_token_expiry_reads_only_a_jwt_exp() -> None:
    assert token_expiry(jwt({"exp": 1234})) == 1234
    assert token_expiry(jwt({"sub": "x"})) is None
    assert token_expiry(jwt({"exp": True})) is None
    assert token_expiry("not.a-jwt.!!") is None
    assert token_expiry("opaque") is None


def test_metrics_are_served_on_their_port() -> None:
    metrics = GatewayMetrics(CollectorRegistry())
    metrics.requests.labels(method="agentCard", code="200").inc()
    port = free_port()
    metrics.serve("127.0.0.1", port)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    assert 'ordo_gateway_requests_total{code="200",method="agentCard"} 1.0' in text
    assert 'ordo_gateway_rejections_total{kind="clientRateLimited"} 0.0' in text
