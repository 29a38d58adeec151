"""`ordo run -f` on examples/openai, examples/anthropic and examples/ollama, with only the
ModelEndpoint's baseUrl pointed at a local scripted server (auto mode: it calls each offered
tool once, then answers) and the key given the way the examples' READMEs say."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.support.anthropic_server import AnthropicServer
from tests.support.openai_server import OpenAIServer
from tests.support.scripted import ScriptedServer
from tests.support.wire import CANARY

from ordo.cli.local import secret_env_name

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def ordo_command() -> list[str]:
    script = Path(sys.executable).with_name("ordo")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from ordo.cli.main import main; sys.exit(main())"]


@pytest.mark.parametrize("example", ["openai", "anthropic", "ollama"])
def test_example_runs_against_a_local_server(example: str, tmp_path: Path) -> None:
    folder = EXAMPLES / example
    docs = list(yaml.safe_load_all((folder / "model.yaml").read_text()))
    [model] = [d for d in docs if d and d.get("kind") == "ModelEndpoint"]
    server: ScriptedServer = (AnthropicServer if example == "anthropic" else OpenAIServer)()
    with server:
        model["spec"]["baseUrl"] = server.url if example == "anthropic" else server.url + "/v1"
        (tmp_path / "model.yaml").write_text(yaml.safe_dump(model))
        env = {k: v for k, v in os.environ.items() if not k.startswith("ORDO_SECRET_")}
        credentials = model["spec"].get("credentials")
        if credentials:
            ref = credentials["secretRef"]
            env[secret_env_name(ref["name"], ref["key"])] = CANARY
        completed = subprocess.run(
            [
                *ordo_command(),
                "run",
                "-q",
                "-o",
                "json",
                "-f",
                str(tmp_path / "model.yaml"),
                "-f",
                str(folder / "agent.yaml"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert completed.returncode == 0, completed.stderr
        task = json.loads(completed.stdout)
        status = task["status"]
        assert (status["phase"], status["reason"]) == ("Succeeded", "Succeeded")
        assert status["output"] == "Done. I used order-status."
        assert server.count == 2
        first = server.requests[0]
        tools = first.body["tools"]
        names = [t.get("name") or t["function"]["name"] for t in tools]
        assert names == ["order-status"]
        auth = first.headers.get("authorization") or first.headers.get("x-api-key")
        if credentials:
            assert auth is not None and CANARY in auth
        else:
            assert auth is None
        assert CANARY not in completed.stdout and CANARY not in completed.stderr
