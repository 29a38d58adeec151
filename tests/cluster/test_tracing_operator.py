"""The operator exports each Task run's trace to a real Jaeger (v2, built by
scripts/build-jaeger) over OTLP/HTTP, configured by the standard OpenTelemetry environment as
the Helm chart sets it: a Task annotated with `ordo.dev/traceparent` gets the span tree
invoke_agent → chat, execute_tool, chat in that trace, status.traceId names it, the
operator's log lines of the run carry traceId and spanId, and no canary (API key, prompt,
input, tool arguments, tool result, answer) appears anywhere in the trace."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.support.counting_tool import CountingTool
from tests.support.credentials import opted_in
from tests.support.jaeger import Jaeger, parent_id, tags, tree
from tests.support.openai_server import OpenAIServer
from tests.support.operator import OperatorProcess, apply, wait_task

from ordo_devcluster import ControlPlane

pytestmark = [pytest.mark.slow]

KEY = "sk-canary-OPERATOR-TRACE-77e"
CANARY = "canary-OPERATOR-CONTENT-3b0"
TRACE_ID = "5b8efff798038103d269b633813fc60c"
PARENT_SPAN = "eee19b7ec3c1b174"


def manifests(namespace: str, model_url: str, tool_url: str) -> list[str]:
    def obj(kind: str, name: str, spec: dict[str, object], **meta: object) -> str:
        return json.dumps(
            {
                "apiVersion": "ordo.dev/v1alpha1",
                "kind": kind,
                "metadata": {"name": name, "namespace": namespace, **meta},
                "spec": spec,
            }
        )

    secret = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": opted_in({"name": "model-key", "namespace": namespace}),
            "stringData": {"api-key": KEY},
        }
    )
    return [
        secret,
        obj(
            "ModelEndpoint",
            "model",
            {
                "provider": "openai",
                "baseUrl": model_url,
                "model": "gpt-test",
                "credentials": {"secretRef": {"name": "model-key", "key": "api-key"}},
                "retry": {"maxAttempts": 2, "backoff": "100ms"},
            },
        ),
        obj(
            "Tool",
            "place-order",
            {
                "type": "http",
                "description": "records an order",
                "inputSchema": {"type": "object", "properties": {"item": {"type": "string"}}},
                "http": {"url": tool_url},
                "timeout": "30s",
            },
        ),
        obj(
            "Agent",
            "orders",
            {"modelRef": "model", "prompt": f"{CANARY}-prompt", "tools": ["place-order"]},
        ),
        obj(
            "Task",
            "traced",
            {"agentRef": "orders", "input": f"{CANARY}-input"},
            annotations={"ordo.dev/traceparent": f"00-{TRACE_ID}-{PARENT_SPAN}-01"},
        ),
    ]


@pytest.fixture
def jaeger(tmp_path: Path) -> Iterator[Jaeger]:
    with Jaeger.start(tmp_path) as server:
        yield server


@pytest.fixture
def operator(jaeger: Jaeger, operator_factory: Callable[..., OperatorProcess]) -> OperatorProcess:
    # jaeger first: it outlives the operator, as the operator's last spans go to it
    return operator_factory(env=jaeger.otel_env("ordo-operator-test"))


def test_operator_exports_the_task_trace_to_jaeger(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess, jaeger: Jaeger
) -> None:
    call = {"name": "place-order", "arguments": {"item": f"{CANARY}-arguments"}}
    script = [{"tool_calls": [call]}, {"text": f"{CANARY}-answer"}]
    with CountingTool() as tool, OpenAIServer(script, require_key=KEY) as model:
        for doc in manifests(namespace, model.url + "/v1", tool.url):
            apply(control_plane, namespace, doc)
        status = wait_task(control_plane, namespace, "traced")["status"]
        assert status["phase"] == "Succeeded", status
        assert status["traceId"] == TRACE_ID

        trace = jaeger.trace(TRACE_ID, spans=4)
    assert tree(trace) == {
        "invoke_agent orders": ["chat gpt-test", "execute_tool place-order", "chat gpt-test"]
    }
    spans = {s["operationName"]: s for s in trace["spans"]}
    root = spans["invoke_agent orders"]
    assert parent_id(root) == PARENT_SPAN
    assert trace["processes"][root["processID"]]["serviceName"] == "ordo-operator-test"
    assert tags(root)["k8s.namespace.name"] == namespace
    assert tags(root)["ordo.task.name"] == "traced"
    chat = tags(spans["chat gpt-test"])
    assert (chat["gen_ai.provider.name"], chat["gen_ai.request.model"]) == ("openai", "gpt-test")
    assert chat["gen_ai.response.model"] == "gpt-test"
    tool_tags = tags(spans["execute_tool place-order"])
    assert tool_tags["gen_ai.tool.call.id"] == status["toolCalls"][0]["callId"]
    assert tool_tags["ordo.tool.decision"] == "allowed"

    everything = json.dumps(trace)
    assert CANARY not in everything
    assert KEY not in everything

    # Every log line of the run (after the claim) carries the run's trace and span ids.
    run_span = root["spanID"]
    lines = [json.loads(line) for line in operator.logs().splitlines() if line.startswith("{")]
    run_lines = [line for line in lines if line.get("traceId") == TRACE_ID]
    assert run_lines, "no log line carries the run's traceId"
    assert {line.get("spanId") for line in run_lines} == {run_span}
    assert all(line.get("task") == "traced" for line in run_lines)
