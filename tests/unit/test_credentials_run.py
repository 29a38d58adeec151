"""`ordo run` and `ordo validate` follow the credential rule (credentials.py) for Secret
manifests given with -f: a recording model server and http Tool server receive no request at
all, let alone the canary, when the Secret is not opted in or allows another host;
`ORDO_SECRET_*` variables are the user's own and go where the manifests say."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from tests.support.http_tool_server import HttpToolServer
from tests.support.openai_server import OpenAIServer

from ordo.api import manifests
from ordo.cli.local import run_tasks

CANARY = "sk-canary-run-9b2e"


def manifest_set(tmp_path: Path, base_url: str, secret_meta: str, *, tool_url: str = "") -> Path:
    tool = ""
    tools = ""
    if tool_url:
        tools = "tools: [fetch], "
        tool = f"""
        ---
        apiVersion: ordo.dev/v1alpha1
        kind: Tool
        metadata: {{name: fetch}}
        spec:
          type: http
          http: {{url: "{tool_url}/run", allowPrivateNetwork: true, secretRef: {{name: key, key: token}}}}
        """
    text = f"""
    apiVersion: ordo.dev/v1alpha1
    kind: ModelEndpoint
    metadata: {{name: m}}
    spec:
      provider: openai-compatible
      model: gpt-test
      baseUrl: {base_url}/v1
      credentials: {{secretRef: {{name: key, key: api-key}}}}
    ---
    apiVersion: ordo.dev/v1alpha1
    kind: Agent
    metadata: {{name: a}}
    spec: {{modelRef: m, {tools}limits: {{maxSteps: 2}}}}
    ---
    apiVersion: ordo.dev/v1alpha1
    kind: Task
    metadata: {{name: t}}
    spec: {{agentRef: a, input: hi}}
    ---
    apiVersion: v1
    kind: Secret
    metadata: {{name: key{secret_meta}}}
    stringData: {{api-key: {CANARY}, token: {CANARY}-tool}}
    """
    path = tmp_path / "all.yaml"
    path.write_text(textwrap.dedent(text) + textwrap.dedent(tool))
    return path


LABEL = ", labels: {ordo.dev/credential: 'true'}"


def hosts(value: str) -> str:
    return f"{LABEL}, annotations: {{ordo.dev/allowed-hosts: '{value}'}}"


@pytest.mark.parametrize(
    ("secret_meta", "reason"),
    [
        ("", "SecretNotFound"),  # not opted in: as if missing
        (hosts("api.openai.com"), "CredentialNotAllowed"),
        (hosts("127.0.0.1:1"), "CredentialNotAllowed"),  # the right host, another port
    ],
)
async def test_a_model_call_never_gets_a_secret_that_does_not_allow_its_host(
    tmp_path: Path, secret_meta: str, reason: str
) -> None:
    with OpenAIServer() as server:
        mset = manifests.load([str(manifest_set(tmp_path, server.url, secret_meta))])
        [(_, outcome)] = await run_tasks(mset, environ={})
        assert (outcome.phase, outcome.reason) == ("Failed", reason)
        assert CANARY not in outcome.message
        assert server.count == 0


async def test_the_allowed_host_gets_the_key(tmp_path: Path) -> None:
    with OpenAIServer() as server:
        meta = hosts(f"localhost, 127.0.0.1:{server.port}")
        mset = manifests.load([str(manifest_set(tmp_path, server.url, meta))])
        [(_, outcome)] = await run_tasks(mset, environ={})
        assert outcome.reason == "Succeeded", outcome.message
        assert server.requests[0].headers["authorization"] == f"Bearer {CANARY}"


async def test_an_http_tool_never_gets_a_secret_for_another_host(tmp_path: Path) -> None:
    tool_server = HttpToolServer()
    with OpenAIServer() as model, tool_server:
        # The model key may go to the model server, not the tool's port.
        meta = hosts(f"127.0.0.1:{model.port}")
        path = manifest_set(tmp_path, model.url, meta, tool_url=tool_server.url)
        [(_, outcome)] = await run_tasks(manifests.load([str(path)]), environ={})
        assert (outcome.phase, outcome.reason) == ("Failed", "CredentialNotAllowed")
        assert "Tool 'fetch'" in outcome.message and CANARY not in outcome.message
        assert model.count == 0 and tool_server.count == 0


async def test_ordo_secret_variables_are_the_users_own(tmp_path: Path) -> None:
    with OpenAIServer() as server:
        path = manifest_set(tmp_path, server.url, "")
        text = path.read_text()
        path.write_text(text[: text.index("---\napiVersion: v1\nkind: Secret")])
        environ = {"ORDO_SECRET_KEY_API_KEY": CANARY}
        [(_, outcome)] = await run_tasks(manifests.load([str(path)]), environ=environ)
        assert outcome.reason == "Succeeded", outcome.message
        assert server.requests[0].headers["authorization"] == f"Bearer {CANARY}"


def test_validate_warns_about_secrets_ordo_cannot_or_may_too_freely_use(tmp_path: Path) -> None:
    def warnings(meta: str) -> list[str]:
        mset = manifests.load([str(manifest_set(tmp_path, "http://127.0.0.1:9", meta))])
        assert not [p for p in mset.problems if p.severity == "error"]
        return [p.text for p in mset.problems if p.severity == "warning"]

    [unlabelled] = warnings("")
    assert "no label ordo.dev/credential" in unlabelled and "missing" in unlabelled
    [anywhere] = warnings(LABEL)
    assert "without ordo.dev/allowed-hosts" in anywhere
    [bad] = warnings(hosts("127.0.0.1, *.com"))
    assert "'*.com'" in bad
    assert warnings(hosts("127.0.0.1:9")) == []
