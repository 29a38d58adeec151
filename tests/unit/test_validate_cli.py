"""`ordo validate` as a platform engineer first meets it: several files after one `-f`,
folders with a kustomization, the same object defined twice, a Task's skill its Agent lacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from ordo.api import manifests
from ordo.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart" / "agent.yaml"

ENDPOINT = """\
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata:
  name: m
spec:
  provider: mock
  model: {model}
  mock:
    turns: [{{text: hi}}]
"""

AGENT = """\
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata:
  name: a
spec:
  modelRef: m
  skills:
    - name: triage
      instructions: Sort the ticket.
"""

TASK = """\
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata:
  name: t
spec:
  agentRef: a
  input: hello
  skill: {skill}
"""


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _validate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["validate", *argv])
    return code, capsys.readouterr().err


def test_several_paths_after_one_f(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    endpoint = _write(tmp_path, "endpoint.yaml", ENDPOINT.format(model="one"))
    agent = _write(tmp_path, "agent.yaml", AGENT)
    code, err = _validate(capsys, "-f", str(endpoint), str(agent))
    assert code == 0, err
    assert "2 object(s) valid" in err
    # Mixed with repeated -f, every path counts.
    task = _write(tmp_path, "task.yaml", TASK.format(skill="triage"))
    code, err = _validate(capsys, "-f", str(endpoint), str(agent), "-f", str(task))
    assert code == 0, err
    assert "3 object(s) valid" in err


def test_kustomization_folder_reads_its_resources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, "base/endpoint.yaml", ENDPOINT.format(model="one"))
    _write(tmp_path, "base/agents/agent.yaml", AGENT)
    _write(tmp_path, "base/agents/kustomization.yaml", "resources:\n- agent.yaml\n")
    _write(tmp_path, "base/not-listed.yaml", "kind: Nonsense\n")
    _write(
        tmp_path,
        "base/kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        "namespace: team-a\nresources:\n- endpoint.yaml\n- agents\n"
        "- https://github.com/example/remote//base\n",
    )
    code, err = _validate(capsys, "-f", str(tmp_path / "base"))
    assert "unknown kind" not in err
    assert "Nonsense" not in err  # not in resources: not read, as kustomize would not
    assert "2 object(s) valid, 0 error(s)" in err, err
    assert "namespace not applied" in err
    assert "remote resource" in err
    assert code == 0


def test_kustomization_without_kind_is_never_an_ordo_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The common minimal kustomization has neither apiVersion nor kind.
    _write(tmp_path, "app/agent.yaml", AGENT)
    _write(tmp_path, "app/endpoint.yaml", ENDPOINT.format(model="one"))
    _write(tmp_path, "app/kustomization.yaml", "resources:\n  - agent.yaml\n  - endpoint.yaml\n")
    code, err = _validate(capsys, "-f", str(tmp_path))
    assert code == 0, err
    assert "None" not in err
    assert "2 object(s) valid" in err
    # A kustomization naming a file that is not there is an error naming the entry.
    _write(tmp_path, "app/kustomization.yaml", "resources:\n  - agent.yaml\n  - gone.yaml\n")
    code, err = _validate(capsys, "-f", str(tmp_path / "app"))
    assert code == 1
    assert "'gone.yaml': no such file or folder" in err


def test_the_repositorys_own_kustomize_base_validates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, err = _validate(capsys, "-f", str(ROOT / "manifests" / "base"))
    assert "unknown kind" not in err
    assert "Kustomization/" not in err  # read as the list of resources, not as an object
    assert "labels, images not applied" in err
    assert code == 0, err


def test_same_object_twice_differently_is_an_error_naming_both_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = _write(tmp_path, "one.yaml", ENDPOINT.format(model="one"))
    two = _write(tmp_path, "two.yaml", ENDPOINT.format(model="two"))
    code, err = _validate(capsys, "-f", str(one), str(two))
    assert code == 1
    assert "ModelEndpoint default/m is defined twice" in err
    assert str(one) in err and str(two) in err
    # `ordo run` refuses it as well (it used to run with whichever came last).
    mset = manifests.load([str(one), str(two)])
    assert mset.errors


def test_same_object_twice_identically_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = _write(tmp_path, "one.yaml", ENDPOINT.format(model="one"))
    two = _write(tmp_path, "two.yaml", ENDPOINT.format(model="one"))
    code, err = _validate(capsys, "-f", str(one), str(two))
    assert code == 0, err
    assert "defined twice" not in err
    # The same file given twice is read once.
    code, err = _validate(capsys, "-f", str(one), str(one))
    assert code == 0
    assert "1 object(s) valid" in err


def test_task_skill_is_checked_against_its_agent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, "endpoint.yaml", ENDPOINT.format(model="one"))
    _write(tmp_path, "agent.yaml", AGENT)
    _write(tmp_path, "task.yaml", TASK.format(skill="summarise"))
    code, err = _validate(capsys, "-f", str(tmp_path))
    assert code == 1
    assert "spec.skill: Agent 'a' has no skill 'summarise' (its skills: triage)" in err
    _write(tmp_path, "task.yaml", TASK.format(skill="triage"))
    code, err = _validate(capsys, "-f", str(tmp_path))
    assert code == 0, err


def test_examples_still_validate(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _validate(capsys, "-f", str(QUICKSTART), str(ROOT / "examples" / "governance"))
    assert code == 0, err


def _delegating_agent(name: str, *tools: str) -> str:
    listed = ", ".join(tools)
    return f"""\
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata:
  name: {name}
