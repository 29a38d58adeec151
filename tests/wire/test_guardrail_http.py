"""The `http` Guardrail against a real check service on 127.0.0.1 (issue 16 §2): allow, deny
and redact (what the model, the tool and the status then see), and every way it fails closed:
a timeout (also a body that trickles in), a non-2xx answer, garbage or wrong-shaped JSON, a body
over the 256 KiB cap (denied without reading it all), a redirect (not followed), a refused
destination (the SSRF guard; the Guardrail's Ready=False). Also once through `ordo run -f` as
a subprocess, with the matched text and the service's reason kept out of everything it prints.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.support.guard_check_server import (
    HUGE_BYTES,
    REASON,
    REDACTED,
    SECRET,
    WRONG_SHAPES,
    GuardCheckServer,
)
from tests.support.http_tool_server import HttpToolServer
from tests.support.openai_server import OpenAIServer
from tests.support.wire import CANARY, calls, endpoint, resolved, run_config, text

from ordo.api.guardrail import GUARDRAIL_POINTS, HttpGuardrail
from ordo.engine.events import Event, GuardrailFired
from ordo.engine.guardrails import GuardrailBinding, Verdict
from ordo.engine.loop import run_agent
from ordo.operator.readiness.guardrails import guardrail_verdict
from ordo.providers import build_model_client
from ordo.runtime import TaskOutcome
from ordo.tools import binding
from ordo.tools.guardcheck import MAX_VERDICT_BYTES, HttpGuardCheck


@pytest.fixture
def check_server() -> Iterator[GuardCheckServer]:
    with GuardCheckServer() as server:
        yield server


def http_check(url: str, secret: str | None = None, **spec: Any) -> HttpGuardCheck:
    return HttpGuardCheck("checker", HttpGuardrail.model_validate({"url": url, **spec}), secret)


def guard(check: HttpGuardCheck, *points: str) -> GuardrailBinding:
    return GuardrailBinding("checker", frozenset(points or GUARDRAIL_POINTS), check)  # type: ignore[arg-type]


# --- the protocol: allow, deny, redact ---------------------------------------------------------


async def test_allow_and_the_documented_request(check_server: GuardCheckServer) -> None:
    check = http_check(check_server.url + "/allow", secret=CANARY, headers={"X-Team": "a"})
    assert await check("toolArguments", '{"q":"x"}') == Verdict("allow")
    (request,) = check_server.requests
    assert request["json"] == {
        "guardrail": "checker",
        "point": "toolArguments",
        "text": '{"q":"x"}',
    }
    headers = request["headers"]
    assert headers["authorization"] == f"Bearer {CANARY}" and headers["x-team"] == "a"
    assert headers["content-type"] == "application/json"


async def test_deny_and_redact(check_server: GuardCheckServer) -> None:
    assert await http_check(check_server.url + "/deny")("input", "hi") == Verdict("deny")
    redact = http_check(check_server.url + "/redact")
    assert await redact("output", f"a {SECRET} b") == Verdict("redact", f"a {REDACTED} b")
    assert await redact("output", "nothing here") == Verdict("allow")


async def test_redaction_is_what_the_model_the_tool_and_the_status_see(
    check_server: GuardCheckServer, http_tool_server: HttpToolServer
) -> None:
    """One http guardrail on all four points: the Task input, the tool's arguments, the tool's
    result (the tool answers SECRET, from its own URL) and the final answer are all redacted.
    (The model's own tool call goes back to it as it wrote it: the tool got the redacted one.)"""
    lookup = await binding(
        resolved(
            "lookup",
            {
                "type": "http",
                "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}},
                "http": {"url": http_tool_server.url + f"/big?size={len(SECRET)}&char={SECRET}"},
            },
        )
    )
    script = [calls(("lookup", {"q": SECRET})), text(f"the answer is {SECRET}")]
    fired: list[GuardrailFired] = []

    async def listener(event: Event) -> None:
        if isinstance(event, GuardrailFired):
            fired.append(event)

    with OpenAIServer(script) as model:
        client = build_model_client(endpoint("openai-compatible", model.url + "/v1"), None)
        result = await run_agent(
            run_config(["lookup"], user=f"look up {SECRET}"),
            client,
            [lookup],
            listeners=[listener],
            guardrails=[guard(http_check(check_server.url + "/redact"))],
        )
        messages = model.bodies[-1]["messages"]
    assert (result.phase, result.output) == ("Succeeded", f"the answer is {REDACTED}")
    fed = [m["content"] for m in messages if m["role"] in ("user", "tool")]
    assert fed == [f"look up {REDACTED}", REDACTED]  # the input and the tool's result
    (tool_request,) = http_tool_server.requests
    assert tool_request["json"] == {"q": REDACTED}  # the arguments the tool got
    assert [b["point"] for b in check_server.bodies()] == list(GUARDRAIL_POINTS)
    status = TaskOutcome(result.phase, result.reason, result.message, result).status().to_dict()
    assert [(g["point"], g["action"]) for g in status["guardrails"]] == [
        (point, "redacted") for point in GUARDRAIL_POINTS
    ]
    assert status["guardrails"][1]["tool"] == "lookup"
    assert SECRET not in json.dumps(status) and REASON not in json.dumps(status)
    assert status["output"] == f"the answer is {REDACTED}"
    assert [e.record for e in fired] == result.state.guardrail_records  # one event each


async def test_a_denied_tool_call_never_reaches_the_tool(
    check_server: GuardCheckServer, http_tool_server: HttpToolServer
) -> None:
    lookup = await binding(
        resolved("lookup", {"type": "http", "http": {"url": http_tool_server.url + "/echo"}})
    )
    script = [calls(("lookup", {"q": SECRET})), text("never")]
    with OpenAIServer(script) as model:
        client = build_model_client(endpoint("openai-compatible", model.url + "/v1"), None)
        result = await run_agent(
            run_config(["lookup"]),
            client,
            [lookup],
            guardrails=[guard(http_check(check_server.url + "/deny-if"), "toolArguments")],
        )
        assert model.count == 1
    assert (result.phase, result.reason) == ("Failed", "GuardrailViolation")
    assert result.message == (
        "tool 'lookup' denied at step 1: GuardrailViolation: checker (toolArguments)"
    )
    assert http_tool_server.count == 0


# --- fail closed -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("route", "cause"),
    [
        ("/status/500", "HTTPStatus 500"),
        ("/status/403", "HTTPStatus 403"),
        ("/status/404", "HTTPStatus 404"),
        ("/garbage", "InvalidVerdict"),
        *[(f"/shape/{n}", "InvalidVerdict") for n in range(len(WRONG_SHAPES))],
    ],
)
async def test_errors_and_malformed_verdicts_deny(
    check_server: GuardCheckServer, route: str, cause: str
) -> None:
    verdict = await http_check(check_server.url + route)("input", "hello")
    assert verdict == Verdict("deny", cause=cause)


