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
from collections.abc import Awaitable
from typing import Any

import aiohttp
from yarl import URL

from ..api import parse_duration
from ..api.guardrail import GuardrailPoint, HttpGuardrail
from ..engine.guardrails import InvalidVerdict, Verdict, parse_verdict
from ..engine.tooling import ToolCallFailed
from . import session
from .http import (
    TRUNCATED_NOTE,
    USER_AGENT,
    failure_kind,
    finish,
    guarded_targets,
    json_body,
    pin_destination,
    read_capped,
    request_timeout,
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
        headers = {
            "User-Agent": USER_AGENT,
            "Accept": "application/json",
            "Content-Type": "application/json",
        }
        headers.update(self._spec.headers or {})
        if self._secret is not None:
            headers["Authorization"] = f"Bearer {self._secret}"
        return headers

    async def __call__(self, point: GuardrailPoint, text: str) -> Verdict:
        try:
            # The whole check gets the deadline (the request's own covers only the request).
            async with asyncio.timeout(self._timeout):
                return await self._check(point, text)
        except ToolCallFailed as exc:
            return Verdict("deny", cause=exc.cause)
        except TimeoutError:  # aiohttp's timeouts are TimeoutErrors too
            return Verdict("deny", cause="Timeout")
        except (aiohttp.ClientError, OSError) as exc:
            return Verdict("deny", cause=failure_kind(exc))
        except InvalidVerdict:
            return Verdict("deny", cause="InvalidVerdict")

    async def _check(self, point: GuardrailPoint, text: str) -> Verdict:
        url = URL(self._spec.url)
        private = self._spec.allow_private_network
        targets = await guarded_targets(url, private)
        headers = self._headers()
        server_hostname = pin_destination(url, headers, private)
        body: dict[str, Any] = {"guardrail": self._name, "point": point, "text": text}
        data = json_body(body)
        async with session.held() as http:

            def send(target: URL) -> Awaitable[aiohttp.ClientResponse]:
                return http.post(
                    target,
                    headers=headers,
                    data=data,
                    allow_redirects=False,
                    server_hostname=server_hostname,
                    timeout=request_timeout(self._timeout),
                )

            response = await send_first(targets, send)
            try:
                if not 200 <= response.status < 300:
                    return Verdict("deny", cause=f"HTTPStatus {response.status}")
                answer = await read_capped(response, MAX_VERDICT_BYTES)
            finally:
                finish(response)
        if answer.endswith(TRUNCATED_NOTE):
            return Verdict("deny", cause="VerdictTooLarge")
        return parse_verdict(answer)
