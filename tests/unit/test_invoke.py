"""`ordo invoke`: the parts that need no cluster (exit codes, arguments, input, kubeconfig
selection, progress lines). The command against a real API server: tests/cluster/test_invoke.py."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ordo.api.task import REASONS
from ordo.cli import invoke
from ordo.cli import main as cli


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["invoke", *argv])


def test_exit_codes_per_phase() -> None:
    assert invoke.exit_code("Succeeded") == 0
    assert invoke.exit_code("Failed") == 1
    assert invoke.exit_code("Cancelled") == 3
    # Anything unexpected is a failure, never success.
    assert invoke.exit_code(None) == 1
    assert invoke.exit_code("Running") == 1
    codes = {
        invoke.EXIT_SUCCEEDED,
        invoke.EXIT_FAILED,
        invoke.EXIT_USAGE,
        invoke.EXIT_CANCELLED,
        invoke.EXIT_TIMEOUT,
        invoke.EXIT_INTERRUPTED,
    }
    assert codes == {0, 1, 2, 3, 4, 130}


def test_help_documents_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse("--help")
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for code in (0, 1, 2, 3, 4, 130):
        assert f"\n  {code} " in text, code
    assert "cancel Task X? [y/N]" in text


def test_arguments_and_defaults() -> None:
    args = parse("research-agent")
    assert args.func is invoke.run
    assert (args.agent, args.wait, args.output, args.timeout, args.namespace) == (
        "research-agent",
        True,
        "text",
        None,
        None,
    )
    args = parse("a", "--no-wait", "-o", "json", "-n", "team", "--timeout", "5m", "-i", "hi")
    assert (args.wait, args.output, args.namespace, args.timeout, args.input) == (
        False,
        "json",
        "team",
        "5m",
        "hi",
    )
    assert parse("a", "-").stdin == "-"


@pytest.mark.parametrize(
    "argv", [("a", "-o", "table"), (), ("a", "b"), ("a", "--timeout")], ids=str
)
def test_usage_errors_exit_2(argv: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2


def test_input_sources(tmp_path: Path) -> None:
    stdin = io.StringIO("from stdin\n")
    assert invoke.read_input(parse("a"), stdin) is None
    assert invoke.read_input(parse("a", "--input", "hello"), stdin) == "hello"
    assert invoke.read_input(parse("a", "-"), stdin) == "from stdin\n"
    assert invoke.read_input(parse("a", "--input-file", "-"), io.StringIO("s")) == "s"
    file = tmp_path / "in.txt"
    file.write_text("from a file")
    assert invoke.read_input(parse("a", "--input-file", str(file)), stdin) == "from a file"
    with pytest.raises(invoke.InvokeError, match="once"):
        invoke.read_input(parse("a", "-", "--input", "x"), stdin)
    with pytest.raises(invoke.InvokeError, match="cannot read --input-file"):
        invoke.read_input(parse("a", "--input-file", str(tmp_path / "missing")), stdin)


def test_missing_input_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["invoke", "a", "--input-file", str(tmp_path / "missing")])
    assert code == 2
    assert "cannot read --input-file" in capsys.readouterr().err


def test_timeout_parsing() -> None:
    assert invoke.timeout_seconds(None) is None
    assert invoke.timeout_seconds("1s") == 1.0
    assert invoke.timeout_seconds("1m30s") == 90.0
    for bad in ("soon", "0s", "-1s"):
        with pytest.raises(invoke.InvokeError, match="--timeout"):
            invoke.timeout_seconds(bad)


def test_task_manifest_uses_generate_name() -> None:
    body = invoke.task_manifest("research-agent", "hi")
    assert body["metadata"] == {"generateName": "research-agent-"}
    assert body["spec"] == {"agentRef": "research-agent", "input": "hi"}
    assert "input" not in invoke.task_manifest("a", None)["spec"]
    long = "a" * 200
    assert len(invoke.task_manifest(long, None)["metadata"]["generateName"]) + 5 <= 64


def test_team_slash_name_invokes_a_team() -> None:
    body = invoke.task_manifest("team/review", "adopt ordo?")
    assert body["metadata"] == {"generateName": "review-"}
    assert body["spec"] == {"teamRef": "review", "input": "adopt ordo?"}


KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: one
contexts:
- name: one
  context: {cluster: c1, user: u1, namespace: team-one}
- name: two
  context: {cluster: c2, user: u2}
clusters:
- name: c1
  cluster: {server: "https://one.example:6443", certificate-authority: pki/ca.crt}
- name: c2
  cluster: {server: "https://two.example:6443", insecure-skip-tls-verify: true}
users:
- name: u1
  user: {client-certificate: pki/u1.crt, client-key: /abs/u1.key}
- name: u2
  user: {token: tok-two}
- name: u3
  user: {exec: {command: get-token}}
"""


