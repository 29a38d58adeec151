"""Status sizes are bounded (issue 23): `structuredOutput` by its serialised size, the whole
terminal status by a documented total, and a terminal write the API server refuses for its
size lands reduced, so a Task never stays `Running` because its result was big.

The size measure is checked against both forms a status takes: the request ordo sends
(`json.dumps`, ASCII) and what kube-apiserver stores (UTF-8 JSON, `<`, `>`, `&` escaped; seen
against v1.36: 260,000 `<` fit under etcd's 1.5 MiB, 300,000 do not). The writer is driven
through the real KubeClient over an in-process API answering what kube-apiserver answered."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import kopf
from hypothesis import given, settings
from hypothesis import strategies as st

from ordo.api.task import MAX_OUTPUT_CHARS, MAX_TOOL_CALL_RECORDS
from ordo.engine.loop import run_agent
from ordo.engine.state import RunState, ToolCallRecord
from ordo.engine.transcript import Usage
from ordo.runtime import TaskOutcome
from ordo.runtime import status as status_mod
from support.engine_fakes import ScriptedModel, answer, open_governance, run_config
from support.stall import StallWatchdog

EMOJI = "\U0001f600"


def stored_size(value: Any) -> int:
    """Bytes of `value` as kube-apiserver stores it: compact UTF-8 JSON with Go's escapes."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return len(text.encode("utf-8", "surrogatepass"))


def sent_size(value: Any) -> int:
    """Bytes of `value` as the operator's client sends it (kube.py: `json.dumps`)."""
    return len(json.dumps(value).encode())


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from('<>&\u2028\x00\n"\\')),
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_json_size_bounds_what_is_sent_and_what_is_stored(value: Any) -> None:
    from ordo.engine.jsonsize import json_size

    size = json_size(value, 10**9)
    assert size >= sent_size(value)
    assert size >= stored_size(value)


def test_json_size_stops_past_its_limit_whatever_the_value_holds() -> None:
    from ordo.engine.jsonsize import json_size

    small = {"a": [EMOJI * 10, 1.5, None]}
    assert sent_size(small) <= json_size(small, 1000) <= sent_size(small) + 8
    for huge in (
        [1.2345678901234567e300] * 40_000,  # 1M characters of floats: 68 ms for json.dumps
        [0] * 500_000,
        {"a": EMOJI * 999_990},
        [[[]] for _ in range(200_000)],
        {str(i): i for i in range(100_000)},
    ):
        assert json_size(huge, 131_072) == 131_073