async def test_a_check_service_that_does_not_answer_in_time_denies(
    check_server: GuardCheckServer,
) -> None:
    verdict = await http_check(check_server.url + "/slow?seconds=30", timeout="300ms")("input", "x")
    assert verdict == Verdict("deny", cause="Timeout")


async def test_a_verdict_that_trickles_in_past_the_timeout_denies(
    check_server: GuardCheckServer,
) -> None:
    """Headers at once, then one byte every 50 ms: no single read waits the timeout, but the
    check as a whole does. The timeout bounds the whole check, not each read."""
    verdict = await http_check(check_server.url + "/drip?every=0.05", timeout="300ms")("input", "x")
    assert verdict == Verdict("deny", cause="Timeout")


async def test_a_huge_body_denies_without_being_read_to_the_end(
    check_server: GuardCheckServer,
) -> None:
    verdict = await http_check(check_server.url + "/huge")("input", "x")
    assert verdict == Verdict("deny", cause="VerdictTooLarge")
    # Waited for off the loop: the connection is closed by the loop (the shared session's
    # connection is closed, not the session), which a blocking wait would stall.
    noticed = await asyncio.to_thread(check_server.huge_done.wait, 30)
    assert noticed, "the server never noticed the reader leave"
    assert MAX_VERDICT_BYTES < check_server.huge_sent < HUGE_BYTES // 2


async def test_a_redirect_is_not_followed(check_server: GuardCheckServer) -> None:
    verdict = await http_check(check_server.url + "/redirect")("input", "x")
    assert verdict == Verdict("deny", cause="HTTPStatus 302")
    assert [r["path"] for r in check_server.requests] == ["/redirect"]


