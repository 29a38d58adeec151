"""Guardrails (issue 16 §2) with the operator as a subprocess: each type (pattern, http against a
local check service, model against a scripted judge server) blocks one Task and redacts
another; status.guardrails names the guardrail and the point, never the text; a Warning Event
and `ordo_guardrail_decisions_total` say a guardrail fired. A required guardrail the Agent does
not list fails GuardrailMissing with zero model requests. A Guardrail whose pattern RE2 cannot
compile is Ready=False naming the field, and Ready=True once fixed. Canaries: the matched text,
the redacted value and the check service's reason reach no log line, Event, metric, condition
or status message."""

from __future__ import annotations

import json
from typing import Any

from tests.support.counting_tool import CountingTool
from tests.support.guard_check_server import REASON, REDACTED, SECRET, GuardCheckServer
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

SECRET_PATTERN = r"CANARY-guard-matched-[0-9a-f]+"
CALL = {"name": "place-order", "id": "call_1"}


def pattern(name: str, points: list[str], action: str, patterns: list[str]) -> str:
    return doc(
        "Guardrail",
        name,
        {"type": "pattern", "points": points, "pattern": {"patterns": patterns, "action": action}},
    )


def model_endpoint(name: str, url: str, model: str = "gpt-test") -> str:
    return doc(
        "ModelEndpoint", name, {"provider": "openai-compatible", "baseUrl": url, "model": model}
    )


def requests_for(server: OpenAIServer, marker: str) -> int:
    return sum(marker in json.dumps(body) for body in server.bodies)


# The agent's script, by a marker in the Task's input; the judge's, by a marker in the answer.
AGENT_SCRIPT: dict[str, list[dict[str, Any]]] = {
    "P-REDACT": [{"text": f"the code is {SECRET}"}],
    "H-BLOCK": [{"tool_calls": [{**CALL, "arguments": {"item": "a forbidden item"}}]}],
    "H-REDACT": [
        {"tool_calls": [{**CALL, "arguments": {"item": "widget"}}]},
        {"text": "ordered"},
    ],
    "J-BLOCK": [{"text": "J-BLOCK: a rude answer"}],
    "J-REDACT": [{"text": f"J-REDACT: the code is {SECRET}"}],
}
JUDGE_SCRIPT = {
    "J-BLOCK": [{"json": {"decision": "deny", "reason": REASON}}],
    "J-REDACT": [
        {"json": {"decision": "redact", "text": f"the code is {REDACTED}", "reason": REASON}}
    ],
}


def setup(
    cp: ControlPlane, ns: str, model: OpenAIServer, judge: OpenAIServer, check: str, tool: str
) -> None:
    for manifest in (
        model_endpoint("model", model.url + "/v1"),
        model_endpoint("judge-model", judge.url + "/v1", "judge"),
        doc(
            "Tool", "place-order", {"type": "http", "description": "orders", "http": {"url": tool}}
        ),
        pattern("no-secret-in", ["input"], "deny", [SECRET_PATTERN]),
        pattern("scrub-out", ["output"], "redact", [SECRET_PATTERN]),
        doc(
            "Guardrail",
            "http-args",
            {
                "type": "http",
                "points": ["toolArguments"],
                "http": {"url": check + "/deny-if?word=forbidden"},
            },
        ),
        doc(
            "Guardrail",
            "http-results",
            {"type": "http", "points": ["toolResult"], "http": {"url": check + "/redact"}},
        ),
        doc(
            "Guardrail",
            "judge-out",
            {
                "type": "model",
                "points": ["output"],
                "model": {"modelRef": "judge-model", "instructions": "no rudeness, no codes"},
            },
        ),
        doc(
            "Agent",
            "pattern-agent",
            {"modelRef": "model", "guardrails": ["no-secret-in", "scrub-out"]},
        ),
        doc(
            "Agent",
            "http-agent",
            {
                "modelRef": "model",
                "tools": ["place-order"],
                "guardrails": ["http-args", "http-results"],
            },
        ),
        doc("Agent", "judge-agent", {"modelRef": "model", "guardrails": ["judge-out"]}),
    ):
        apply(cp, ns, manifest)


