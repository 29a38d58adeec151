"""Following one Task from a terminal (`ordo invoke`): its changes from a watch (or a poll
where watching is forbidden), and progress lines built from its status — names, decisions and
reasons only, never content."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import kopf

from ..api.task import TERMINAL_PHASES
from ..operator.kube.auth import ssl_context
from ..operator.kube.client import ApiError, KubeClient, path
from ..operator.kube.errors import response_error, transport_error

POLL_SECONDS = 0.5
WATCH_SECONDS = 300
"""Server-side timeout of one watch request; the watch is then resumed where it stopped."""
MAX_RECONNECTS = 5
"""Consecutive failed watch connections before giving up (exit 2, the Task keeps running)."""


def watch_client(info: kopf.ConnectionInfo, keep: list[Any]) -> httpx.AsyncClient:
    headers = {"Accept": "application/json", "User-Agent": "ordo-invoke"}
    if info.token:
        headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
    auth = (
        httpx.BasicAuth(info.username, info.password) if info.username and info.password else None
    )
    return httpx.AsyncClient(
        base_url=info.server,
        headers=headers,
        auth=auth,
        verify=ssl_context(info, keep),
        timeout=httpx.Timeout(10.0, read=WATCH_SECONDS + 30.0),
    )


# -- following the Task ------------------------------------------------------------------------


class Progress:
    """Progress lines from successive statuses: phase, step, tool decisions and outcomes, child
    Tasks' phases (never arguments, results or output)."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self.step = 0
        self.calls: dict[tuple[Any, ...], tuple[Any, Any]] = {}
        self.children: dict[str, tuple[Any, bool]] = {}

    def update(self, status: dict[str, Any]) -> list[str]:
        lines: list[str] = []
        phase = status.get("phase")
        if phase and phase != self.phase and phase not in TERMINAL_PHASES:
            lines.append(f"phase {phase}")
        self.phase = phase or self.phase
        seen: dict[tuple[Any, ...], int] = {}
        for record in status.get("toolCalls") or []:
            if not isinstance(record, dict):
                continue
            base = (record.get("step"), record.get("callId"), record.get("tool"))
            seen[base] = seen.get(base, 0) + 1
            key = (*base, seen[base])
            now = (record.get("decision"), record.get("outcome"))
            before = self.calls.get(key, (None, None))
            if now == before:
                continue
            self.calls[key] = now
            where = f"step {record.get('step')}: tool {record.get('tool')}"
            if now[0] != before[0]:
                why = f" ({record['reason']})" if record.get("reason") else ""
                lines.append(f"{where} {now[0]}{why}")
            if now[1] and now[1] != before[1]:
                error = f" ({record['error']})" if record.get("error") else ""
                lines.append(f"{where} {now[1]}{error}")
        lines.extend(self._children(status))
        step = status.get("step")
        if isinstance(step, int) and step > self.step:
            self.step = step
            lines.append(f"step {step} done")
        return lines

    def _children(self, status: dict[str, Any]) -> list[str]:
        """A line for each child Task (`status.children`, docs/concepts.md#trees) whose phase
        or wait for an approval changed since the last status."""
        lines = []
        for child in _children_of(status):
            name = child["name"]
            now = (child.get("phase") or "Pending", child.get("awaitingApproval") is True)
            if self.children.get(name) == now:
                continue
            before = self.children.get(name, (None, False))
            self.children[name] = now
            if now[0] != before[0]:
                lines.append(_child_line(child))
            if now[1] and not before[1]:
                lines.append(f"child task/{name} waits for an approval (ordo approvals {name})")
        return lines


def _children_of(status: dict[str, Any]) -> list[dict[str, Any]]:
    children = status.get("children")
    if not isinstance(children, list):
        return []
    return [c for c in children if isinstance(c, dict) and isinstance(c.get("name"), str)]


def _child_line(child: dict[str, Any]) -> str:
    """`child task/NAME (agent A): Phase[: Reason][, N tokens]`."""
    phase = child.get("phase") or "Pending"
    text = f"child task/{child['name']} (agent {child.get('agent')}): {phase}"
    if child.get("reason") and child.get("reason") != phase:
        text += f": {child['reason']}"
    if child.get("tokens"):
        text += f", {child['tokens']} tokens"
    return text


def children_summary(status: dict[str, Any]) -> list[str]:
    """One line per child Task the Task started, how it ended (or where it is), for the end of
    `ordo invoke`; none for a Task that delegated nothing."""
    return ["  " + _child_line(child) for child in _children_of(status)]


def summary(status: dict[str, Any]) -> str:
    """One line on how the Task ended: phase, reason, message, steps, tokens."""
    phase = status.get("phase")
    text = str(phase)
    if status.get("reason") and status.get("reason") != phase:
        text += f": {status['reason']}"
    if status.get("message") and phase != "Succeeded":
        text += f": {status['message']}"
    tokens = (status.get("usage") or {}).get("totalTokens")
    extra = [f"{status.get('step') or 0} step(s)"] + ([f"{tokens} tokens"] if tokens else [])
    return f"{text} ({', '.join(extra)})"


async def task_updates(
    kube: KubeClient, http: httpx.AsyncClient, namespace: str, name: str, version: str
) -> AsyncIterator[dict[str, Any] | None]:
    """The Task each time it changes (None once it is deleted): a watch from `version`,
    resumed after the server closes it, re-listed after 410 Gone; a GET every POLL_SECONDS
    when a watch is forbidden."""
    url = path("Task", namespace)
    watch = True
    failures = 0
    rv: str | None = version
    while True:
        if rv is None or not watch:
            obj = await kube.get("Task", namespace, name)
            yield obj
            if obj is None:
                return
            rv = str(obj["metadata"].get("resourceVersion", ""))
            if not watch:
                await asyncio.sleep(POLL_SECONDS)
                continue
        params = {
            "watch": "1",
            "fieldSelector": f"metadata.name={name}",
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        try:
            async with http.stream("GET", url, params=params) as response:
                if response.status_code in (403, 405):
                    watch = False
                    continue
                if response.status_code == 410:
                    rv = None
                    continue
                if response.status_code >= 400:
                    await response.aread()
                    raise response_error(response)
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    failures = 0
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        if obj.get("code") == 410:
                            rv = None
                            break
                        raise ApiError(
                            int(obj.get("code") or 0),
                            str(obj.get("reason", "")),
                            str(obj.get("message", ""))[:300],
                        )
                    rv = str(obj.get("metadata", {}).get("resourceVersion") or rv)
                    if event.get("type") == "DELETED":
                        yield None
                        return
                    if event.get("type") != "BOOKMARK":
                        yield obj
        except (httpx.TransportError, ValueError) as exc:
            failures += 1
            if failures > MAX_RECONNECTS:
                if isinstance(exc, httpx.TransportError):
                    raise transport_error(exc) from None
                raise ApiError(0, "InvalidResponse", type(exc).__name__) from None
            await asyncio.sleep(min(0.5 * 2**failures, 5.0))
