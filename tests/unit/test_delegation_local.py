"""examples/delegation through `ordo run -f` (issue 27 §6), offline: the parent Succeeds with
its child's answer, counts the child's tokens, and both Tasks are printed, the child after its
parent with the labels and limits of a child Task; cancelling the run (Ctrl-C) cancels the
children too."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from ordo.api import manifests
from ordo.cli.local import RunInterrupted, run_tasks
from ordo.cli.localtree import Tree
from ordo.cli.main import main
from ordo.engine.delegation import CHAIN_ANNOTATION, PARENT_LABEL, ROOT_LABEL

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "delegation"


def test_the_delegation_example_runs_the_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "-q", "-f", str(EXAMPLE)]) == 0
    parent, child = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]
    status = parent["status"]
    assert (parent["metadata"]["name"], status["phase"], status["step"]) == (
        "summarise-operators",
        "Succeeded",
        2,
    )
    meta = child["metadata"]
    assert meta["labels"][PARENT_LABEL] == meta["labels"][ROOT_LABEL] == "summarise-operators"
    assert meta["annotations"][CHAIN_ANNOTATION] == '["editor", "researcher"]'
    assert meta["ownerReferences"][0]["name"] == "summarise-operators"
    assert child["spec"]["agentRef"] == "researcher"
    assert child["spec"]["limits"]["maxTokens"] < 20000
    assert child["status"]["phase"] == "Succeeded"
    child_tokens = child["status"]["usage"]["totalTokens"]
    (listed,) = status["children"]
    assert (listed["name"], listed["phase"], listed["tokens"]) == (
        meta["name"],
        "Succeeded",
        child_tokens,
    )
    own = status["usage"]["totalTokens"] - child_tokens
    assert own > 0  # the parent's usage is its own and its child's
    assert status["toolCalls"][0]["outcome"] == "succeeded"


SLOW_CHILD = """\
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: parent-model}
spec:
  provider: mock
  mock: {turns: [{toolCalls: [{tool: ask-slow, arguments: {input: wait}}]}]}
---
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: slow-model}
spec:
  provider: mock
  mock: {turns: [{delay: 600s, text: too late}]}
---
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata: {name: ask-slow}
spec: {type: agent, agent: {ref: slow}}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: boss}
spec: {modelRef: parent-model, tools: [ask-slow]}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: slow}
spec: {modelRef: slow-model}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {name: top}
spec: {agentRef: boss, input: go}
"""


async def test_cancelling_ordo_run_cancels_the_children_too(tmp_path: Path) -> None:
    (tmp_path / "set.yaml").write_text(SLOW_CHILD)
    tree = Tree()
    job = asyncio.create_task(run_tasks(manifests.load([str(tmp_path)]), environ={}, tree=tree))
    while not (len(tree.rows) == 2 and tree.rows[1].phase == "Running"):
        assert not job.done(), job
        await asyncio.sleep(0.01)  # until the child's model call is under way
    job.cancel()
    with pytest.raises(RunInterrupted) as caught:
        await job
    assert (caught.value.running, caught.value.finished) == (["top", tree.rows[1].name], [])
    assert tree.outcomes == {}  # neither ran to an end


async def test_the_childs_run_span_nests_under_the_parents_execute_tool_span() -> None:
    from tests.support.traced import recorded_spans

    with recorded_spans() as exporter:
        ran = await run_tasks(manifests.load([str(EXAMPLE)]), environ={})
    spans = {s.name: s for s in exporter.get_finished_spans()}
    parent = spans["invoke_agent editor"]
    tool = spans["execute_tool ask-researcher"]
    child = spans["invoke_agent researcher"]
    assert tool.parent is not None and tool.parent.span_id == parent.context.span_id
    assert child.parent is not None and child.parent.span_id == tool.context.span_id
    assert child.context.trace_id == parent.context.trace_id
    (_, top), (child_task, _) = ran
    assert top.trace_id == format(parent.context.trace_id, "032x")
    annotation = (child_task.metadata.annotations or {})["ordo.dev/traceparent"]
    assert annotation.split("-")[2] == format(tool.context.span_id, "016x")
