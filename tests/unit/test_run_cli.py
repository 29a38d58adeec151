"""`ordo run -f`: the examples give their documented phases and reasons, offline."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from ordo.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run(
    capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, dict[str, dict[str, Any]], str]:
    """Run `ordo run ARGS`; the exit code, the printed Tasks by name, and stderr."""
    code = main(["run", *args])
    out, err = capsys.readouterr()
    docs = [d for d in yaml.safe_load_all(out) if d] if out.strip() else []
    return code, {d["metadata"]["name"]: d for d in docs}, err


def test_quickstart_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    code, tasks, _ = run(capsys, "-q", "-f", str(EXAMPLES / "quickstart"))
    assert code == 0
    (doc,) = tasks.values()
    assert doc["kind"] == "Task"
    status = doc["status"]
    assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded")
    assert status["step"] == 2
    assert status["output"]
    assert (
        status["usage"]["totalTokens"]
        == status["usage"]["inputTokens"] + status["usage"]["outputTokens"]
        > 0
    )
    assert [(r["tool"], r["decision"], r["outcome"]) for r in status["toolCalls"]] == [
        ("web-search", "allowed", "succeeded")
    ]


def test_quickstart_with_live_progress_keeps_stdout_pure_yaml(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, tasks, err = run(capsys, "-f", str(EXAMPLES / "quickstart"))
    assert code == 0
    assert tasks["research-operators"]["status"]["phase"] == "Succeeded"
    assert "research-operators" in err  # the live table went to stderr


def test_quickstart_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "-q", "-o", "json", "-f", str(EXAMPLES / "quickstart")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"]["phase"] == "Succeeded"


def test_governance_example_is_tool_denied(capsys: pytest.CaptureFixture[str]) -> None:
    code, tasks, _ = run(capsys, "-q", "-f", str(EXAMPLES / "governance"))
    assert code == 1
    assert set(tasks) == {"intern-cleanup", "auditor-cleanup"}
    for doc in tasks.values():
        assert (doc["status"]["phase"], doc["status"]["reason"]) == ("Failed", "ToolDenied")
    intern = tasks["intern-cleanup"]["status"]
    assert intern["step"] == 1
    assert [(r["tool"], r["decision"], r["reason"]) for r in intern["toolCalls"]] == [
        ("delete-records", "denied", "BlockedByPolicy: interns-no-deletes")
    ]
    auditor = tasks["auditor-cleanup"]["status"]
    assert auditor["step"] == 2
    (read, delete) = auditor["toolCalls"]
    assert (read["tool"], read["decision"], read["step"]) == ("read-records", "allowed", 1)
    assert (delete["tool"], delete["decision"], delete["step"]) == ("delete-records", "denied", 2)
    assert delete["reason"].startswith("MissingPermission:")
    assert (
        "tool:delete-records:invoke" in delete["reason"]
        and "delete-records-invoke" in delete["reason"]
    )
    for doc in tasks.values():
        assert all(
            r["tool"] != "delete-records" or r["outcome"] == "skipped"
            for r in doc["status"]["toolCalls"]
        )


def test_structured_output_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, tasks, _ = run(capsys, "-q", "-f", str(EXAMPLES / "structured-output"))
    assert code == 1  # one of the two Tasks is meant to fail
    ok = tasks["triage-ticket-1042"]["status"]
    assert (ok["phase"], ok["reason"], ok["step"]) == ("Succeeded", "Succeeded", 1)
    assert ok["structuredOutput"] == {
        "category": "billing",
        "priority": "high",
        "summary": "Customer was charged twice for the March invoice.",
        "needsHuman": True,
    }
    bad = tasks["triage-ticket-1042-with-assignee"]["status"]
    assert (bad["phase"], bad["reason"]) == ("Failed", "InvalidOutput")
    assert "structuredOutput" not in bad
    assert "assignee" in bad["message"]
    assert "charged twice" not in bad["message"]  # no model text in the message
    assert bad["output"]  # the raw answer is kept for debugging


# --------------------------------------------------------------------------------------
# Temp-dir manifests: secrets, errors, exit codes

ENDPOINT_WITH_SECRET = """
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {name: keyed}
spec:
  provider: mock
  credentials: {secretRef: {name: model-key, key: api-key}}
  mock:
    turns: [{text: hello}]
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {name: a}
spec: {modelRef: keyed}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {name: t}
spec: {agentRef: a, input: hi}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_secret_missing_is_secret_not_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ORDO_SECRET_MODEL_KEY_API_KEY", raising=False)
    write(tmp_path, "all.yaml", ENDPOINT_WITH_SECRET)
    code, tasks, _ = run(capsys, "-q", "-f", str(tmp_path))
    assert code == 1
    status = tasks["t"]["status"]
    assert (status["phase"], status["reason"], status["step"]) == ("Failed", "SecretNotFound", 0)


def test_secret_from_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORDO_SECRET_MODEL_KEY_API_KEY", "sk-from-env")
    write(tmp_path, "all.yaml", ENDPOINT_WITH_SECRET)
    code, tasks, _ = run(capsys, "-q", "-f", str(tmp_path))
    assert code == 0
    assert tasks["t"]["status"]["phase"] == "Succeeded"


