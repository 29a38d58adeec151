"""Big results on a real control plane (issue 23): a Task never stays `Running` because its
result was big.

- A structured answer of 262,000 emoji (1.05 MB as UTF-8, 3.1 MB as the model server sends it)
  used to become a 1.2 MB `status.structuredOutput`; now it ends `Failed/InvalidOutput` naming
  the field and its cap, and a 4 MB one ends the same way at the answer's parse cap.
- A terminal status that kube-apiserver refuses for its size (here: a Task whose input of
  240,000 `<` is stored as 1.44 MB, since the API server escapes `<` as `\\u003c`, plus an
  answer of 40,000 `<`) is written again reduced: phase, reason, step, usage and completedAt
  land, `output` is dropped with `outputTruncated`, and the message says the status was reduced.

What kube-apiserver v1.36 answers for oversized writes (probed while writing this; the writer's
`refused_for_size` recognises each): a body over 3 MiB `413 RequestEntityTooLarge`, an object
over etcd's 1.5 MiB `500 etcdserver: request is too large` (260,000 `<` fit, 300,000 do not),
over 2 MiB `500 rpc error: code = ResourceExhausted`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.support.openai_server import OpenAIServer
from tests.support.operator import OperatorProcess, apply, doc, wait_task

from ordo_devcluster import ControlPlane

EMOJI = "\U0001f600"
SCRIPT: dict[str, list[dict[str, Any]]] = {
    # the raw JSON text (262,000 characters): within the answer's 1,000,000-character cap
    "EMOJI": [{"text": json.dumps({"poem": EMOJI * 262_000}, ensure_ascii=False)}],
    # 4,000,000 characters: over the answer's cap
    "ASCII": [{"json": {"poem": "a" * 4_000_000}}],
    "LT": [{"text": "<" * 40_000}],
}


def requests_for(server: OpenAIServer, marker: str) -> int:
    return sum(marker in json.dumps(body) for body in server.bodies)


def setup(cp: ControlPlane, ns: str, model: OpenAIServer) -> None:
    apply(
        cp,
        ns,
        doc(
            "ModelEndpoint",
            "model",
            {"provider": "openai-compatible", "baseUrl": model.url + "/v1", "model": "gpt-test"},
        ),
    )
    apply(
        cp,
        ns,
        doc(
            "Agent",
            "structured",
            {"modelRef": "model", "outputSchema": {"type": "object"}},
        ),
    )
    apply(cp, ns, doc("Agent", "plain", {"modelRef": "model"}))


def create(cp: ControlPlane, ns: str, name: str, agent: str, text: str) -> dict[str, Any]:
    # `create`, not `apply`: no last-applied annotation doubling a 1.44 MB input
    cp.kubectl(
        "create", "-n", ns, "-f", "-", input=doc("Task", name, {"agentRef": agent, "input": text})
    )
    status: dict[str, Any] = wait_task(cp, ns, name, timeout=120)["status"]
    return status


@pytest.fixture
def model(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess
) -> Iterator[OpenAIServer]:
    """The scripted model server, its ModelEndpoint and the two Agents, with an operator."""
    with OpenAIServer(SCRIPT) as server:
        setup(control_plane, namespace, server)
        yield server


def test_huge_structured_answers_end_invalid_output_naming_the_cap(
    control_plane: ControlPlane, namespace: str, model: OpenAIServer
) -> None:
    s = create(control_plane, namespace, "emoji", "structured", "EMOJI write a poem")
    assert (s["phase"], s["reason"], s["step"]) == ("Failed", "InvalidOutput", 1), s["message"]
    assert "status.structuredOutput" in s["message"] and "131072" in s["message"]
    assert "structuredOutput" not in s
    assert s["outputTruncated"] is True and len(s["output"]) <= 32768
    assert s["usage"]["totalTokens"] > 0 and s["completedAt"]

    s = create(control_plane, namespace, "ascii", "structured", "ASCII write a poem")
    assert (s["phase"], s["reason"], s["step"]) == ("Failed", "InvalidOutput", 1), s["message"]
    assert "structuredOutput" not in s and s["outputTruncated"] is True
    assert requests_for(model, "EMOJI") == requests_for(model, "ASCII") == 1


def test_a_terminal_status_refused_for_its_size_lands_reduced(
    control_plane: ControlPlane, namespace: str, model: OpenAIServer, operator: OperatorProcess
) -> None:
    s = create(control_plane, namespace, "lt", "plain", "LT " + "<" * 240_000)
    assert (s["phase"], s["reason"], s["step"]) == ("Succeeded", "Succeeded", 1), s
    assert s["usage"]["totalTokens"] > 0 and s["completedAt"]
    assert "output" not in s and s["outputTruncated"] is True
    assert "status reduced" in s["message"]
    complete = [c for c in s["conditions"] if c["type"] == "Complete"]
    assert complete and complete[0]["status"] == "True"
    assert requests_for(model, "LT ") == 1  # written once, not run again after a refusal
    log = "\n".join(operator.log_path.read_text().splitlines()[-400:])
    assert "terminal status refused for its size; writing it reduced" in log
