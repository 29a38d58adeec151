"""Credentials go only where their owner allows (issue 26, credentials.py), through the
operator as a subprocess against a real API server: recording servers see no request at all,
let alone the canary, from a model call, an http Tool call or an mcp readiness probe when
the Secret is not labelled `ordo.dev/credential: "true"` or its `ordo.dev/allowed-hosts`
names another host; the Task and the object carry the reason; the canary is in no Event,
condition or log line. Under `--credential-policy Warn` the same objects work, with a
Warning Event, the metric and a Ready message."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest
from tests.support.counting_tool import CountingTool
from tests.support.mcp_server import McpTestServer
from tests.support.openai_server import OpenAIServer
from tests.support.operator import (
    OperatorProcess,
    apply,
    doc,
    events,
    get_json,
    ready_condition,
    wait_for,
    wait_task,
)

from ordo_devcluster import ControlPlane

pytestmark = pytest.mark.cluster

CANARY = "sk-canary-CRED-77e1"


def secret(name: str, *, labelled: bool = True, hosts: str | None = None) -> str:
    meta: dict[str, Any] = {"name": name}
    if labelled:
        meta["labels"] = {"ordo.dev/credential": "true"}
    if hosts is not None:
        meta["annotations"] = {"ordo.dev/allowed-hosts": hosts}
    value = base64.b64encode(f"{CANARY}-{name}".encode()).decode()
    return json.dumps(
        {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": {"k": value}}
    )


def model_objects(name: str, base_url: str, secret_name: str, tools: list[str]) -> list[str]:
    return [
        doc(
            "ModelEndpoint",
            name,
            {
                "provider": "openai-compatible",
                "baseUrl": base_url + "/v1",
                "model": "gpt-test",
                "credentials": {"secretRef": {"name": secret_name, "key": "k"}},
            },
        ),
        doc("Agent", name, {"modelRef": name, "tools": tools, "limits": {"maxSteps": 3}}),
        doc("Task", name, {"agentRef": name, "input": "order one widget"}),
    ]


def http_tool(name: str, url: str, secret_name: str) -> str:
    http = {"url": url, "secretRef": {"name": secret_name, "key": "k"}}
    return doc("Tool", name, {"type": "http", "description": "orders", "http": http})


def mcp_tool(name: str, url: str, secret_name: str) -> str:
    mcp = {"url": url, "toolName": "echo", "secretRef": {"name": secret_name, "key": "k"}}
    return doc("Tool", name, {"type": "mcp", "description": "echoes", "mcp": mcp})


def ready(cp: ControlPlane, ns: str, kind: str, name: str, status: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        c = ready_condition(cp, ns, kind, name)
        return c if c and c["status"] == status else None

    found: dict[str, Any] = wait_for(check, 40, what=f"{kind}/{name} Ready={status}")
    return found


def assert_no_canary(cp: ControlPlane, ns: str, op: OperatorProcess) -> None:
    for kind in ("tasks", "tools", "modelendpoints", "agents"):
        assert CANARY not in json.dumps(get_json(cp, kind, "-n", ns))
    assert CANARY not in json.dumps(events(cp, ns))
    assert CANARY not in op.logs()


def test_enforce_sends_no_credential_its_secret_does_not_allow(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    cp, ns = control_plane, namespace
    with (
        OpenAIServer() as model,
        CountingTool() as tool,
        McpTestServer() as mcp,
    ):
        loopback = f"127.0.0.1:{model.port}"
        docs = [
            secret("unlabelled", labelled=False),
            secret("elsewhere", hosts="api.example.com, *.example.com"),
            secret("model-ok", hosts=loopback),
            *model_objects("plain", model.url, "unlabelled", []),
            *model_objects("other-host", model.url, "elsewhere", []),
            http_tool("order", tool.url, "elsewhere"),
            *model_objects("tool-user", model.url, "model-ok", ["order"]),
            mcp_tool("mcp-unlabelled", mcp.url, "unlabelled"),
            mcp_tool("mcp-elsewhere", mcp.url, "elsewhere"),
        ]
        for manifest in docs:
            apply(cp, ns, manifest)

        plain = wait_task(cp, ns, "plain")["status"]
        assert (plain["phase"], plain["reason"]) == ("Failed", "SecretNotFound")
        assert "not labelled ordo.dev/credential=true" in plain["message"]
        other = wait_task(cp, ns, "other-host")["status"]
        assert (other["phase"], other["reason"]) == ("Failed", "CredentialNotAllowed")
        assert loopback in other["message"] and "api.example.com" not in other["message"]
        user = wait_task(cp, ns, "tool-user")["status"]
        assert (user["phase"], user["reason"]) == ("Failed", "CredentialNotAllowed")
        assert "Tool 'order'" in user["message"]

        # The referring objects say the same, and an unlabelled Secret reads as a missing one.
        unlabelled = ready(cp, ns, "tool", "mcp-unlabelled", "False")
        assert unlabelled["reason"] == "SecretNotFound"
        assert unlabelled["message"] == (
            "Secret 'unlabelled' not found or is not labelled ordo.dev/credential=true"
        )
        elsewhere = ready(cp, ns, "tool", "mcp-elsewhere", "False")
        assert elsewhere["reason"] == "CredentialNotAllowed"
        endpoint = ready(cp, ns, "modelendpoint", "other-host", "False")
        assert endpoint["reason"] == "CredentialNotAllowed"

        # Nothing reached any server: no model call, no tool call, no MCP request at all.
        assert model.count == 0 and tool.count == 0
        assert mcp.auth_headers == [] and mcp.hosts == []

        # The control: a Secret that allows the MCP server's host is sent there by the probe.
        apply(cp, ns, secret("mcp-ok", hosts=f"127.0.0.1:{mcp.port}"))
        apply(cp, ns, mcp_tool("mcp-allowed", mcp.url, "mcp-ok"))
        assert ready(cp, ns, "tool", "mcp-allowed", "True")["reason"] == "Listed"
        assert f"Bearer {CANARY}-mcp-ok" in mcp.auth_headers
        assert mcp.auth_headers == [f"Bearer {CANARY}-mcp-ok"] * len(mcp.auth_headers)
    assert_no_canary(cp, ns, operator)


def test_warn_sends_and_says_so(
    control_plane: ControlPlane,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
) -> None:
    cp, ns = control_plane, namespace
    op = operator_factory("--credential-policy", "Warn")
    with OpenAIServer([{"text": "done"}]) as model:
        apply(cp, ns, secret("unlabelled", labelled=False))
        for manifest in model_objects("plain", model.url, "unlabelled", []):
            apply(cp, ns, manifest)
        status = wait_task(cp, ns, "plain")["status"]
        assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded"), status
        assert model.requests[0].headers["authorization"] == f"Bearer {CANARY}-unlabelled"
        warned = [e for e in events(cp, ns, "plain") if e["reason"] == "CredentialNotAllowed"]
        assert warned and warned[0]["type"] == "Warning"
        assert "Secret 'unlabelled' is not labelled" in warned[0]["message"]
        endpoint = ready(cp, ns, "modelendpoint", "plain", "True")
        assert "WARNING (enforced by default)" in endpoint["message"]
        assert 'ordo_credential_violations_total{kind="unlabelled"} 1.0' in op.metrics()
    assert_no_canary(cp, ns, op)