@pytest.mark.parametrize(
    "secret",
    [
        "stringData: {api-key: sk-plain}",
        "data: {api-key: c2stYmFzZTY0}",  # base64 of sk-base64
    ],
)
def test_secret_from_a_secret_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, secret: str
) -> None:
    monkeypatch.delenv("ORDO_SECRET_MODEL_KEY_API_KEY", raising=False)
    write(tmp_path, "all.yaml", ENDPOINT_WITH_SECRET)
    write(
        tmp_path,
        "secret.yaml",
        "apiVersion: v1\nkind: Secret\n"
        "metadata: {name: model-key, labels: {ordo.dev/credential: 'true'}}\n"
        f"{secret}\n",
    )
    code, tasks, _ = run(capsys, "-q", "-f", str(tmp_path))
    out = json.dumps(tasks)
    assert code == 0
    assert "sk-plain" not in out and "sk-base64" not in out and "c2stYmFzZTY0" not in out


def test_several_paths_and_concurrent_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(
        tmp_path,
        "model.yaml",
        """
        apiVersion: ordo.dev/v1alpha1
        kind: ModelEndpoint
        metadata: {name: m}
        spec: {provider: mock}
        ---
        apiVersion: ordo.dev/v1alpha1
        kind: Agent
        metadata: {name: a}
        spec: {modelRef: m, limits: {maxSteps: 1}}
        """,
    )
    tasks_file = write(
        tmp_path,
        "tasks.yaml",
        """
        apiVersion: ordo.dev/v1alpha1
        kind: Task
        metadata: {name: one}
        spec: {agentRef: a, input: hi}
        ---
        apiVersion: ordo.dev/v1alpha1
        kind: Task
        metadata: {name: two}
        spec: {agentRef: missing-agent}
        """,
    )
    code, tasks, _ = run(capsys, "-q", "-f", str(tmp_path / "model.yaml"), "-f", str(tasks_file))
    assert code == 1
    assert tasks["one"]["status"]["phase"] == "Succeeded"
    assert tasks["one"]["status"]["output"] == "Done."  # the unscripted mock's default
    assert (tasks["two"]["status"]["phase"], tasks["two"]["status"]["reason"]) == (
        "Failed",
        "AgentNotFound",
    )


def test_no_task_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(
        tmp_path,
        "m.yaml",
        "apiVersion: ordo.dev/v1alpha1\nkind: ModelEndpoint\nmetadata: {name: m}\nspec: {provider: mock}\n",
    )
    code, tasks, err = run(capsys, "-q", "-f", str(tmp_path))
    assert (code, tasks) == (1, {})
    assert "no Task" in err


def test_invalid_manifests_do_not_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(
        tmp_path,
        "t.yaml",
        "apiVersion: ordo.dev/v1alpha1\nkind: Task\nmetadata: {name: t}\nspec: {input: no agentRef}\n",
    )
    code, tasks, err = run(capsys, "-q", "-f", str(tmp_path))
    assert (code, tasks) == (1, {})
    assert "agentRef" in err and "not running" in err


def test_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, tasks, _ = run(capsys, "-q", "-f", str(tmp_path / "nope"))
    assert (code, tasks) == (2, {})


def test_tool_rules_example_denies_one_call_and_allows_the_other(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, tasks, _ = run(capsys, "-q", "-f", str(EXAMPLES / "tool-rules"))
    assert code == 0
    status = tasks["pay-invoices"]["status"]
    assert (status["phase"], status["step"]) == ("Succeeded", 3)
    assert [(r["decision"], r["reason"], r["outcome"]) for r in status["toolCalls"]] == [
        ("denied", "ToolRuleDenied: payment-rules/over-100", "skipped"),
        (
            "allowed",
            "NoPermissionRequired; ToolRuleAudit: payment-rules/review-over-10 would "
            "RequireApproval",
            "succeeded",
        ),
    ]
    assert "500" not in json.dumps(status["toolCalls"])  # names, never argument values


def test_a_tool_rule_that_does_not_compile_fails_validate_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for f in (EXAMPLES / "tool-rules").glob("*.yaml"):
        text = f.read_text().replace('"args.amount > 100"', '"args.amount >"')
        (tmp_path / f.name).write_text(text)
    assert main(["validate", "-f", str(tmp_path)]) == 1
    out, err = capsys.readouterr()
    assert "toolRule 'over-100': when: does not parse" in out + err
    code, _, err = run(capsys, "-q", "-f", str(tmp_path))
    assert code != 0 and "toolRule 'over-100'" in err


def test_team_example_runs_both_teams_and_prints_every_member(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, tasks, _ = run(capsys, "-q", "-f", str(EXAMPLES / "team"))
    assert code == 0
    members = {
        "write-about-ordo": ["draft", "edit"],
        "review-adoption": ["for", "against", "aggregator"],
    }
    assert len(tasks) == 2 + 5  # both Team Tasks and each member's child Task
    for name, expected in members.items():
        status = tasks[name]["status"]
        assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded")
        assert [c["member"] for c in status["children"]] == expected
        children = [tasks[c["name"]] for c in status["children"]]
        assert all(c["status"]["phase"] == "Succeeded" for c in children)
        assert status["usage"]["totalTokens"] == sum(
            c["status"]["usage"]["totalTokens"] for c in children
        )
        assert status["output"] == children[-1]["status"]["output"]
    write = tasks["write-about-ordo"]
    assert set(write["status"]["structuredOutput"]) == {"title", "summary"}
    draft, edit = (tasks[c["name"]] for c in write["status"]["children"])
    assert edit["spec"]["input"] == draft["status"]["output"]  # the draft is the editor's input
    judge = tasks[tasks["review-adoption"]["status"]["children"][-1]["name"]]
    assert set(judge["spec"]["input"]) == {"for", "against"}  # every answer, by member name
