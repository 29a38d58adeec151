"""`ordo gateway` against the real control plane, with the operator and the gateway as
subprocesses and the official a2a-sdk client (not ordo's code) as the caller: the card, a
streamed send with a ServiceAccount token to the answer, an identical retried send that
creates no second Task, the requester set by the gateway, refusals (no token 401, no `create
tasks` 403 and no Task, an Agent that did not opt in 404), an approval-gated Tool shown as
INPUT_REQUIRED, and cancel; ListTasks limited to the served Agent and refused without `list
tasks`, SubscribeToTask on a running Task to its end, the 0.3 method names through the SDK's
compat transport, and the gateway's /metrics."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import A2AError
from tests.support.gatewayproc import AUDIENCE, GatewayProcess, install_chart_gateway
from tests.support.operator import OperatorProcess, apply, doc, tasks, wait_for

from ordo_devcluster import ControlPlane

ANSWER = "The gateway answer"


def role(name: str, verbs: list[str], account: str) -> str:
    """A Role on Tasks with `verbs`, bound to ServiceAccount `account`."""
    rule = {"apiGroups": ["ordo.dev"], "resources": ["tasks"], "verbs": verbs}
    bound = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account}],
    }
    rbac = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role"}
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "List",
            "items": [{**rbac, "metadata": {"name": name}, "rules": [rule]}, bound],
        }
    )


@pytest.fixture
def gateway(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[GatewayProcess]:
    process = GatewayProcess(control_plane, namespace, tmp_path)
    yield process
    process.stop()


def setup(cp: ControlPlane, ns: str) -> None:
    apply(cp, ns, role("a2a-caller", ["create", "get", "list", "watch", "patch"], "caller"))
    apply(cp, ns, role("a2a-reader", ["get", "list"], "reader"))
    for account in ("caller", "reader"):
        cp.kubectl("create", "serviceaccount", account, "-n", ns)
    turns = [{"toolCalls": [{"tool": "lookup", "arguments": {"q": "x"}}]}, {"text": ANSWER}]
    approval_turns = [{"toolCalls": [{"tool": "deploy", "arguments": {"target": "prod"}}]}]
    for manifest in (
        doc("ModelEndpoint", "model", {"provider": "mock", "model": "m", "mock": {"turns": turns}}),
        doc(
            "ModelEndpoint",
            "approval-model",
            {"provider": "mock", "model": "m", "mock": {"turns": approval_turns}},
        ),
        doc(
            "Tool",
            "lookup",
            {"type": "mock", "description": "looks up", "mock": {"result": "found"}},
        ),
        doc(
            "Tool",
            "deploy",
            {
                "type": "mock",
                "description": "deploys",
                "mock": {"result": "ok"},
                "approval": {"required": True, "timeout": "1h"},
            },
        ),
        doc(
            "Agent",
            "helper",
            {
                "modelRef": "model",
                "tools": ["lookup"],
                "a2a": {
                    "enabled": True,
                    "description": "Answers questions.",
                    "skills": [{"name": "answer", "description": "answers", "tags": ["qa"]}],
                },
            },
        ),
        doc(
            "Agent",
            "deployer",
            {"modelRef": "approval-model", "tools": ["deploy"], "a2a": {"enabled": True}},
        ),
        doc("Agent", "hidden", {"modelRef": "model"}),
    ):
        apply(cp, ns, manifest)


def token(cp: ControlPlane, ns: str, account: str) -> str:
    result = cp.kubectl("create", "token", account, "-n", ns, "--audience", AUDIENCE)
    return result.stdout.strip()


def message(text: str, message_id: str) -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(message_id=message_id, role=Role.ROLE_USER, parts=[Part(text=text)])
    )


async def client_for(gw: GatewayProcess, ns: str, agent: str, bearer: str, **config: Any) -> Any:
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {bearer}"}, timeout=60)
    card = await A2ACardResolver(http, f"{gw.url}/a2a/{ns}/{agent}").get_agent_card()
    return await create_client(card, ClientConfig(httpx_client=http, **config)), card


def test_card_stream_answer_and_retried_send(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess, gateway: GatewayProcess
) -> None:
    cp, ns = control_plane, namespace
    setup(cp, ns)
    bearer = token(cp, ns, "caller")

    async def scenario() -> tuple[Any, list[Any], Any]:
        client, card = await client_for(gateway, ns, "helper", bearer)
        events = [e async for e in client.send_message(message("what?", "msg-1"))]
        again = [e async for e in client.send_message(message("what?", "msg-1"))]
        await client.close()
        return card, events, again

    card, events, again = asyncio.run(scenario())
    assert card.name == "helper" and card.description == "Answers questions."
    assert [s.id for s in card.skills] == ["answer"]
    assert card.capabilities.streaming and not card.capabilities.push_notifications
    assert "kubernetes" in card.security_schemes
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task"
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert TaskState.TASK_STATE_WORKING in states
    assert states[-1] == TaskState.TASK_STATE_COMPLETED, events[-1]
    artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert [p.text for a in artifacts for p in a.parts] == [ANSWER]
    # The retried send finds the same (finished) Task: one Task, no second run.
    assert again[0].task.id == events[0].task.id
    assert again[0].task.status.state == TaskState.TASK_STATE_COMPLETED
    items = tasks(cp, ns)
    assert [t["metadata"]["name"] for t in items] == [events[0].task.id]
    annotations = items[0]["metadata"]["annotations"]
    assert annotations["ordo.dev/requested-by"] == f"system:serviceaccount:{ns}:caller"


def test_list_subscribe_compat_names_and_metrics(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess, gateway: GatewayProcess
) -> None:
    cp, ns = control_plane, namespace
    setup(cp, ns)
    apply(cp, ns, role("a2a-sender", ["create"], "sender"))
    cp.kubectl("create", "serviceaccount", "sender", "-n", ns)
    slow = [{"text": ANSWER, "delay": "10s"}]  # long enough to subscribe while it runs
    apply(
        cp,
        ns,
        doc(
            "ModelEndpoint",
            "slow-model",
            {"provider": "mock", "model": "m", "mock": {"turns": slow}},
        ),
    )
    apply(cp, ns, doc("Agent", "slow", {"modelRef": "slow-model", "a2a": {"enabled": True}}))
    bearer = token(cp, ns, "caller")

    async def send(agent: str, message_id: str) -> str:
        client, _ = await client_for(gateway, ns, agent, bearer, polling=True, streaming=False)
        events = [e async for e in client.send_message(message("go", message_id))]
        await client.close()
        return str(events[0].task.id)

    async def get(agent: str, name: str) -> Any:
        client, _ = await client_for(gateway, ns, agent, bearer)
        task = await client.get_task(GetTaskRequest(id=name))
        await client.close()
        return task

    running = asyncio.run(send("slow", "slow-1"))
    wait_for(
        lambda: (
            cp.kubectl("get", "task", running, "-n", ns, "-o", "jsonpath={.status.phase}").stdout
            == "Running"
        ),
        what="the slow Task to run",
    )

    async def resubscribe() -> list[Any]:
        client, _ = await client_for(gateway, ns, "slow", bearer)
        events = [e async for e in client.subscribe(SubscribeToTaskRequest(id=running))]
        await client.close()
        return events

    events = asyncio.run(resubscribe())
    assert events[0].task.id == running
    assert events[0].task.status.state == TaskState.TASK_STATE_WORKING
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states[-1] == TaskState.TASK_STATE_COMPLETED, events[-1]
    artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert [p.text for a in artifacts for p in a.parts] == [ANSWER]

    # ListTasks lists the served Agent's Tasks only (not another Agent's, not one made
    # without the gateway), for a caller with `list tasks`.
    other = asyncio.run(send("helper", "helper-1"))
    apply(cp, ns, doc("Task", "direct", {"agentRef": "slow"}))

    async def listed(agent: str, account: str) -> list[str]:
        client, _ = await client_for(gateway, ns, agent, token(cp, ns, account))
        try:
            page = await client.list_tasks(ListTasksRequest())
        finally:
            await client.close()
        return [t.id for t in page.tasks]

    assert asyncio.run(listed("slow", "reader")) == [running]
    assert asyncio.run(listed("helper", "caller")) == [other]
    with pytest.raises(A2AError):  # a 403 without `list tasks`
        asyncio.run(listed("slow", "sender"))

    # The 0.3 names (message/send, tasks/get) through the SDK's own 0.3 transport.
    async def legacy() -> tuple[Any, Any]:
        async with httpx.AsyncClient(
            headers={"Authorization": f"Bearer {bearer}"}, timeout=60
        ) as http:
            url = f"{gateway.url}/a2a/{ns}/helper"
            transport = CompatJsonRpcTransport(http, None, url)
            sent = await transport.send_message(message("old", "legacy-1"))
            got = await transport.get_task(GetTaskRequest(id=sent.task.id))
        return sent, got

    sent, got = asyncio.run(legacy())
    assert sent.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert got.id == sent.task.id and got.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in got.artifacts for p in a.parts] == [ANSWER]
    assert len(tasks(cp, ns)) == 4  # slow-1, helper-1, direct, legacy-1

    assert gateway.metric(f'ordo_gateway_tasks_created_total{{agent="slow",namespace="{ns}"}}') == 1
    assert (
        gateway.metric(f'ordo_gateway_tasks_created_total{{agent="helper",namespace="{ns}"}}') == 2
    )
    assert gateway.metric('ordo_gateway_requests_total{code="200",method="SubscribeToTask"}') == 1
    assert gateway.metric('ordo_gateway_requests_total{code="200",method="message/send"}') == 1
    assert gateway.metric('ordo_gateway_requests_total{code="200",method="tasks/get"}') == 1
    assert gateway.metric('ordo_gateway_requests_total{code="403",method="ListTasks"}') == 1
    assert gateway.metric('ordo_gateway_rejections_total{kind="forbidden"}') == 1


def test_refusals(control_plane: ControlPlane, namespace: str, gateway: GatewayProcess) -> None:
    cp, ns = control_plane, namespace
    setup(cp, ns)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
    }
    headers = {"A2A-Version": "1.0"}
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        assert http.post(f"/a2a/{ns}/helper", json=body, headers=headers).status_code == 401
        wrong = {**headers, "Authorization": "Bearer not-a-token"}
        assert http.post(f"/a2a/{ns}/helper", json=body, headers=wrong).status_code == 401
        reader = {**headers, "Authorization": f"Bearer {token(cp, ns, 'reader')}"}
        refused = http.post(f"/a2a/{ns}/helper", json=body, headers=reader)
        assert refused.status_code == 403 and refused.text == "403"
        # A token for another audience (the API server's own) is not the gateway's.
        other = cp.kubectl("create", "token", "caller", "-n", ns).stdout.strip()
        assert (
            http.post(
                f"/a2a/{ns}/helper",
                json=body,
                headers={**headers, "Authorization": f"Bearer {other}"},
            ).status_code
            == 401
        )
        for agent in ("hidden", "missing"):
            assert http.get(f"/a2a/{ns}/{agent}/.well-known/agent-card.json").status_code == 404
        caller = {**headers, "Authorization": f"Bearer {token(cp, ns, 'caller')}"}
        assert http.post(f"/a2a/{ns}/hidden", json=body, headers=caller).status_code == 404
        assert http.post(f"/a2a/other-{ns}/helper", json=body, headers=caller).status_code == 404
    assert tasks(cp, ns) == []


def test_approval_is_input_required_and_cancel(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess, gateway: GatewayProcess
) -> None:
    cp, ns = control_plane, namespace
    setup(cp, ns)
    bearer = token(cp, ns, "caller")

    async def send() -> str:
        client, _ = await client_for(gateway, ns, "deployer", bearer, polling=True)
        events = [e async for e in client.send_message(message("deploy", "msg-9"))]
        await client.close()
        return str(events[0].task.id)

    name = asyncio.run(send())

    async def get() -> Any:
        client, _ = await client_for(gateway, ns, "deployer", bearer)
        task = await client.get_task(GetTaskRequest(id=name))
        await client.close()
        return task

    wait_for(
        lambda: asyncio.run(get()).status.state == TaskState.TASK_STATE_INPUT_REQUIRED,
        what="INPUT_REQUIRED",
    )

    async def cancel() -> Any:
        client, _ = await client_for(gateway, ns, "deployer", bearer)
        task = await client.cancel_task(CancelTaskRequest(id=name))
        await client.close()
        return task

    asyncio.run(cancel())
    assert json.loads(cp.kubectl("get", "task", name, "-n", ns, "-o", "json").stdout)["spec"][
        "cancel"
    ]
    wait_for(
        lambda: asyncio.run(get()).status.state == TaskState.TASK_STATE_CANCELED,
        what="CANCELED",
    )


def test_the_chart_rbac_suffices_and_the_requester_policy_admits_the_caller(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """The gateway with only the chart's ServiceAccount and RBAC (and the chart's requester
    admission policy installed) authenticates, authorizes and creates the caller's Task."""
    cp, ns = control_plane, namespace
    setup(cp, ns)
    account = install_chart_gateway(cp, ns, tmp_path)
    kubectl_caller = cp.service_account_kubeconfig(ns, "caller")
    forged = doc("Task", "forged", {"agentRef": "helper"})
    forged_body = json.loads(forged)
    forged_body["metadata"]["annotations"] = {"ordo.dev/requested-by": "someone-else"}
    wait_for(
        lambda: (
            "must be your user name"
            in cp.kubectl(
                "create",
                "-n",
                ns,
                "-f",
                "-",
                input=json.dumps(forged_body),
                kubeconfig=kubectl_caller,
                check=False,
            ).stderr
        ),
        120,
        what="the requester policy to take effect",
    )
    process = GatewayProcess(cp, ns, tmp_path, cp.service_account_kubeconfig(ns, account))
    try:
        bearer = token(cp, ns, "caller")

        async def send() -> Any:
            client, _ = await client_for(
                process, ns, "helper", bearer, polling=True, streaming=False
            )
            events = [e async for e in client.send_message(message("hi", "msg-chart"))]
            await client.close()
            return events[0].task

        sent = asyncio.run(send())
    finally:
        process.stop()
    assert sent.status.state == TaskState.TASK_STATE_SUBMITTED
    created = json.loads(cp.kubectl("get", "task", sent.id, "-n", ns, "-o", "json").stdout)
    assert created["metadata"]["annotations"]["ordo.dev/requested-by"] == (
        f"system:serviceaccount:{ns}:caller"
    )