spec:
  modelRef: m
  tools: [{listed}]
"""


def _agent_tool(name: str, target: str) -> str:
    return f"""\
apiVersion: ordo.dev/v1alpha1
kind: Tool
metadata:
  name: {name}
spec:
  type: agent
  agent: {{ref: {target}}}
"""


def test_an_agent_tool_naming_no_agent_in_the_set_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, "endpoint.yaml", ENDPOINT.format(model="one"))
    _write(tmp_path, "writer.yaml", _delegating_agent("writer", "ask-researcher"))
    _write(tmp_path, "tool.yaml", _agent_tool("ask-researcher", "researcher"))
    code, err = _validate(capsys, "-f", str(tmp_path))
    assert code == 0, err
    assert (
        "warning: " in err
        and "Tool/ask-researcher: spec.agent.ref: Agent 'researcher' is not in the given manifests"
        in err
    )
    _write(tmp_path, "researcher.yaml", _delegating_agent("researcher"))
    code, err = _validate(capsys, "-f", str(tmp_path))
    assert code == 0 and "researcher' is not in" not in err, err


def test_agents_that_delegate_in_a_cycle_are_a_warning_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, "endpoint.yaml", ENDPOINT.format(model="one"))
    _write(tmp_path, "a.yaml", _delegating_agent("a", "ask-b"))
    _write(tmp_path, "b.yaml", _delegating_agent("b", "ask-c"))
    _write(tmp_path, "c.yaml", _delegating_agent("c"))
    _write(tmp_path, "tools.yaml", _agent_tool("ask-b", "b") + "---\n" + _agent_tool("ask-c", "c"))
    code, err = _validate(capsys, "-f", str(tmp_path))
    assert code == 0 and "cycle" not in err, err  # a chain is not a cycle
    # c delegates back to a: one warning, on the first Agent, naming the whole cycle.
    _write(tmp_path, "c.yaml", _delegating_agent("c", "ask-a"))
    _write(tmp_path, "tool-a.yaml", _agent_tool("ask-a", "a"))
    code, err = _validate(capsys, "-f", str(tmp_path))
    assert code == 0, err
    assert err.count("delegate in a cycle") == 1, err
    assert (
        "Agent/a: spec.tools[0]: Agents delegate in a cycle: a -> b -> c -> a "
        "(through the agent Tools ask-b, ask-c, ask-a)" in err
    )


def test_an_agent_delegating_to_itself_is_a_cycle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, "endpoint.yaml", ENDPOINT.format(model="one"))
    _write(tmp_path, "a.yaml", _delegating_agent("a", "ask-b", "ask-a"))
    _write(tmp_path, "b.yaml", _delegating_agent("b"))
    _write(tmp_path, "tools.yaml", _agent_tool("ask-a", "a") + "---\n" + _agent_tool("ask-b", "b"))
    (problem,) = manifests.check_delegation_cycles(manifests.load([str(tmp_path)]))
    assert problem.severity == "warning" and problem.field == "spec.tools[1]"
    assert "a -> a (through the agent Tools ask-a)" in problem.message
