"""The gateway's mapping between A2A and ordo Tasks (gateway/tasks.py), its card
(gateway/card.py), its rate limit (gateway/limits.py) and its SERVER span (gateway/traces.py);
the cluster tests serve them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from a2a.types.a2a_pb2 import Message, Part, TaskState
from google.protobuf.struct_pb2 import Struct, Value
from opentelemetry.trace import SpanKind
from tests.support.traced import recorded_spans

from ordo.api.agent import AgentSpec
from ordo.gateway import tasks
from ordo.gateway.card import agent_card, served
from ordo.gateway.limits import CallerLimits
from ordo.gateway.reviews import Caller
from ordo.gateway.traces import current_traceparent, server_span

ALICE = Caller("system:serviceaccount:ns:alice")
BOB = Caller("system:serviceaccount:ns:bob")


def task(phase: str | None = None, **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "t", "annotations": {}}, "status": status}
    if phase:
        body["status"]["phase"] = phase
    return body


def test_task_name_is_per_caller_and_message() -> None:
    first = tasks.task_name("helper", ALICE, "m-1")
    assert first == tasks.task_name("helper", ALICE, "m-1")
    assert first != tasks.task_name("helper", BOB, "m-1")
    assert first != tasks.task_name("helper", ALICE, "m-2")
    long = tasks.task_name("A" * 63, ALICE, "m")
    assert len(long) <= 63 and long.startswith("a2a-aaaa")


def test_body_records_the_authenticated_caller_and_the_chain() -> None:
    metadata = Struct()
    metadata.update({tasks.CHAIN_METADATA: ["writer"], "ordo.dev/requested-by": "mallory"})
    msg = Message(message_id="m", parts=[Part(text="hi")], metadata=metadata)
    chain = tasks.caller_chain(msg)
    body = tasks.task_body("n", "helper", ALICE, msg, chain)
    annotations = body["metadata"]["annotations"]
    assert annotations["ordo.dev/requested-by"] == ALICE.username
    assert json.loads(annotations["ordo.dev/delegation-chain"]) == ["writer", "helper"]
    assert body["spec"] == {"agentRef": "helper", "input": "hi"}
    assert body["metadata"]["labels"] == {tasks.AGENT_LABEL: "helper"}


def test_input_is_one_data_part_or_the_text() -> None:
    data = Part(data=Value(struct_value=Struct(fields={"q": Value(string_value="x")})))
    assert tasks.message_input(Message(parts=[data])) == {"q": "x"}
    texts = Message(parts=[Part(text="a"), Part(text="b")])
    assert tasks.message_input(texts) == "a\nb"


def test_a_loop_back_is_counted() -> None:
    assert tasks.refusal("helper", (), 3) is None
    assert tasks.refusal("helper", ("writer",), 3) is None
    cycle = tasks.refusal("helper", ("helper", "writer"), 3)
    assert cycle is not None and cycle.startswith("DelegationCycle")
    deep = tasks.refusal("helper", ("a", "b", "c", "d"), 3)
    assert deep is not None and deep.startswith("DelegationDepthExceeded")


@pytest.mark.parametrize(
    ("body", "state"),
    [
        (task(), TaskState.TASK_STATE_SUBMITTED),
        (task("Pending"), TaskState.TASK_STATE_SUBMITTED),
        (task("Running", step=1), TaskState.TASK_STATE_WORKING),
        (
            task("Running", conditions=[{"type": "AwaitingApproval", "status": "True"}]),
            TaskState.TASK_STATE_INPUT_REQUIRED,
        ),
        (
            task("Running", conditions=[{"type": "AwaitingApproval", "status": "False"}]),
            TaskState.TASK_STATE_WORKING,
        ),
        (task("Succeeded", output="42"), TaskState.TASK_STATE_COMPLETED),
        (task("Cancelled", reason="Cancelled"), TaskState.TASK_STATE_CANCELED),
        (task("Failed", reason="ToolDenied"), TaskState.TASK_STATE_REJECTED),
        (task("Failed", reason="ApprovalRejected"), TaskState.TASK_STATE_REJECTED),
        (task("Failed", reason="Timeout"), TaskState.TASK_STATE_FAILED),
    ],
)
def test_states(body: dict[str, Any], state: int) -> None:
    assert tasks.task_state(body) == state


def test_the_answer_is_the_artifact_and_failures_carry_the_reason() -> None:
    done = tasks.a2a_task(task("Succeeded", output="42", step=2))
    assert [p.text for a in done.artifacts for p in a.parts] == ["42"]
    assert done.status.message.parts[0].text == "step 2"
    structured = tasks.a2a_task(task("Succeeded", output="{}", structuredOutput={"a": 1}))
    assert structured.artifacts[0].parts[0].data.struct_value["a"] == 1
    failed = tasks.a2a_task(task("Failed", reason="Timeout", message="ran out of time"))
    assert not failed.artifacts
    assert failed.status.message.parts[0].text == "Timeout: ran out of time"


def agent(a2a: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"modelRef": "m"}
    if a2a is not None:
        spec["a2a"] = a2a
    AgentSpec.model_validate(spec)
    return {"metadata": {"name": "helper", "namespace": "ns", "generation": 3}, "spec": spec}


def test_only_agents_that_opt_in_are_served() -> None:
    assert not served(None)
    assert not served(agent(None))
    assert not served(agent({"enabled": False}))
    assert served(agent({"enabled": True}))


def test_card() -> None:
    body = agent({"enabled": True, "skills": [{"name": "answer", "tags": ["qa"]}]})
    card = agent_card(body, "http://gw/a2a/ns/helper")
    assert card.name == "helper" and "helper" in card.description
    assert card.version == "3"
    assert {(i.url, i.protocol_version) for i in card.supported_interfaces} == {
        ("http://gw/a2a/ns/helper", "1.0"),
        ("http://gw/a2a/ns/helper", "0.3"),
    }
    assert card.security_schemes["kubernetes"].http_auth_security_scheme.scheme == "Bearer"
    assert list(card.security_requirements[0].schemes) == ["kubernetes"]
    assert [(s.id, list(s.tags)) for s in card.skills] == [("answer", ["qa"])]
    assert not card.capabilities.push_notifications


def test_rate_limit_per_caller() -> None:
    now = [0.0]
    limits = CallerLimits(rate=1.0, burst=2, clock=lambda: now[0])
    assert [limits.admit("a") for _ in range(3)] == [True, True, False]
    assert limits.admit("b")
    now[0] = 1.0
    assert limits.admit("a") and not limits.admit("a")
    assert all(CallerLimits(rate=0, burst=1).admit("a") for _ in range(10))


def test_the_server_span_continues_the_callers_trace_and_the_task_carries_it() -> None:
    caller_trace = "0af7651916cd43dd8448eb211c80319c"
    headers = {"traceparent": f"00-{caller_trace}-b7ad6b7169203331-01"}
    with recorded_spans() as exporter:
        with server_span(headers, "ns", "helper", "SendMessage") as span:
            parent = current_traceparent()
            body = tasks.task_body("n", "helper", ALICE, Message(message_id="m"), (), parent)
        context = span.get_span_context()
    assert parent == f"00-{caller_trace}-{context.span_id:016x}-01"
    assert body["metadata"]["annotations"]["ordo.dev/traceparent"] == parent
    (finished,) = exporter.get_finished_spans()
    assert finished.name == "invoke_agent helper" and finished.kind == SpanKind.SERVER
    assert finished.parent is not None and finished.parent.span_id == 0xB7AD6B7169203331
    assert dict(finished.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "helper",
        "k8s.namespace.name": "ns",
        "rpc.method": "SendMessage",
    }


def test_no_traceparent_when_nothing_records() -> None:
    with server_span({}, "ns", "helper", "other"):
        assert current_traceparent() is None
    body = tasks.task_body("n", "helper", ALICE, Message(message_id="m"), (), None)
    assert "ordo.dev/traceparent" not in body["metadata"]["annotations"]