def test_kubeconfig_context_selection(tmp_path: Path) -> None:
    file = tmp_path / "config"
    file.write_text(KUBECONFIG)
    one = invoke.kubeconfig_login([file], None)
    assert one.server == "https://one.example:6443"
    assert one.default_namespace == "team-one"
    # Relative paths are relative to the kubeconfig, as kubectl resolves them.
    assert one.ca_path == str(tmp_path / "pki" / "ca.crt")
    assert one.certificate_path == str(tmp_path / "pki" / "u1.crt")
    assert one.private_key_path == "/abs/u1.key"
    two = invoke.kubeconfig_login([file], "two")
    assert (two.server, two.token, two.insecure, two.default_namespace) == (
        "https://two.example:6443",
        "tok-two",
        True,
        None,
    )
    with pytest.raises(invoke.KubeconfigError, match="'three' not found"):
        invoke.kubeconfig_login([file], "three")


def test_kubeconfig_merge_first_file_wins_and_exec_refused(tmp_path: Path) -> None:
    first = tmp_path / "first"
    first.write_text(
        textwrap.dedent(
            """
            current-context: three
            contexts: [{name: three, context: {cluster: c2, user: u3}}]
            clusters: [{name: c2, cluster: {server: "https://first.example"}}]
            """
        )
    )
    second = tmp_path / "second"
    second.write_text(KUBECONFIG)
    with pytest.raises(invoke.KubeconfigError, match="exec credential plugin"):
        invoke.kubeconfig_login([first, second], None)
    merged = invoke.kubeconfig_login([first, second], "two")
    assert merged.server == "https://first.example"
    assert merged.token == "tok-two"


def test_missing_kubeconfig_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope"))
    assert cli.main(["invoke", "a"]) == 2
    assert "cannot read kubeconfig" in capsys.readouterr().err


def test_progress_lines_name_decisions_never_content() -> None:
    progress = invoke.Progress()
    assert progress.update({"phase": "Pending"}) == ["phase Pending"]
    assert progress.update({"phase": "Pending"}) == []
    running = {
        "phase": "Running",
        "step": 1,
        "toolCalls": [
            {"step": 1, "tool": "web-search", "decision": "allowed", "callId": "c1"},
            {
                "step": 1,
                "tool": "shell",
                "decision": "denied",
                "reason": "MissingPermission: tool:shell:invoke",
                "callId": "c2",
            },
        ],
    }
    assert progress.update(running) == [
        "phase Running",
        "step 1: tool web-search allowed",
        "step 1: tool shell denied (MissingPermission: tool:shell:invoke)",
        "step 1 done",
    ]
    running["toolCalls"][0]["outcome"] = "error"  # type: ignore[index]
    running["toolCalls"][0]["error"] = "HTTPStatus 503"  # type: ignore[index]
    assert progress.update(running) == ["step 1: tool web-search error (HTTPStatus 503)"]
    done = {**running, "phase": "Succeeded", "step": 2, "output": "CANARY-output"}
    lines = progress.update(done)
    assert lines == ["step 2 done"]
    assert not any("CANARY" in line for line in lines)


