"""Trees of Tasks through `ordo run -f DIR` (issue 27 §6), as a subprocess against a scripted
OpenAI-compatible server on 127.0.0.1: a parent delegating to a child Succeeds with the child's
answer in its history and the child's tokens in its usage; a cycle A -> B -> A is denied
`DelegationCycle` and no third Task runs; a chain deeper than the policy allows is denied
`DelegationDepthExceeded`; a parent whose budget its child exhausts ends `TokenBudgetExceeded`,
as does the child. Every Task that ran is printed, children included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from tests.support.openai_server import OpenAIServer
from tests.support.wire import calls, text

from ordo.engine.delegation import PARENT_LABEL

MODEL = """\
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: model}}
spec: {{provider: openai-compatible, baseUrl: "{url}", model: gpt-test}}
"""


def agent_tool(name: str, target: str) -> str:
    return f"""\
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {{name: {name}}}
spec: {{type: agent, agent: {{ref: {target}}}}}
"""


def agent(name: str, *tools: str, max_tokens: int | None = None) -> str:
    limits = f", limits: {{maxTokens: {max_tokens}}}" if max_tokens else ""
    return f"""\
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: {name}}}
spec: {{modelRef: model, tools: [{", ".join(tools)}]{limits}}}
"""


def task(name: str, agent_name: str, marker: str) -> str:
    return f"""\
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: {name}}}
spec: {{agentRef: {agent_name}, input: "{marker}"}}
"""


def run(
    tmp_path: Path, model: OpenAIServer, *documents: str, quiet: bool = True
) -> subprocess.CompletedProcess[str]:
    """`ordo run` on `documents` and a ModelEndpoint of `model`."""
    folder = tmp_path / "set"
    folder.mkdir(exist_ok=True)
    endpoint = MODEL.format(url=model.url + "/v1")
    (folder / "set.yaml").write_text("---\n".join((endpoint, *documents)))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ordo.cli.main",
            "run",
            *(["-q"] if quiet else []),
            "-f",
            str(folder),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=120,
    )


def tasks(done: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"input_tokens": input_tokens, "output_tokens": output_tokens}


def test_a_parent_gets_its_childs_answer_and_tokens(tmp_path: Path) -> None:
    script = {
        "PARENT-Q": [
            {**calls(("ask-child", {"input": "CHILD-Q"})), "usage": usage(10, 5)},
            {**text("the parent's summary"), "usage": usage(20, 5)},
        ],
        "CHILD-Q": [{**text("CHILD-ANSWER-42"), "usage": usage(7, 3)}],
    }
    with OpenAIServer(script) as model:
        done = run(
            tmp_path,
            model,
            agent_tool("ask-child", "child"),
            agent("parent", "ask-child"),
            agent("child"),
            task("root", "parent", "PARENT-Q"),
            quiet=False,
        )
        bodies = model.bodies
    assert done.returncode == 0, done.stderr[-3000:]
    parent, child = tasks(done)
    assert parent["metadata"]["name"] == "root"
    assert child["metadata"]["labels"][PARENT_LABEL] == "root"
    assert child["spec"]["input"] == "CHILD-Q"
    assert (child["status"]["phase"], child["status"]["output"]) == (
        "Succeeded",
        "CHILD-ANSWER-42",
    )
    status = parent["status"]
    assert (status["phase"], status["output"]) == ("Succeeded", "the parent's summary")
    assert status["usage"]["totalTokens"] == 15 + 25 + 10  # its own two calls and the child's
    assert status["children"] == [
        {
            "name": child["metadata"]["name"],
            "agent": "child",
            "callId": status["toolCalls"][0]["callId"],
            "phase": "Succeeded",
            "reason": "Succeeded",
            "tokens": 10,
        }
    ]
    # the child's answer is in the parent's history: its second model call carries it
    assert len(bodies) == 3
    last = bodies[-1]["messages"]
    assert any(m.get("role") == "tool" and "CHILD-ANSWER-42" in json.dumps(m) for m in last)
    # the tree on stderr: the child under its parent
    assert "└" in done.stderr and "child" in done.stderr


def test_a_cycle_is_denied_and_no_third_task_runs(tmp_path: Path) -> None:
    script = {
        "A-Q": [calls(("ask-b", {"input": "B-Q"})), text("a is done")],
        "B-Q": [calls(("ask-a", {"input": "A-AGAIN"})), text("never")],
    }
    with OpenAIServer(script) as model:
        done = run(
            tmp_path,
            model,
            agent_tool("ask-a", "a"),
            agent_tool("ask-b", "b"),
            agent("a", "ask-b"),
            agent("b", "ask-a"),
            task("root", "a", "A-Q"),
        )
        requests = model.count
    assert done.returncode == 0, done.stderr[-3000:]
    ran = tasks(done)
    assert len(ran) == 2  # the root and b: never a third Task
    root, b = ran
    assert (b["status"]["phase"], b["status"]["reason"]) == ("Failed", "DelegationCycle")
    assert "a -> b -> a" in b["status"]["message"]
    assert root["status"]["phase"] == "Succeeded"
    assert root["status"]["children"][0]["reason"] == "DelegationCycle"
    assert root["status"]["toolCalls"][0]["error"] == "ChildFailed: DelegationCycle"
    assert requests == 3  # a twice, b once


def test_a_chain_deeper_than_the_policy_allows_is_denied(tmp_path: Path) -> None:
    script = {
        "A-Q": [calls(("ask-b", {"input": "B-Q"})), text("a is done")],
        "B-Q": [calls(("ask-c", {"input": "C-Q"})), text("never")],
    }
    policy = """\
apiVersion: ordo.dev/v1alpha1
kind: AgentPolicy
metadata: {name: shallow}
spec: {maxDelegationDepth: 1}
"""
    with OpenAIServer(script) as model:
        done = run(
            tmp_path,
            model,
            policy,
            agent_tool("ask-b", "b"),
            agent_tool("ask-c", "c"),
            agent("a", "ask-b"),
            agent("b", "ask-c"),
            agent("c"),
            task("root", "a", "A-Q"),
        )
    assert done.returncode == 0, done.stderr[-3000:]
    ran = tasks(done)
    assert [t["spec"]["agentRef"] for t in ran] == ["a", "b"]
    b = ran[1]["status"]
    assert (b["phase"], b["reason"]) == ("Failed", "DelegationDepthExceeded")
    assert "depth 1, the limit is 1" in b["message"]


def test_a_budget_exhausted_by_the_child_ends_both(tmp_path: Path) -> None:
    script = {
        "A-Q": [{**calls(("ask-b", {"input": "B-Q"})), "usage": usage(15, 5)}, text("never")],
        "B-Q": [{**text("an expensive answer"), "usage": usage(150, 50)}],
    }
    with OpenAIServer(script) as model:
        done = run(
            tmp_path,
            model,
            agent_tool("ask-b", "b"),
            agent("a", "ask-b", max_tokens=100),
            agent("b"),
            task("root", "a", "A-Q"),
        )
        requests = model.count
    assert done.returncode == 1, done.stderr[-3000:]
    root, child = tasks(done)
    assert child["spec"]["limits"]["maxTokens"] == 100 - 20
    assert (child["status"]["phase"], child["status"]["reason"]) == (
        "Failed",
        "TokenBudgetExceeded",
    )
    assert (root["status"]["phase"], root["status"]["reason"]) == (
        "Failed",
        "TokenBudgetExceeded",
    )
    assert root["status"]["usage"]["totalTokens"] == 20 + 200
    assert requests == 2  # the parent never called its model again
