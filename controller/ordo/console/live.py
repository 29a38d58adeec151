"""Live updates: a Server-Sent Events stream per page view, fed by the user's own watches of
Tasks (one per namespace the page reads, or one across all; one on a Task page), closed when
the page goes (the browser drops the stream and Starlette cancels the generator, which closes
the watches). The stream carries no object content, only `changed` (the page fetches its
fragment again, under the same checks as any request), `reload` (the watch's history
expired: the page reloads) and `refused` (the API server's answer to the watch)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from ..operator.kube.client import ApiError, KubeClient
from .access import refusal_text

HEARTBEAT = 15.0
"""Seconds between comments on an idle stream (a closed page is noticed on the next write)."""
WATCH_SECONDS = 240
MAX_STREAMS = 16
"""Streams open at once (each holds watches on the user's connection pool); more are refused."""


class Streams:
    """How many streams are open (bounded by `MAX_STREAMS`)."""

    def __init__(self, limit: int = MAX_STREAMS) -> None:
        self.limit = limit
        self.open = 0


def sse(event: str, data: str = "") -> str:
    lines = "".join(f"data: {line}\n" for line in (data.splitlines() or [""]))
    return f"event: {event}\n{lines}\n"


async def _watch(
    kube: KubeClient,
    namespace: str | None,
    version: str,
    field_selector: str | None,
    out: asyncio.Queue[tuple[str, str]],
) -> None:
    """Watch Tasks from `version`, resuming after each server timeout from the newest version
    seen; put `changed` on each change, `reload` when the history is gone, `refused` and stop
    when the API server refuses."""
    while True:
        try:
            async for event in kube.watch(
                "Task",
                namespace,
                version,
                timeout_seconds=WATCH_SECONDS,
                field_selector=field_selector,
            ):
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    await out.put(("reload", ""))
                    return
                seen = str((obj.get("metadata") or {}).get("resourceVersion") or "")
                version = seen or version
                if kind != "BOOKMARK":
                    await out.put(("changed", ""))
        except ApiError as exc:
            if exc.status == 410:
                await out.put(("reload", ""))
            else:
                await out.put(("refused", refusal_text(exc)))
            return


async def stream(
    kube: KubeClient,
    namespaces: list[str | None],
    version: str,
    streams: Streams,
    *,
    field_selector: str | None = None,
) -> AsyncIterator[str]:
    """The SSE text of one page view: the watches' news, coalesced, and heartbeats."""
    if streams.open >= streams.limit:
        yield sse("refused", "too many live pages open; reload this one later")
        return
    streams.open += 1
    queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
    watches = [
        asyncio.create_task(_watch(kube, ns, version, field_selector, queue)) for ns in namespaces
    ]
    try:
        yield "retry: 5000\n\n"
        while True:
            try:
                event, data = await asyncio.wait_for(queue.get(), HEARTBEAT)
            except TimeoutError:
                yield ": idle\n\n"
                continue
            while not queue.empty() and event == "changed":  # a burst is one refresh
                event, data = queue.get_nowait()
            yield sse(event, data)
            if event == "reload":
                return
    finally:
        streams.open -= 1
        for task in watches:
            task.cancel()
        for task in watches:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