async def test_a_service_that_is_not_there_denies() -> None:
    verdict = await http_check("http://127.0.0.1:1/check")("input", "x")
    assert verdict == Verdict("deny", cause="ConnectError")


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/latest/meta-data/", "http://metadata.google.internal/check"]
)
async def test_a_refused_destination_denies_and_the_guardrail_is_not_ready(url: str) -> None:
    assert await http_check(url)("input", "x") == Verdict("deny", cause="BlockedDestination")
    body = {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Guardrail",
        "metadata": {"name": "checker", "namespace": "wire"},
        "spec": {"type": "http", "points": ["input"], "http": {"url": url}},
    }
    ready = await guardrail_verdict(body, store=None)  # type: ignore[arg-type]  # no Secret read
    assert (ready.status, ready.reason) == ("False", "DestinationRefused")


# --- through `ordo run -f DIR` -----------------------------------------------------------------

RUN_SET = """\
apiVersion: ordo.dev/v1alpha1
kind: ModelEndpoint
metadata: {{name: model}}
spec: {{provider: openai-compatible, baseUrl: "{model}", model: gpt-test}}
---
apiVersion: ordo.dev/v1alpha1
kind: Guardrail
metadata: {{name: no-forbidden-input}}
spec:
  type: http
  points: [input]
  http: {{url: "{check}/deny-if?word=forbidden"}}
---
apiVersion: ordo.dev/v1alpha1
kind: Guardrail
metadata: {{name: scrub-answer}}
spec:
  type: http
  points: [output]
  http: {{url: "{check}/redact"}}
---
apiVersion: ordo.dev/v1alpha1
kind: Agent
metadata: {{name: agent}}
spec: {{modelRef: model, guardrails: [no-forbidden-input, scrub-answer]}}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: scrubbed}}
spec: {{agentRef: agent, input: "say the code"}}
---
apiVersion: ordo.dev/v1alpha1
kind: Task
metadata: {{name: refused}}
spec: {{agentRef: agent, input: "a forbidden request"}}
"""


@pytest.fixture
def ordo_run(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(manifests: str, *flags: str) -> subprocess.CompletedProcess[str]:
        folder = tmp_path / "set"
        folder.mkdir(exist_ok=True)
        (folder / "set.yaml").write_text(manifests)
        return subprocess.run(
            [sys.executable, "-m", "ordo.cli.main", "run", "-f", str(folder), *flags],
            capture_output=True,
            text=True,
            env=dict(os.environ),
            timeout=120,
        )

    return run


def test_ordo_run_blocks_and_redacts_through_the_check_service(
    check_server: GuardCheckServer, ordo_run: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    with OpenAIServer({"say the code": [text(f"the code is {SECRET}")]}) as model:
        done = ordo_run(RUN_SET.format(model=model.url + "/v1", check=check_server.url))
        assert model.count == 1  # the refused Task never reached the model
    assert done.returncode != 0, done.stderr[-3000:]  # one Task failed
    docs = {d["metadata"]["name"]: d["status"] for d in yaml.safe_load_all(done.stdout) if d}
    scrubbed, refused = docs["scrubbed"], docs["refused"]
    assert (scrubbed["phase"], scrubbed["output"]) == ("Succeeded", f"the code is {REDACTED}")
    assert scrubbed["guardrails"] == [
        {"step": 1, "point": "output", "guardrail": "scrub-answer", "action": "redacted"}
    ]
    assert (refused["phase"], refused["reason"], refused["step"]) == (
        "Failed",
        "GuardrailViolation",
        0,
    )
    assert "guardrail 'no-forbidden-input' denied the Task input" in refused["message"]
    assert refused["guardrails"] == [
        {"step": 0, "point": "input", "guardrail": "no-forbidden-input", "action": "denied"}
    ]
    assert SECRET in json.dumps(check_server.bodies())  # the service did see the text ...
    for where, printed in (("stdout", done.stdout), ("stderr", done.stderr)):
        assert SECRET not in printed, f"the matched text reached {where}"  # ... nobody else
        assert REASON not in printed, f"the service's reason reached {where}"
