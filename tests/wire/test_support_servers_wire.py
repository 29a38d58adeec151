"""The reusable test servers themselves: process mode, remote records, keyed scripts, auto mode
(the operator's cluster tests and bench/ rely on these)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
from tests.support.mcp_server import McpTestServer
from tests.support.openai_server import OpenAIServer
from tests.support.scripted import load_script, start_process
from tests.support.wire import CANARY, endpoint, resolved, run_config

from ordo.engine.loop import run_agent
from ordo.providers import build_model_client
from ordo.tools import binding

ROOT = Path(__file__).resolve().parents[2]


async def test_openai_server_as_a_process_with_a_script_file(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("- {status: 503}\n- {text: from a process}\n")
    with start_process("tests.support.openai_server", script=script, require_key=CANARY) as server:
        client = build_model_client(endpoint("openai", server.url + "/v1"), CANARY)
        result = await run_agent(run_config([]), client, [])
        assert (result.phase, result.output) == ("Succeeded", "from a process")
        assert server.count() == 2
        records = server.requests()
        assert records[1]["headers"]["authorization"] == f"Bearer {CANARY}"
        assert records[1]["body"]["messages"][0]["role"] == "system"
        server.set_script([{"text": "replaced"}])
        server.reset()
        assert (await run_agent(run_config([]), client, [])).output == "replaced"
        assert server.count() == 1


async def test_anthropic_server_as_a_process_in_auto_mode() -> None:
    with start_process("tests.support.anthropic_server", fallback="auto") as server:
        client = build_model_client(endpoint("anthropic", server.url), CANARY)
        schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        result = await run_agent(run_config([], output_schema=schema), client, [])
        assert result.phase == "Succeeded" and result.structured_output == {"n": 1}


async def test_auto_mode_calls_each_tool_once_then_answers() -> None:
    with McpTestServer() as mcp, OpenAIServer() as model:
        tools = [
            await binding(resolved(name, {"type": "mcp", "mcp": {"url": mcp.url}}))
            for name in ("echo", "add")
        ]
        client = build_model_client(endpoint("openai-compatible", model.url + "/v1"), None)
        result = await run_agent(run_config(["echo", "add"]), client, tools)
        assert result.phase == "Succeeded" and model.count == 2
        assert result.output == "Done. I used add, echo."
        assert (mcp.calls["echo"], mcp.calls["add"]) == (1, 1)


async def test_keyed_scripts_follow_each_conversation() -> None:
    script = {"alpha": [{"text": "A1"}], "beta": [{"text": "B1"}], "*": [{"text": "other"}]}
    with OpenAIServer(script) as model:
        client = build_model_client(endpoint("ollama", model.url + "/v1"), None)
        outputs = [
            (await run_agent(run_config([], user=f"{word} task"), client, [])).output
            for word in ("beta", "alpha", "gamma")
        ]
        assert outputs == ["B1", "A1", "other"]


async def test_exhausted_script_is_a_visible_non_retryable_error() -> None:
    with OpenAIServer([{"text": "only one"}]) as model:
        client = build_model_client(endpoint("ollama", model.url + "/v1"), None)
        assert (await run_agent(run_config([]), client, [])).output == "only one"
        second = await run_agent(run_config([]), client, [])
        assert (second.reason, model.count) == ("ModelError", 2)
        assert "script_exhausted" in second.message


def test_mcp_server_as_a_process() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.mcp_server", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("listening on http://127.0.0.1:") and line.endswith("/mcp")
        base = line.removeprefix("listening on ").removesuffix("/mcp")
        assert httpx.get(base + "/_mcp/calls", timeout=10).json() == {}
    finally:
        process.terminate()
        process.wait(10)


def test_load_script_accepts_json_yaml_and_a_steps_key(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps([{"text": "x"}]))
    (tmp_path / "b.yml").write_text("steps:\n  - text: y\n")
    (tmp_path / "c.yaml").write_text("marker:\n  - text: z\n")
    assert load_script(tmp_path / "a.json") == [{"text": "x"}]
    assert load_script(tmp_path / "b.yml") == [{"text": "y"}]
    assert load_script(tmp_path / "c.yaml") == {"marker": [{"text": "z"}]}