async def test_json_size_at_the_cap_holds_the_loop_briefly() -> None:
    """The most a measure can walk is its limit: 131,072 bytes of the cheapest leaves."""
    from ordo.engine.jsonsize import MAX_STRUCTURED_OUTPUT_BYTES, json_size

    at_cap = [0] * (MAX_STRUCTURED_OUTPUT_BYTES // 4 - 1)  # 4 bytes a leaf: the most leaves
    over = [[0] * 20] * 50_000 + [0] * 2_000_000
    assert json_size(at_cap, MAX_STRUCTURED_OUTPUT_BYTES) <= MAX_STRUCTURED_OUTPUT_BYTES
    async with StallWatchdog() as watchdog:
        for value in (at_cap, over):
            await asyncio.sleep(0)
            json_size(value, MAX_STRUCTURED_OUTPUT_BYTES)
    assert watchdog.longest < 1.0, watchdog.report()  # measured: 15 ms


# -- structuredOutput: a documented failure over its cap --------------------------------------


async def test_a_structured_answer_over_its_cap_fails_invalid_output_naming_the_field() -> None:
    """The review's answer: 262,000 emoji (1.2 MB as UTF-8, 3.1 MB as ordo sends it)."""
    text = json.dumps({"poem": EMOJI * 262_000}, ensure_ascii=False)
    config = run_config(open_governance(), output_schema={"type": "object"})
    result = await run_agent(config, ScriptedModel([answer(text, Usage(5, 7))]), [])
    assert (result.phase, result.reason) == ("Failed", "InvalidOutput"), result.message
    assert "status.structuredOutput" in result.message and "131072" in result.message
    assert result.structured_output is None
    status = status_mod.terminal(
        result.phase, result.reason, result.message, state=result.state, output=result.output
    )
    assert status.output_truncated and len(status.output or "") <= MAX_OUTPUT_CHARS
    assert (status.step, status.usage and status.usage.total_tokens) == (1, 12)


async def test_a_structured_answer_at_its_cap_succeeds() -> None:
    from ordo.engine.jsonsize import MAX_STRUCTURED_OUTPUT_BYTES, json_size

    value = {"a": "x" * (MAX_STRUCTURED_OUTPUT_BYTES - json_size({"a": ""}, 100))}
    assert json_size(value, MAX_STRUCTURED_OUTPUT_BYTES) == MAX_STRUCTURED_OUTPUT_BYTES
    config = run_config(open_governance(), output_schema={"type": "object"})
    result = await run_agent(config, ScriptedModel([answer(json.dumps(value))]), [])
    assert (result.phase, result.structured_output) == ("Succeeded", value)


def test_the_status_builder_never_carries_an_oversized_structured_output() -> None:
    """Defence in depth: whatever reaches the builder, status.structuredOutput stays within
    its cap (omitted, with outputTruncated)."""
    status = status_mod.terminal(
        "Succeeded", "Succeeded", "ok", output="{}", structured_output={"a": EMOJI * 20_000}
    )
    assert status.structured_output is None and status.output_truncated is True


# -- the total: by construction ---------------------------------------------------------------


def worst_state() -> RunState:
    """Every capped string of every record at its cap, in the costliest characters."""
    records = [
        ToolCallRecord(
            step=1 + i // 3,
            tool=EMOJI * 200,
            decision="denied",
            reason="<" * 2000,
            outcome="skipped",
            call_id=EMOJI * 300,
            error="&" * 200,
        )
        for i in range(MAX_TOOL_CALL_RECORDS + 20)
    ]
    return RunState(step=40, usage=Usage(1000, 500), records=records)


def terminal_fields(outcome_status: Any) -> dict[str, Any]:
    fields = status_mod.to_patch(outcome_status)
    fields["completedAt"] = "2026-01-01T00:00:00Z"
    message = "<" * 1024
    fields["conditions"] = [
        {"type": t, "status": "False", "reason": "ToolDenied", "message": message}
        for t in ("Running", "Succeeded", "Ready", "Failed", "Stalled")
    ]
    return fields


def test_the_terminal_status_fits_its_total_whatever_the_fields_hold() -> None:
    from ordo.engine.jsonsize import json_size

    built = status_mod.terminal(
        "Failed",
        "ToolDenied",
        "\x01" * 5000,
        state=worst_state(),
        output=EMOJI * 40_000,
        snapshot_hash="h" * 64,
    )
    fields = terminal_fields(built)
    assert json_size(fields, 10**9) > status_mod.MAX_STATUS_BYTES  # the caps alone do not bound it
    bounded = status_mod.bounded(fields)
    assert max(sent_size(bounded), stored_size(bounded)) <= status_mod.MAX_STATUS_BYTES
    assert json_size(bounded, 10**9) <= status_mod.MAX_STATUS_BYTES
    # what must land is whole: phase, reason, step, usage, message, conditions, completedAt
    for key in ("phase", "reason", "step", "usage", "message", "conditions", "completedAt"):
        assert bounded[key] == fields[key], key
    # the newest records are kept, the oldest dropped, and both cuts are flagged
    kept = bounded.get("toolCalls") or []
    assert kept == fields["toolCalls"][len(fields["toolCalls"]) - len(kept) :]
    assert bounded["toolCallsTruncated"] is True and bounded["outputTruncated"] is True


def test_a_status_within_its_total_is_left_as_it_is() -> None:
    built = status_mod.terminal(
        "Succeeded", "Succeeded", "ok", output="fine", structured_output={"a": 1}
    )
    fields = terminal_fields(built)
    assert status_mod.bounded(fields) is fields


def test_the_reduced_status_keeps_what_must_land_and_removes_the_rest() -> None:
    built = status_mod.terminal(
        "Succeeded",
        "Succeeded",
        "the agent answered with valid structured output",
        state=worst_state(),
        output="x" * 30_000,
        structured_output={"a": "b" * 100_000},
    )
    fields = terminal_fields(built)
    small = status_mod.reduced(fields)
    for key in ("phase", "reason", "step", "usage", "completedAt"):
        assert small[key] == fields[key], key
    # null removes a field from the stored status (kube-apiserver prunes it)
    for key in ("toolCalls", "guardrails", "output", "structuredOutput"):
        assert key in small and small[key] is None, key
    assert small["outputTruncated"] is True and small["toolCallsTruncated"] is True
    assert "status reduced" in small["message"]
    assert sent_size(small) < 8192


# -- the writer: a write refused for its size lands reduced -----------------------------------

TOO_LARGE_ETCD = (
    500,
    {
        "kind": "Status",
        "status": "Failure",
        "message": "etcdserver: request is too large",
        "code": 500,
    },
)
TOO_LARGE_BODY = (
    413,
    {
        "kind": "Status",
        "status": "Failure",
        "message": "Request entity too large: limit is 3145728",
        "reason": "RequestEntityTooLarge",
        "code": 413,
    },
)


class Api:
    """An in-process kube-apiserver for one Task: status PATCHes larger than `limit` bytes are
    answered `refusal`; others are applied (a null removes the field, as the API server's
    pruning does) and answered with the object."""

    def __init__(
        self, refusal: tuple[int, dict[str, Any]], limit: int, status: dict[str, Any]
    ) -> None:
        self.refusal = refusal
        self.limit = limit
        self.body: dict[str, Any] = {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Task",
            "metadata": {"name": "t", "namespace": "ns", "uid": "u", "resourceVersion": "1"},
            "spec": {"agentRef": "a", "input": "hi"},
            "status": status,
        }
        self.patches: list[list[dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method == "PATCH" and request.url.path.endswith("/status"):
            patch = json.loads(request.content)
            self.patches.append(patch)
            if len(request.content) > self.limit:
                code, body = self.refusal
                return httpx.Response(code, json=body)
            if isinstance(patch, dict):  # a merge patch
                fields = patch["status"]
            else:  # the fenced JSON Patch: a test of the executionId, then one add per field
                fields = {
                    op["path"].removeprefix("/status/"): op["value"]
                    for op in patch
                    if op["op"] == "add"
                }
            for key, value in fields.items():
                if value is None:
                    self.body["status"].pop(key, None)
                else:
                    self.body["status"][key] = value
            return httpx.Response(200, json=self.body)
        if request.method == "PATCH":
            return httpx.Response(200, json=self.body)
        if request.method == "POST":  # Events
            return httpx.Response(201, json=json.loads(request.content))
        return httpx.Response(200, json=self.body)


def writer_for(api: Api) -> Any:
    from ordo.operator.kube.client import KubeClient
    from ordo.operator.tasks.writer import TaskWriter
    from ordo.operator.telemetry.metrics import Metrics

    client = KubeClient(
        kopf.ConnectionInfo(server="https://kube.invalid"),
        wrap_transport=lambda _real: httpx.MockTransport(api),
        backoff=0.001,
    )
    return TaskWriter(client, Metrics())


def big_outcome() -> TaskOutcome:
    from ordo.engine.state import RunResult

    state = RunState(step=3, usage=Usage(30, 12), records=worst_state().records[:5])
    result = RunResult(
        "Succeeded", "Succeeded", "the agent answered", "x" * 30_000, {"a": "b" * 100_000}, state
    )
    return TaskOutcome("Succeeded", "Succeeded", "the agent answered", result)


async def test_a_terminal_write_refused_by_etcd_for_size_lands_reduced() -> None:
    api = Api(TOO_LARGE_ETCD, limit=50_000, status={"phase": "Running", "executionId": "e1"})
    writer = writer_for(api)
    await writer.finish(api.body, big_outcome(), execution_id="e1")
    status = api.body["status"]
    assert (status["phase"], status["reason"], status["step"]) == ("Succeeded", "Succeeded", 3)
    assert status["usage"]["totalTokens"] == 42 and status["completedAt"]
    assert "structuredOutput" not in status and "output" not in status
    assert status["outputTruncated"] is True and "status reduced" in status["message"]
    assert any(c["type"] == "Complete" and c["status"] == "True" for c in status["conditions"])
    await writer.client.close()


async def test_a_terminal_write_refused_as_too_large_a_request_lands_reduced() -> None:
    api = Api(TOO_LARGE_BODY, limit=50_000, status={"phase": "Running", "executionId": "e1"})
    writer = writer_for(api)
    await writer.finish(api.body, big_outcome(), execution_id="e1")
    assert api.body["status"]["phase"] == "Succeeded"
    assert len(api.patches) == 2
    await writer.client.close()


async def test_an_outcome_without_run_state_keeps_the_step_and_usage_the_task_shows() -> None:
    """E.g. the scheduler giving up after an unexpected error, or a resumed Task whose Agent
    was deleted: the status keeps the progress already written, never resets it to 0."""
    shown = {
        "phase": "Running",
        "executionId": "e1",
        "step": 4,
        "usage": {"inputTokens": 40, "outputTokens": 9, "totalTokens": 49},
    }
    api = Api(TOO_LARGE_BODY, limit=10**9, status=dict(shown))
    writer = writer_for(api)
    outcome = TaskOutcome("Failed", "InternalError", "the run ended by an unexpected KeyError")
    await writer.finish(api.body, outcome)
    status = api.body["status"]
    assert (status["phase"], status["step"], status["usage"]) == ("Failed", 4, shown["usage"])
    await writer.client.close()


def test_the_refusals_kube_apiserver_gives_for_size_are_recognised() -> None:
    from ordo.operator.kube.errors import ApiError
    from ordo.operator.tasks.writer import refused_for_size

    # as kube-apiserver v1.36 answered them (tests/cluster/test_big_status_cluster.py)
    assert refused_for_size(ApiError(413, "RequestEntityTooLarge", "Request entity too large"))
    assert refused_for_size(ApiError(500, "", "etcdserver: request is too large"))
    assert refused_for_size(
        ApiError(
            500,
            "",
            "rpc error: code = ResourceExhausted desc = trying to send message larger than max",
        )
    )
    assert not refused_for_size(ApiError(500, "InternalError", "etcdserver: leader changed"))
    assert not refused_for_size(ApiError(422, "Invalid", "status.output: Too long"))
