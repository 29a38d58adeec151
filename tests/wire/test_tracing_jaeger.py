"""`ordo run` exports its Task's trace to a real Jaeger (v2, built from its Go module by
scripts/build-jaeger) over OTLP/HTTP with the standard OpenTelemetry environment; the trace is
read back through Jaeger's query API: invoke_agent → chat, execute_tool, chat with the GenAI
attributes, in the trace of the Task's traceparent, and no canary anywhere in it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.jaeger import Jaeger, parent_id, tags, tree
from tests.support.openai_server import OpenAIServer
from tests.support.traced import traced_set
from tests.support.wire import calls, text

pytestmark = [pytest.mark.services, pytest.mark.slow]

KEY = "sk-canary-TRACE-KEY-9c1"
CANARY = "canary-TRACE-CONTENT-51d"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_SPAN = "b7ad6b7169203331"

ENDPOINT = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: model}
spec:
  provider: openai
  baseUrl: BASE_URL
  model: gpt-test
  credentials: {secretRef: {name: model-key, key: api-key}}
  retry: {maxAttempts: 2, backoff: 10ms}
"""


@pytest.fixture
def jaeger(tmp_path: Path) -> Iterator[Jaeger]:
    with Jaeger.start(tmp_path) as server:
        yield server


def test_ordo_run_exports_the_task_trace_to_jaeger(tmp_path: Path, jaeger: Jaeger) -> None:
    script = [calls(("lookup", {"query": f"{CANARY}-arguments"})), text(f"{CANARY}-answer")]
    with OpenAIServer(script, require_key=KEY) as model:
        folder = tmp_path / "set"
        folder.mkdir()
        (folder / "set.yaml").write_text(
            traced_set(
                ENDPOINT.replace("BASE_URL", model.url + "/v1"),
                canary=CANARY,
                trace_id=TRACE_ID,
                parent=PARENT_SPAN,
            )
        )
        env = {
            **os.environ,
            **jaeger.otel_env("ordo-run-test"),
            "ORDO_SECRET_MODEL_KEY_API_KEY": KEY,
        }
        done = subprocess.run(
            [sys.executable, "-m", "ordo.cli.main", "run", "-f", str(folder), "-q", "-o", "json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert document["status"]["traceId"] == TRACE_ID

    trace = jaeger.trace(TRACE_ID, spans=4)
    assert tree(trace) == {
        "invoke_agent researcher": ["chat gpt-test", "execute_tool lookup", "chat gpt-test"]
    }
    spans = {s["operationName"]: s for s in trace["spans"]}
    root = spans["invoke_agent researcher"]
    assert parent_id(root) == PARENT_SPAN  # joined the Task's traceparent
    assert all(s["traceID"] == TRACE_ID for s in trace["spans"])
    assert trace["processes"][root["processID"]]["serviceName"] == "ordo-run-test"

    root_tags = tags(root)
    assert root_tags["gen_ai.operation.name"] == "invoke_agent"
    assert root_tags["gen_ai.agent.name"] == "researcher"
    assert root_tags["gen_ai.provider.name"] == "openai"
    assert root_tags["ordo.task.reason"] == "Succeeded"

    chats = [s for s in trace["spans"] if s["operationName"] == "chat gpt-test"]
    for chat in chats:
        chat_tags = tags(chat)
        assert chat_tags["gen_ai.operation.name"] == "chat"
        assert chat_tags["gen_ai.provider.name"] == "openai"
        assert chat_tags["gen_ai.request.model"] == "gpt-test"
        assert chat_tags["gen_ai.response.model"] == "gpt-test"
        assert chat_tags["gen_ai.usage.input_tokens"] > 0
        assert chat_tags["gen_ai.usage.output_tokens"] > 0
        assert chat_tags["span.kind"] == "client"
        assert chat_tags["server.address"] == "127.0.0.1"
    reasons = sorted(str(tags(c)["gen_ai.response.finish_reasons"]) for c in chats)
    assert "stop" in reasons[0] and "tool_calls" in reasons[1]

    tool_tags = tags(spans["execute_tool lookup"])
    assert tool_tags["gen_ai.operation.name"] == "execute_tool"
    assert tool_tags["gen_ai.tool.name"] == "lookup"
    assert tool_tags["gen_ai.tool.call.id"] == document["status"]["toolCalls"][0]["callId"]
    assert tool_tags["ordo.tool.decision"] == "allowed"
    assert tool_tags["ordo.tool.outcome"] == "succeeded"

    everything = json.dumps(trace)
    assert CANARY not in everything
    assert KEY not in everything
