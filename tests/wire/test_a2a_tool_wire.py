"""The `a2a` Tool through `ordo run -f DIR`, against a remote agent built from the a2a-sdk's
own server classes (tests/support/a2a_agent.py) and a scripted OpenAI-compatible model: a call
succeeds with the remote answer; a remote failure is an error result the model sees; the
run's deadline cancels the remote task; an oversized answer is capped; the delegation chain
travels in the message metadata and a Task at the depth limit sends nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from tests.support.a2a_agent import RemoteAgentServer
from tests.support.openai_server import OpenAIServer
from tests.support.wire import calls, text

from ordo.tools.a2a import MAX_ANSWER_CHARS

MODEL = """\
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: model}}
spec: {{provider: openai-compatible, baseUrl: "{url}", model: gpt-test}}
"""


def documents(remote: str, *, timeout: str = "30s", agent_extra: str = "") -> list[str]:
    return [
        f"""\
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {{name: remote}}
spec: {{type: a2a, timeout: {timeout}, a2a: {{url: "{remote}"}}}}
""",
        f"""\
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: caller}}
spec: {{modelRef: model, tools: [remote]{agent_extra}}}
""",
        """\
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {name: root}
spec: {agentRef: caller, input: "Q"}
""",
    ]


def run(tmp_path: Path, model: OpenAIServer, docs: list[str]) -> dict[str, Any]:
    folder = tmp_path / "set"
    folder.mkdir(exist_ok=True)
    (folder / "set.yaml").write_text("---\n".join((MODEL.format(url=model.url + "/v1"), *docs)))
    done = subprocess.run(
        [sys.executable, "-m", "ordo.cli.main", "run", "-q", "-f", str(folder)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=120,
    )
    tasks = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert tasks, done.stderr[-3000:]
    return tasks[0]


def tool_message(bodies: list[dict[str, Any]]) -> str:
    """The tool result the model saw in its second call."""
    messages = bodies[1]["messages"]
    return next(m["content"] for m in messages if m.get("role") == "tool")


def test_a_call_gets_the_remote_answer(tmp_path: Path) -> None:
    script = {"Q": [calls(("remote", {"input": "ECHO hello"})), text("done")]}
    with RemoteAgentServer() as remote, OpenAIServer(script) as model:
        task = run(tmp_path, model, documents(remote.url))
        bodies = model.bodies
        sends, metadata = list(remote.sends), list(remote.metadata)
    assert task["status"]["phase"] == "Succeeded", task["status"]
    assert tool_message(bodies) == "echo: hello"
    assert len(sends) == 1
    assert metadata == [{"ordo.dev/delegation-chain": ["caller"]}]
    record = task["status"]["toolCalls"][0]
    assert (record["tool"], record["outcome"]) == ("remote", "succeeded")


def test_a_remote_failure_is_an_error_result(tmp_path: Path) -> None:
    script = {"Q": [calls(("remote", {"input": "FAIL"})), text("done")]}
    with RemoteAgentServer() as remote, OpenAIServer(script) as model:
        task = run(tmp_path, model, documents(remote.url))
        bodies = model.bodies
    seen = tool_message(bodies)
    assert "ended failed" in seen and "remote trouble" in seen
    record = task["status"]["toolCalls"][0]
    assert (record["outcome"], record["error"]) == ("error", "Remote failed")


def test_an_oversized_answer_is_capped(tmp_path: Path) -> None:
    script = {"Q": [calls(("remote", {"input": f"BIG {MAX_ANSWER_CHARS * 2}"})), text("done")]}
    with RemoteAgentServer() as remote, OpenAIServer(script) as model:
        task = run(tmp_path, model, documents(remote.url))
        bodies = model.bodies
    seen = tool_message(bodies)
    assert task["status"]["phase"] == "Succeeded"
    assert seen.startswith("x" * 100) and seen.endswith("characters]")
    assert len(seen) < MAX_ANSWER_CHARS + 200


def test_the_tools_timeout_cancels_the_remote_task(tmp_path: Path) -> None:
    script = {"Q": [calls(("remote", {"input": "SLOW"})), text("done")]}
    with RemoteAgentServer() as remote, OpenAIServer(script) as model:
        task = run(tmp_path, model, documents(remote.url, timeout="2s"))
        bodies = model.bodies
        cancels = list(remote.cancels)
    assert "did not finish within 2s (cancelled)" in tool_message(bodies)
    assert len(cancels) == 1
    assert task["status"]["toolCalls"][0]["error"] == "Timeout"


def test_the_runs_deadline_cancels_the_remote_task(tmp_path: Path) -> None:
    script = {"Q": [calls(("remote", {"input": "SLOW"})), text("done")]}
    limits = ", limits: {timeout: 3s}"
    with RemoteAgentServer() as remote, OpenAIServer(script) as model:
        task = run(tmp_path, model, documents(remote.url, timeout="10m", agent_extra=limits))
        cancels = list(remote.cancels)
    assert (task["status"]["phase"], task["status"]["reason"]) == ("Failed", "Timeout")
    assert len(cancels) == 1


def test_a_task_at_the_depth_limit_sends_nothing(tmp_path: Path) -> None:
    policy = """\