def test_summary_line() -> None:
    assert (
        invoke.summary(
            {"phase": "Succeeded", "reason": "Succeeded", "step": 2, "usage": {"totalTokens": 42}}
        )
        == "Succeeded (2 step(s), 42 tokens)"
    )
    failed = {"phase": "Failed", "reason": "MaxStepsExceeded", "message": "stopped after 1 step"}
    assert invoke.summary(failed) == "Failed: MaxStepsExceeded: stopped after 1 step (0 step(s))"
    assert "MaxStepsExceeded" in REASONS


def test_progress_lines_follow_child_tasks_never_their_content() -> None:
    progress = invoke.Progress()
    child = {"name": "report-3f9a0c21b4", "agent": "researcher", "callId": "c1"}
    waiting = {"phase": "Running", "children": [{**child, "phase": "Pending"}]}
    assert progress.update(waiting) == [
        "phase Running",
        "child task/report-3f9a0c21b4 (agent researcher): Pending",
    ]
    assert progress.update(waiting) == []
    running = {"phase": "Running", "children": [{**child, "phase": "Running"}]}
    assert progress.update(running) == ["child task/report-3f9a0c21b4 (agent researcher): Running"]
    asks = {
        "phase": "Running",
        "children": [{**child, "phase": "Running", "awaitingApproval": True}],
    }
    assert progress.update(asks) == [
        "child task/report-3f9a0c21b4 waits for an approval (ordo approvals report-3f9a0c21b4)"
    ]
    assert progress.update(asks) == []
    second = {"name": "report-77aa0c21b4", "agent": "critic", "phase": None}
    ended = {
        "phase": "Running",
        "output": "CANARY-output",
        "children": [
            {**child, "phase": "Failed", "reason": "ToolDenied", "tokens": 120},
            second,
            "not a child",
        ],
    }
    lines = progress.update(ended)
    assert lines == [
        "child task/report-3f9a0c21b4 (agent researcher): Failed: ToolDenied, 120 tokens",
        "child task/report-77aa0c21b4 (agent critic): Pending",
    ]
    assert not any("CANARY" in line for line in lines)


def test_the_final_summary_lists_the_children() -> None:
    assert invoke.children_summary({"phase": "Succeeded"}) == []
    assert invoke.children_summary({"phase": "Succeeded", "children": "garbage"}) == []
    status = {
        "phase": "Succeeded",
        "children": [
            {
                "name": "r-1",
                "agent": "researcher",
                "phase": "Succeeded",
                "reason": "Succeeded",
                "tokens": 80,
            },
            {"name": "r-2", "agent": "critic", "phase": "Cancelled", "reason": "Cancelled"},
        ],
    }
    assert invoke.children_summary(status) == [
        "  child task/r-1 (agent researcher): Succeeded, 80 tokens",
        "  child task/r-2 (agent critic): Cancelled",
    ]


def closed_stdin_invoke(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """`ordo invoke` with file descriptor 0 closed (a CI job, `<&-`): `sys.stdin` is None,
    against an API server that refuses connections."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        textwrap.dedent(
            """\
            apiVersion: v1
            kind: Config
            clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
            users: [{name: u, user: {token: t}}]
            contexts: [{name: x, context: {cluster: c, user: u, namespace: ns}}]
            current-context: x
            """
        )
    )
    return subprocess.run(
        [sys.executable, "-m", "ordo.cli.main", "invoke", *argv, "--kubeconfig", str(kubeconfig)],
        env={**os.environ, "CI": "true"},
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: os.close(0),
    )


def test_with_stdin_closed_it_runs_without_a_tty(tmp_path: Path) -> None:
    result = closed_stdin_invoke(tmp_path, "a")
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2 and "error: Kubernetes API" in result.stderr


def test_input_from_a_closed_stdin_is_a_usage_error(tmp_path: Path) -> None:
    result = closed_stdin_invoke(tmp_path, "a", "-")
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2 and "stdin is closed" in result.stderr
    with pytest.raises(invoke.InvokeError, match="stdin is closed"):
        invoke.read_input(parse("a", "--input-file", "-"), None)
