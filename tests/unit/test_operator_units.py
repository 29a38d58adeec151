"""Pure parts of the operator: conditions, log formatting, metric labels, API paths."""

from __future__ import annotations

import json
import logging

import pytest

from ordo.operator.kube import client as kube
from ordo.operator.tasks import conditions
from ordo.operator.telemetry import logs
from ordo.operator.telemetry.metrics import _tool_label


def test_set_condition_keeps_transition_time_when_status_is_unchanged() -> None:
    first = conditions.set_condition(None, "Ready", "True", "Resolved", "ok", generation=1)
    first[0]["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    again = conditions.set_condition(first, "Ready", "True", "Resolved", "still ok", generation=2)
    assert again[0]["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert again[0]["observedGeneration"] == 2 and again[0]["message"] == "still ok"
    flipped = conditions.set_condition(again, "Ready", "False", "MissingReferences", "gone")
    assert flipped[0]["lastTransitionTime"] != "2020-01-01T00:00:00Z"


def test_set_condition_replaces_only_its_type_and_sorts() -> None:
    cs = conditions.set_condition(None, "Running", "True", "Started", "x")
    cs = conditions.set_condition(cs, "Scheduled", "True", "Claimed", "y")
    cs = conditions.set_condition(cs, "Running", "False", "Succeeded", "z")
    assert [c["type"] for c in cs] == ["Running", "Scheduled"]
    assert cs[0]["status"] == "False"


def test_same_conditions_ignores_transition_time() -> None:
    a = conditions.set_condition(None, "Ready", "True", "R", "m")
    b = [dict(a[0], lastTransitionTime="1999-01-01T00:00:00Z")]
    assert conditions.same_conditions(a, b)
    assert not conditions.same_conditions(
        a, conditions.set_condition(None, "Ready", "False", "R", "m")
    )


def test_condition_message_is_bounded() -> None:
    cs = conditions.set_condition(None, "Ready", "False", "R", "x" * 5000)
    assert len(cs[0]["message"]) == 1024


def test_json_log_lines_carry_the_context() -> None:
    logs.bind(namespace="ns", task="t", executionId="e1", step=3, agent=None)
    record = logging.LogRecord("ordo.operator", logging.INFO, __file__, 1, "model call", None, None)
    record.ordo = {"tool": "web-search"}
    line = json.loads(logs.JsonFormatter().format(record))
    assert line["namespace"] == "ns" and line["task"] == "t" and line["executionId"] == "e1"
    assert line["step"] == 3 and line["tool"] == "web-search" and "agent" not in line
    assert line["msg"] == "model call" and line["level"] == "info"


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("web-search", "web-search"),
        ("memory_read", "memory_read"),
        ("drop table;", "<not-offered>"),
        ("x" * 100, "<not-offered>"),
    ],
)
def test_tool_metric_labels_are_bounded(name: str, label: str) -> None:
    assert _tool_label(name) == label


def test_api_paths() -> None:
    assert (
        kube.path("Task", "ns", "t", "status")
        == "/apis/ordo.dev/v1alpha1/namespaces/ns/tasks/t/status"
    )
    assert kube.path("Secret", "ns", "s") == "/api/v1/namespaces/ns/secrets/s"
    assert kube.path("AgentPolicy", "ns") == "/apis/ordo.dev/v1alpha1/namespaces/ns/agentpolicies"
    assert kube.path("Pod", "ns", "p") == "/api/v1/namespaces/ns/pods/p"
    with pytest.raises(ValueError):
        kube.path("Deployment", "ns")