apiVersion: ordo.dev/v1alpha1
kind: AgentPolicy
metadata: {name: flat}
spec: {maxDelegationDepth: 0}
"""
    script = {"Q": [calls(("remote", {"input": "ECHO hello"})), text("done")]}
    with RemoteAgentServer() as remote, OpenAIServer(script) as model:
        task = run(tmp_path, model, [*documents(remote.url), policy])
        bodies = model.bodies
        sends = list(remote.sends)
    assert sends == []
    assert "delegation depth 0" in tool_message(bodies)
    assert task["status"]["toolCalls"][0]["error"] == "DelegationDepthExceeded"
    assert json.dumps(task["status"]).count("echo") == 0


async def test_the_call_is_a_client_span_whose_traceparent_the_remote_receives() -> None:
    from opentelemetry.trace import SpanKind
    from tests.support import engine_fakes as fakes
    from tests.support.traced import recorded_spans

    from ordo.runtime import execute

    with RemoteAgentServer() as remote, recorded_spans() as exporter:
        objects = fakes.DictStore(
            fakes.agent("boss", tools=["remote"]),
            fakes.mock_endpoint(),
            fakes.obj("Tool", "remote", {"type": "a2a", "a2a": {"url": remote.url}}),
        )
        turn = fakes.tools_turn(fakes.call("remote", "c1", input="ECHO traced"))
        outcome = await execute(
            fakes.task(agentRef="boss"),
            objects,
            model_factory=fakes.ModelFactory(lambda snapshot: fakes.ScriptedModel([turn])),
        )
        posts = list(remote.headers)
    assert outcome.phase == "Succeeded", outcome.message
    spans = {s.name: s for s in exporter.get_finished_spans()}
    client, tool = spans["invoke_agent remote"], spans["execute_tool remote"]
    assert client.kind == SpanKind.CLIENT
    assert client.parent is not None and client.parent.span_id == tool.context.span_id
    assert client.attributes is not None and client.attributes["server.address"] == "127.0.0.1"
    sent = posts[0]["traceparent"].split("-")
    assert (sent[1], sent[2]) == (
        format(client.context.trace_id, "032x"),
        format(client.context.span_id, "016x"),
    )


def test_a_card_naming_another_origin_gets_nothing_sent(tmp_path: Path) -> None:
    """The card is read from `localhost`, its endpoint is on `127.0.0.1`: another origin, so
    neither the message nor a credential goes there."""
    script = {"Q": [calls(("remote", {"input": "ECHO hello"})), text("done")]}
    with RemoteAgentServer() as remote, OpenAIServer(script) as model:
        elsewhere = remote.url.replace("127.0.0.1", "localhost")
        task = run(tmp_path, model, documents(elsewhere))
        bodies = model.bodies
        posts = list(remote.headers)
    assert posts == []
    assert "could not be reached" in tool_message(bodies)
    assert task["status"]["toolCalls"][0]["outcome"] == "error"