def run(cp: ControlPlane, ns: str, name: str, agent: str, text: str) -> dict[str, Any]:
    apply(cp, ns, doc("Task", name, {"agentRef": agent, "input": text}))
    status: dict[str, Any] = wait_task(cp, ns, name)["status"]
    return status


def test_each_guardrail_type_blocks_and_redacts_and_nothing_leaks(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    cp, ns = control_plane, namespace
    with (
        OpenAIServer(AGENT_SCRIPT) as model,
        OpenAIServer(JUDGE_SCRIPT) as judge,
        GuardCheckServer() as check,
        CountingTool(reply={"code": SECRET}) as tool,
    ):
        setup(cp, ns, model, judge, check.url, tool.url)
        statuses: dict[str, dict[str, Any]] = {}

        # pattern: the Task input is denied before any model call; the answer is redacted.
        statuses["p-block"] = s = run(cp, ns, "p-block", "pattern-agent", f"P-BLOCK {SECRET}")
        assert (s["phase"], s["reason"], s["step"]) == ("Failed", "GuardrailViolation", 0), s
        assert s["message"] == "guardrail 'no-secret-in' denied the Task input at step 0"
        assert s["guardrails"] == [
            {"step": 0, "point": "input", "guardrail": "no-secret-in", "action": "denied"}
        ]
        assert requests_for(model, "P-BLOCK") == 0
        statuses["p-redact"] = s = run(cp, ns, "p-redact", "pattern-agent", "P-REDACT say it")
        assert (s["phase"], s["output"]) == ("Succeeded", "the code is [REDACTED]"), s
        assert [(g["point"], g["action"]) for g in s["guardrails"]] == [("output", "redacted")]

        # http: a tool call denied by the check service never runs; a result is redacted.
        statuses["h-block"] = s = run(cp, ns, "h-block", "http-agent", "H-BLOCK order")
        assert (s["phase"], s["reason"]) == ("Failed", "GuardrailViolation"), s
        assert [(c["tool"], c["decision"], c["reason"]) for c in s["toolCalls"]] == [
            ("place-order", "denied", "GuardrailViolation: http-args (toolArguments)")
        ]
        assert s["guardrails"] == [
            {
                "step": 1,
                "point": "toolArguments",
                "guardrail": "http-args",
                "action": "denied",
                "tool": "place-order",
            }
        ]
        assert tool.count == 0
        statuses["h-redact"] = s = run(cp, ns, "h-redact", "http-agent", "H-REDACT order")
        assert (s["phase"], s["output"]) == ("Succeeded", "ordered"), s
        assert tool.count == 1
        second = [b for b in model.bodies if "H-REDACT" in json.dumps(b)][-1]
        assert SECRET not in json.dumps(second) and REDACTED in json.dumps(second)
        assert [(g["point"], g["action"]) for g in s["guardrails"]] == [("toolResult", "redacted")]

        # model: the judge (a scripted server over HTTP) denies one answer, redacts another.
        statuses["j-block"] = s = run(cp, ns, "j-block", "judge-agent", "J-BLOCK talk")
        assert (s["phase"], s["reason"]) == ("Failed", "GuardrailViolation"), s
        assert s["message"] == "guardrail 'judge-out' denied the final answer at step 1"
        assert not s.get("output")  # an answer the judge refused is never written
        statuses["j-redact"] = s = run(cp, ns, "j-redact", "judge-agent", "J-REDACT talk")
        assert (s["phase"], s["output"]) == ("Succeeded", f"the code is {REDACTED}"), s
        assert judge.count == 2

        # Events and the metric say a guardrail fired (names and points only).
        task_events = {
            e["involvedObject"]["name"]: e
            for e in events(cp, ns)
            if e["reason"].startswith("Guardrail")
        }
        assert task_events["p-block"]["type"] == "Warning"
        assert task_events["p-block"]["message"] == s_message(
            "no-secret-in", "denied the Task input", 0
        )
        assert task_events["p-redact"]["reason"] == "GuardrailRedacted"
        assert task_events["h-block"]["message"] == s_message(
            "http-args", "denied the arguments of tool 'place-order'", 1
        )
        metrics = operator.metrics()  # counted during the runs, before their status
        for labels in (  # the exposition sorts label names
            'guardrail="no-secret-in",outcome="denied",point="input"',
            'guardrail="scrub-out",outcome="redacted",point="output"',
            'guardrail="http-args",outcome="denied",point="toolArguments"',
            'guardrail="http-results",outcome="redacted",point="toolResult"',
            'guardrail="judge-out",outcome="denied",point="output"',
            'guardrail="judge-out",outcome="redacted",point="output"',
        ):
            assert f"ordo_guardrail_decisions_total{{{labels}}} 1.0" in metrics, labels

        # Canaries: the matched text, the redacted value, the service's and judge's reason.
        checked = {
            "logs": operator.logs(),
            "events": json.dumps(events(cp, ns)),
            "metrics": metrics,
            "statuses": json.dumps(statuses),
            "guardrails": json.dumps(get_json(cp, "guardrails", "-n", ns)["items"]),
        }
    for where, text in checked.items():
        assert SECRET not in text, f"the matched text leaked into {where}"
        assert REASON not in text, f"the check's reason leaked into {where}"
    assert '"guardrail fired"' in checked["logs"]


def s_message(guardrail: str, what: str, step: int) -> str:
    return f"guardrail {guardrail!r} {what} at step {step}"


def test_a_required_guardrail_the_agent_does_not_list_costs_zero_model_requests(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    cp, ns = control_plane, namespace
    with OpenAIServer([{"text": "never"}]) as model:
        for manifest in (
            model_endpoint("model", model.url + "/v1"),
            pattern("pii", ["input", "output"], "redact", [SECRET_PATTERN]),
            doc("Agent", "agent", {"modelRef": "model"}),
            doc("AgentPolicy", "needs-pii", {"requiredGuardrails": ["pii"]}),
        ):
            apply(cp, ns, manifest)
        status = run(cp, ns, "unguarded", "agent", "hello")
        assert (status["phase"], status["reason"], status["step"]) == (
            "Failed",
            "GuardrailMissing",
            0,
        ), status
        assert "'pii' (AgentPolicy 'needs-pii')" in status["message"]
        assert model.count == 0


def test_guardrail_ready_condition_follows_its_pattern(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> None:
    cp, ns = control_plane, namespace
    # A backreference: RE2 cannot run it (the CRD cannot tell; the operator can).
    apply(cp, ns, pattern("broken", ["input"], "deny", ["ok", r"(a)\1"]))
    condition = wait_for(
        lambda: ready_condition(cp, ns, "guardrail", "broken"), 60, what="a Ready condition"
    )
    assert (condition["status"], condition["reason"]) == ("False", "InvalidSpec"), condition
    assert "patterns[1]" in condition["message"] and r"(a)\1" not in condition["message"]

    apply(cp, ns, pattern("broken", ["input"], "deny", ["ok", r"(a)a"]))
    condition = wait_for(
        lambda: (
            (c := ready_condition(cp, ns, "guardrail", "broken")) and c["status"] == "True" and c
        ),
        60,
        what="Ready=True after the fix",
    )
    assert condition["reason"] == "Compiled"

    apply(
        cp,
        ns,
        doc(
            "Guardrail",
            "metadata-check",
            {"type": "http", "points": ["input"], "http": {"url": "http://169.254.169.254/check"}},
        ),
    )
    condition = wait_for(
        lambda: ready_condition(cp, ns, "guardrail", "metadata-check"), 60, what="a Ready condition"
    )
    assert (condition["status"], condition["reason"]) == ("False", "DestinationRefused")