def test_an_executor_bug_becomes_an_error_result_not_a_crash() -> None:
    import asyncio
    from typing import Any

    from ordo.engine.governance import Governance
    from ordo.engine.loop import run_agent
    from ordo.engine.model import ModelRequest, ModelResponse
    from ordo.engine.state import RunConfig
    from ordo.engine.tooling import ToolBinding, ToolOutput
    from ordo.engine.transcript import ToolCall, ToolResult

    class Model:
        provider, model = "test", "test"

        async def complete(self, request: ModelRequest) -> ModelResponse:
            if any(isinstance(i, ToolResult) for i in request.items):
                return ModelResponse("done")
            return ModelResponse("", (ToolCall("c1", "buggy", {}),))

    async def buggy(arguments: dict[str, Any]) -> ToolOutput:
        raise KeyError("internal detail CANARY-KEY")

    config = RunConfig("s", "u", Governance(frozenset({"buggy"})))
    tools = [ToolBinding("buggy", "buggy", "", {"type": "object"}, buggy)]
    result = asyncio.run(run_agent(config, Model(), tools))
    assert result.phase == "Succeeded"
    assert result.tool_calls[0].outcome == "error"
    errors = [i for i in result.state.items if isinstance(i, ToolResult)]
    assert (
        errors[0].is_error and "KeyError" in errors[0].content and "CANARY" not in errors[0].content
    )


def test_the_model_sdks_and_network_tools_are_imported_before_the_first_task() -> None:
    # In a fresh interpreter: the operator's preload imports what a Task would otherwise
    # import on first use, on the event loop (the SDKs are ~0.5 s of CPU).
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from ordo.operator import main\n"
        "assert 'openai' not in sys.modules and 'anthropic' not in sys.modules\n"
        "main.preload()\n"
        "missing = [m for m in ('openai', 'anthropic', *main.PRELOADED) if m not in sys.modules]\n"
        "assert not missing, missing\n"
        "from ordo import tls\n"
        "assert tls._SSL_CONTEXT is not None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_a_watched_object_is_handed_on_as_a_private_copy_without_managed_fields() -> None:
    import kopf

    from ordo.operator.handlers import _plain

    raw = {
        "metadata": {
            "name": "t",
            "uid": "u",
            "finalizers": ["ordo.dev/task"],
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"agentRef": "a", "input": "x"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    plain = _plain(kopf.Body(raw))
    assert "managedFields" not in plain["metadata"]
    assert {**plain, "metadata": {**plain["metadata"], "managedFields": []}} == {
        **raw,
        "metadata": {**raw["metadata"], "managedFields": []},
    }
    plain["status"]["conditions"][0]["status"] = "False"
    plain["metadata"]["finalizers"].clear()
    assert raw["status"]["conditions"][0]["status"] == "True"  # kopf's object is untouched
    assert raw["metadata"]["finalizers"] == ["ordo.dev/task"]
    assert len(raw["metadata"]["managedFields"]) == 1


async def test_per_call_log_lines_are_debug_and_denials_stay_warnings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """At info an SRE sees a run's start, its denials and its end; each model call and each
    allowed tool call only at debug (issue 14: most of the log volume, and operator CPU)."""
    from ordo.engine.events import RunStarted, StepStarted, ToolDecided, ToolFinished
    from ordo.engine.state import ToolCallRecord
    from ordo.operator.tasks.writer import log_events

    events = [
        RunStarted(0),
        StepStarted(1),
        ToolDecided(ToolCallRecord(1, "lookup", "allowed", "allowed by role reader"), offered=True),
        ToolFinished(1, "lookup", "ok", 0.01),
        ToolDecided(
            ToolCallRecord(1, "delete", "denied", "denied by policy no-deletes"), offered=True
        ),
    ]
    with caplog.at_level(logging.INFO, logger="ordo.operator"):
        for event in events:
            await log_events(event)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "run started"),
        ("WARNING", "tool decision"),
    ]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="ordo.operator"):
        for event in events:
            await log_events(event)
    assert [r.getMessage() for r in caplog.records] == [
        "run started",
        "model call",
        "tool decision",
        "tool finished",
        "tool decision",
    ]


def test_the_operator_tunes_the_garbage_collector_once_started() -> None:
    import gc

    from ordo.operator.main import GC_THRESHOLDS, tune_gc

    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0  # start-up's objects are out of the scans
        assert gc.isenabled()  # cycles are still collected
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
