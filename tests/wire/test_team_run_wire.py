"""`ordo run -f` runs Team Tasks (issue 27 part 5) over the OpenAI wire: a Sequential and a
Parallel Team against the scripted OpenAI server, every member a child Task run in process,
every Task of the tree printed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support.openai_server import OpenAIServer
from tests.support.teams import doc, team_objects, team_task
from tests.wire.test_examples_wire import ROOT, ordo_command

from ordo.cli.local import secret_env_name
from ordo.runtime.delegation import PARENT_LABEL

KEY = "sk-team-wire-0c1d"


def _manifests(url: str) -> list[dict[str, Any]]:
    endpoint = {
        "provider": "openai",
        "baseUrl": url,
        "model": "gpt-test",
        "credentials": {"secretRef": {"name": "model-key", "key": "api-key"}},
    }
    return [
        doc("ModelEndpoint", "model", endpoint),
        *team_objects({"maxTokens": 100000}),
        team_task("write", "article", "write about ordo"),
        team_task("review", "review", "adopt ordo?"),
    ]


def test_ordo_run_runs_sequential_and_parallel_teams(tmp_path: Path) -> None:
    with OpenAIServer(None, fallback={"auto": True}, require_key=KEY) as server:
        path = tmp_path / "team.yaml"
        path.write_text("\n---\n".join(json.dumps(d) for d in _manifests(server.url + "/v1")))
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORDO_SECRET_")}
        env[secret_env_name("model-key", "api-key")] = KEY
        completed = subprocess.run(
            [*ordo_command(), "run", "-q", "-o", "json", "-f", str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert completed.returncode == 0, completed.stderr or completed.stdout[-3000:]
        printed = json.loads(completed.stdout)
        assert server.count == 5  # writer, editor; optimist, skeptic, judge
    by_name = {d["metadata"]["name"]: d for d in printed}
    for parent, members in (
        ("write", ["draft", "edit"]),
        ("review", ["for", "against", "aggregator"]),
    ):
        status = by_name[parent]["status"]
        assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded"), status
        assert [c["member"] for c in status["children"]] == members
        children = [by_name[c["name"]] for c in status["children"]]  # each printed too
        assert all(c["metadata"]["labels"][PARENT_LABEL] == parent for c in children)
        assert all(c["status"]["phase"] == "Succeeded" for c in children)
        tokens = sum(c["status"]["usage"]["totalTokens"] for c in children)
        assert status["usage"]["totalTokens"] == tokens > 0
        assert status["output"] == children[-1]["status"]["output"]
    write = by_name["write"]["status"]
    assert set(write["structuredOutput"]) == {"title"}
    # The editor got the writer's answer; the judge got both answers by member name.
    draft, edit = (by_name[c["name"]] for c in write["children"])
    assert edit["spec"]["input"] == draft["status"]["output"]
    judge = by_name[by_name["review"]["status"]["children"][-1]["name"]]
    assert set(judge["spec"]["input"]) == {"for", "against"}
