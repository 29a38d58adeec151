"""The `http` guardrail: POST the text to an external check service, read its verdict.

Request: `POST <url>` with the JSON body `{"guardrail": NAME, "point": POINT, "text": TEXT}`.
Answer: 2xx with the JSON object `{"decision": "allow" | "deny" | "redact", "text": "..."}`
(`text` required for redact). Fail closed: a timeout, a connection error, a refused
destination (the SSRF guard of http Tools, `netguard`), a non-2xx status, a body over
MAX_VERDICT_BYTES (read no further), or anything that is not that object denies, with a cause
naming the kind of failure only. `timeout` bounds the whole check (connect, send, the whole
answer), not each read. Redirects are not followed and proxy variables are not used. A
`reason` in the verdict is accepted and dropped: it may quote the text.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from ..api import parse_duration
from ..api.guardrail import GuardrailPoint, HttpGuardrail
from ..engine.guardrails import InvalidVerdict, Verdict, parse_verdict
from ..engine.tooling import ToolCallFailed
from .http import (
    TRUNCATED_NOTE,
    USER_AGENT,
    guarded_client,
    guarded_targets,
    pin_destination,
    read_capped,
    send_first,
)

MAX_VERDICT_BYTES = 256 * 1024
"""Longest check-service answer read; a longer one denies."""


class HttpGuardCheck:
    """One http Guardrail."""

    def __init__(self, name: str, spec: HttpGuardrail, secret: str | None) -> None:
        self._name = name
        self._spec = spec
        self._secret = secret
        self._timeout = parse_duration(spec.timeout)

    def _headers(self) -> dict[str, str]:
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        headers.update(self._spec.headers or {})
        if self._secret is not None:
            headers["Authorization"] = f"Bearer {self._secret}"
        return headers

    async def __call__(self, point: GuardrailPoint, text: str) -> Verdict:
        try:
            # httpx's timeout bounds each connect and read; a service that trickles its answer
            # a byte at a time would never reach it. The whole check gets the deadline.
            async with asyncio.timeout(self._timeout):
                return await self._check(point, text)
        except ToolCallFailed as exc:
            return Verdict("deny", cause=exc.cause)
        except (httpx.TimeoutException, TimeoutError):
            return Verdict("deny", cause="Timeout")
        except httpx.HTTPError as exc:
            return Verdict("deny", cause=type(exc).__name__)
        except InvalidVerdict:
            return Verdict("deny", cause="InvalidVerdict")

    async def _check(self, point: GuardrailPoint, text: str) -> Verdict:
        url = httpx.URL(self._spec.url)
        private = self._spec.allow_private_network
        targets = await guarded_targets(url, private)
        headers = self._headers()
        extensions = pin_destination(url, headers, private)
        body: dict[str, Any] = {"guardrail": self._name, "point": point, "text": text}
        async with guarded_client(self._timeout) as client:
            response = await send_first(
                client,
                targets,
                lambda target: client.build_request(
                    "POST", target, headers=headers, json=body, extensions=extensions
                ),
            )
            try:
                if not response.is_success:
                    return Verdict("deny", cause=f"HTTPStatus {response.status_code}")
                answer = await read_capped(response, MAX_VERDICT_BYTES)
            finally:
                await response.aclose()
        if answer.endswith(TRUNCATED_NOTE):
            return Verdict("deny", cause="VerdictTooLarge")
        return parse_verdict(answer)
