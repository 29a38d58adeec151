"""The `a2a` Tool's client: one remote A2A agent reached through the official a2a-sdk client
(`a2a.client`), as engine/remotecalls.py uses it (`RemoteAgent`).

- The card is fetched once per run and URL (the first call), through the SDK's resolver; the
  client the SDK builds from it is kept for the run's other calls (`close()` ends it).
- Every request goes through `a2a_transport.GuardedTransport` (SSRF guard, bounded bodies).
- `secretRef` → `Authorization: Bearer <secret>` (the Secret was released for the URL's host:
  runtime/resolve.py); `headers` are sent as written; the run's W3C `traceparent` is sent with
  each request.
- A send asks the agent to return at once (`returnImmediately`, the caller polls with
  GetTask), with a message id derived from the Task and the call id, and the Agents of the
  delegation chain in the metadata (`ordo.dev/delegation-chain`).
- Remote answers are untrusted input: at most `MAX_ANSWER_CHARS` of text reach the model (cut
  and marked), structured parts deeper than `MAX_JSON_DEPTH` are refused.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any
from urllib.parse import urlsplit

import httpx
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..api import parse_duration
from ..engine.delegation import CHAIN_ANNOTATION
from ..engine.jsontext import MAX_JSON_DEPTH, value_depth
from ..engine.remote import RemoteTask
from ..engine.tooling import ResolvedTool, ToolCallFailed
from .a2a_transport import GuardedTransport
from .http import MAX_RESPONSE_BYTES

MAX_ANSWER_CHARS = MAX_RESPONSE_BYTES
TRUNCATED_NOTE = (
    f"\n[truncated: the remote agent's answer was longer than {MAX_ANSWER_CHARS} characters]"
)
USER_AGENT = "ordo-a2a-tool"


def message_id(task_key: str, call_key: str) -> str:
    """The A2A message id of a call: the same for every resume of the Task (its uid) and call."""
    return "ordo-" + hashlib.sha256(f"{task_key}\x00{call_key}".encode()).hexdigest()[:32]


def card_location(url: str) -> tuple[str, str | None]:
    """(base URL, card path relative to it or None for the well-known path) of a Tool's
    `url`: a URL ending `.json` names the card itself."""
    parts = urlsplit(url)
    if not parts.path.endswith(".json"):
        return url.rstrip("/"), None
    return f"{parts.scheme}://{parts.netloc}", parts.path


def _state(state: int) -> str:
    name = str(TaskState.Name(state))  # type: ignore[arg-type]
    return name.removeprefix("TASK_STATE_").lower().replace("_", "-")


def _text(parts: Any) -> str:
    """The text of `parts`: text parts as written, data parts as JSON (depth-checked)."""
    texts: list[str] = []
    for part in parts:
        if part.HasField("text"):
            texts.append(part.text)
        elif part.HasField("data"):
            value = MessageToDict(part.data)
            if value_depth(value) > MAX_JSON_DEPTH:
                raise ToolCallFailed(
                    "the remote agent's answer is nested too deeply", cause="AnswerTooDeep"
                )
            texts.append(json.dumps(value, ensure_ascii=False))
    return "\n".join(texts)


def _capped(text: str) -> str:
    return text if len(text) <= MAX_ANSWER_CHARS else text[:MAX_ANSWER_CHARS] + TRUNCATED_NOTE


def remote_task(task: Task) -> RemoteTask:
    """A task as the engine sees it: its answer (the artifacts' text, else the status
    message's), capped."""
    text = "\n".join(_text(a.parts) for a in task.artifacts)
    if not text and task.status.HasField("message"):
        text = _text(task.status.message.parts)
    return RemoteTask(task.id, _state(task.status.state), _capped(text))


class A2aRemoteAgent:
    """The remote agent of one `a2a` Tool, for one run (the Task is `task_key`: its uid)."""

    def __init__(self, resolved: ResolvedTool, task_key: str) -> None:
        spec = resolved.tool.spec
        if spec.a2a is None:
            raise ValueError(f"Tool {resolved.tool.name!r} has no spec.a2a")
        self._url = spec.a2a.url
        self._timeout = parse_duration(spec.timeout)
        headers = {"User-Agent": USER_AGENT, **(spec.a2a.headers or {})}
        if resolved.secret is not None:
            headers["Authorization"] = f"Bearer {resolved.secret}"
        self._headers = headers
        self._task_key = task_key
        self._http: httpx.AsyncClient | None = None
        self._client: Client | None = None

    async def _connected(self) -> Client:
        """The SDK client, built from the card on first use (fetched once per run)."""
        if self._client is None:
            self._http = httpx.AsyncClient(
                transport=GuardedTransport(self._url),
                headers=self._headers,
                timeout=self._timeout,
                follow_redirects=False,
                trust_env=False,
            )
            base, path = card_location(self._url)
            card = await A2ACardResolver(self._http, base).get_agent_card(relative_card_path=path)
            config = ClientConfig(streaming=False, polling=True, httpx_client=self._http)
            self._client = ClientFactory(config).create(card)
        assert self._http is not None
        carrier: dict[str, str] = {}
        TraceContextTextMapPropagator().inject(carrier)  # the run's span is current
        if "traceparent" in carrier:
            self._http.headers["traceparent"] = carrier["traceparent"]
        return self._client

    async def send(self, key: str, message: Any, chain: tuple[str, ...]) -> RemoteTask:
        client = await self._connected()
        request = SendMessageRequest(
            message=Message(
                message_id=message_id(self._task_key, key),
                role=Role.ROLE_USER,
                parts=[Part(text=str(message))],
            )
        )
        request.message.metadata.update({CHAIN_ANNOTATION: list(chain)})
        request.configuration.return_immediately = True
        async for event in client.send_message(request):
            if event.HasField("task"):
                return remote_task(event.task)
            if event.HasField("message"):  # a direct answer: no task to wait for
                return RemoteTask("", "completed", _capped(_text(event.message.parts)))
        raise ToolCallFailed("the remote agent sent no answer", cause="NoAnswer")

    async def get(self, task_id: str) -> RemoteTask:
        client = await self._connected()
        return remote_task(await client.get_task(GetTaskRequest(id=task_id, history_length=0)))

    async def cancel(self, task_id: str) -> None:
        client = await self._connected()
        await client.cancel_task(CancelTaskRequest(id=task_id))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
        if self._http is not None:
            await self._http.aclose()
