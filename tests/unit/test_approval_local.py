"""`ordo run` and approvals (issue 16 §3): `--approve-all`, `--reject-all`, and without a
terminal and without a flag the call is rejected with a reason that says how to decide; a
terminal prompt shows the call's arguments and takes y/N."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from ordo.api.manifests import load
from ordo.cli.local import run_tasks
from ordo.cli.localapproval import NO_TERMINAL, LocalApprover, mode_for
from ordo.cli.main import main
from ordo.engine.approvals import args_digest
from support.engine_fakes import agent, mock_endpoint, mock_tool, task_body, turn_calls

DEPLOY = {"env": "prod-canary-31"}


def manifests(tmp_path: Path) -> Path:
    docs: list[dict[str, Any]] = [
        agent(tools=["deploy"]),
        mock_endpoint(turns=[turn_calls(("deploy", DEPLOY)), {"text": "deployed"}]),
        mock_tool("deploy", result="done", approval={"required": True}),
        task_body(),
    ]
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    code = main(["run", "-q", *args])
    out, err = capsys.readouterr()
    return code, yaml.safe_load(out)["status"], err


def test_approve_all_runs_the_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, status, _ = run(capsys, "--approve-all", "-f", str(manifests(tmp_path)))
    assert (code, status["phase"]) == (0, "Succeeded")
    (record,) = status["toolCalls"]
    assert (record["decision"], record["outcome"]) == ("allowed", "succeeded")
    assert record["reason"] == "Approved: ordo run --approve-all"


def test_reject_all_fails_the_task(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, status, _ = run(capsys, "--reject-all", "-f", str(manifests(tmp_path)))
    assert (code, status["phase"], status["reason"]) == (1, "Failed", "ApprovalRejected")
    (record,) = status["toolCalls"]
    assert (record["decision"], record["outcome"]) == ("denied", "skipped")


def test_no_terminal_and_no_flag_rejects_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # pytest's stdin is not a terminal
    code, status, err = run(capsys, "-f", str(manifests(tmp_path)))
    assert (code, status["reason"]) == (1, "ApprovalRejected")
    assert NO_TERMINAL in status["toolCalls"][0]["reason"]
    assert "--approve-all" in err


def test_the_flags_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--approve-all", "--reject-all", "-f", "x.yaml"])


def test_mode_for() -> None:
    assert mode_for(True, False, False) == "approve"
    assert mode_for(False, True, True) == "reject"
    assert mode_for(False, False, True) == "prompt"
    assert mode_for(False, False, False) == "none"


@pytest.mark.parametrize(("reply", "phase"), [("y\n", "Succeeded"), ("\n", "Failed")])
async def test_the_prompt_shows_the_arguments_and_takes_y_or_n(
    tmp_path: Path, reply: str, phase: str
) -> None:
    asked: list[str] = []

    def ask(question: str) -> str:
        asked.append(question)
        return reply

    approver = LocalApprover("prompt", ask=ask, out=io.StringIO())
    ((_, outcome),) = await run_tasks(load([str(manifests(tmp_path))]), approver=approver)
    assert outcome.phase == phase
    (question,) = asked
    assert "deploy" in question and DEPLOY["env"] in question and "[y/N]" in question
    assert f"digest: {args_digest(DEPLOY)}" in question  # as `ordo approvals` shows it


@pytest.mark.parametrize("decide", ["--approve-all", "--reject-all", None])
@pytest.mark.parametrize("output", ["yaml", "json"])
@pytest.mark.parametrize("quiet", [True, False])
def test_the_arguments_of_a_gated_call_never_reach_the_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], decide: str | None, output: str, quiet: bool
) -> None:
    # Only the terminal prompt shows them (documented); not the flags, the no-terminal note,
    # the live progress (stderr) or the final Task document (stdout).
    args = ["run", "-o", output, "-f", str(manifests(tmp_path))]
    args += ["-q"] if quiet else []
    args += [decide] if decide else []
    code = main(args)
    out, err = capsys.readouterr()
    doc = yaml.safe_load(out)  # JSON is YAML
    assert code == (0 if decide == "--approve-all" else 1)
    assert doc["status"]["toolCalls"][0]["callId"]
    for shown in (out, err):
        assert DEPLOY["env"] not in shown
        assert "prod-canary" not in shown
