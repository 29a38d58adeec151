"""A list+watch informer: the objects of one ordo kind in one namespace (or in all), kept
current by a watch, as client-go's reflector does.

- The first LIST (paged) fills the index and gives the resourceVersion the WATCH starts at;
  the watch asks for bookmarks, so a quiet kind still advances its resourceVersion.
- A watch the server ends (its timeout) is resumed from the last resourceVersion at once.
- `410 Gone` (the resourceVersion is too old: HTTP status, or an `ERROR` event) or any other
  `ERROR` event: relist. A relist replaces the index wholesale.
- A failed request (transport error, 5xx, 403 ...) is retried with a bounded, jittered
  backoff; the watch is resumed, or the kind relisted when it never listed.

`synced` is False until the first LIST completed and again from the moment the watch broke
until a LIST or a resumed WATCH is accepted by the API: readers must then treat the kind as
unreadable (cache.py fails closed), never as empty. A server that ends a stream cleanly is
not "broken": the resume is immediate, and only its failure clears `synced`.

Memory: only what the API returns for the kind, minus `metadata.managedFields` and the
`kubectl.kubernetes.io/last-applied-configuration` annotation (nothing reads either; they
are often larger than the spec). Objects are replaced, never mutated, so a reader holding a
body keeps a consistent snapshot.

Events (`on_event`, for a feed such as lifecycle/feed.py): `ADDED`/`MODIFIED`/`DELETED` as the
watch reports them; after every LIST, `DELETED` for each object the LIST no longer returned
(deleted while the watch was down), then None for each object it returned (as kopf reports
listed objects). With `index=False` the informer keeps only each object's name, namespace
and uid (to tell what a relist dropped), and the listener gets the parsed body itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import random
from collections.abc import Callable, Iterable
from typing import Any

from ...api import GROUP, KINDS
from .client import ApiError, KubeClient

log = logging.getLogger("ordo.operator.kube.cache")

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
WATCH_TIMEOUT_SECONDS = 300
"""How long one watch request lasts before the server ends it and it is resumed (kopf's
watches in this operator use the same)."""
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 15.0

Body = dict[str, Any]
EventListener = Callable[[str | None, Body], None]
"""Called with (event type, body); see the module docstring. It must not block."""
RestartListener = Callable[[str, str], None]
"""Called with (kind, reason) when a watch is restarted: `expired` (410 Gone), `error` (another
`ERROR` event), `failed` (a request failed or a stream broke)."""


class Expired(Exception):
    """The watch cannot go on from its resourceVersion (410 Gone, or another `ERROR`
    event): relist."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def strip(body: Body) -> Body:
    """`body` without what nothing reads (managedFields, kubectl's last-applied copy)."""
    meta = body.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict) and LAST_APPLIED in annotations:
            meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return body


def _key(body: Body) -> tuple[str, str] | None:
    meta = body.get("metadata") or {}
    name = meta.get("name")
    return (str(meta.get("namespace") or ""), str(name)) if name else None


class Informer:
    """See the module docstring. `run()` until cancelled; read `get`/`list` only while
    `synced`."""

    def __init__(
        self,
        client: KubeClient,
        kind: str,
        namespace: str | None,
        *,
        on_state: Callable[[Informer], None] | None = None,
        on_restart: RestartListener | None = None,
        backoff: tuple[float, float] = (BACKOFF_FIRST, BACKOFF_MAX),
        watch_timeout: int = WATCH_TIMEOUT_SECONDS,
        on_event: EventListener | None = None,
        index: bool = True,
    ) -> None:
        self.client = client
        self.kind = kind
        self.namespace = namespace
        """None: every namespace (one cluster-wide list and watch)."""
        self.synced = False
        self.resource_version = ""
        self.lists = 0
        """LISTs completed (the first one and every relist)."""
        self._objects: dict[str, dict[str, Body]] = {}
        """namespace -> name -> body."""
        self._on_state = on_state
        self._on_restart = on_restart
        self._backoff = backoff
        self._watch_timeout = watch_timeout
        self._on_event = on_event
        self._index = index
        self._tick = asyncio.Event()
        self._expired_in_row = False

    # -- reading --------------------------------------------------------------------------

    def get(self, namespace: str, name: str) -> Body | None:
        return self._objects.get(namespace, {}).get(name)

    def list(self, namespace: str) -> list[Body]:
        return list(self._objects.get(namespace, {}).values())

    def __len__(self) -> int:
        return sum(len(objects) for objects in self._objects.values())

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Return once `predicate()` holds; it is re-checked after every applied event and
        every change of `synced` (no polling)."""
        while not predicate():
            await self._tick.wait()

    def _notify(self) -> None:
        tick, self._tick = self._tick, asyncio.Event()
        tick.set()

    # -- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        delay = self._backoff[0]
        listed = False
        while True:
            try:
                if not listed:
                    await self._relist()
                    listed = True
                await self._watch()
                delay = self._backoff[0]  # the stream ran and ended: resume at once
            except asyncio.CancelledError:
                raise
            except Expired as exc:
                listed = False
                self._set_synced(False)
                self._restarted(exc.reason)
                if self._expired_in_row:  # expired again right after a relist: back off
                    await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                    delay = min(delay * 2, self._backoff[1])
                self._expired_in_row = True
            except ApiError as exc:
                self._set_synced(False)
                if exc.status == 410:
                    listed = False
                    self._restarted("expired")
                    continue
                # A refused or lost request: back off, then resume the watch where it was
                # (a resourceVersion the server no longer has answers 410: relist).
                self._restarted("failed")
                log.warning(
                    _failure_message(self.kind, exc),
                    extra={
                        "ordo": {
                            "kind": self.kind,
                            "errorStatus": exc.status,
                            "errorReason": exc.api_reason,
                            "retryInSeconds": round(delay, 2),
                        }
                    },
                )
                await asyncio.sleep(delay * random.uniform(0.8, 1.2))
                delay = min(delay * 2, self._backoff[1])

    async def _relist(self) -> None:
        items, version = await self.client.list_versioned(self.kind, self.namespace)
        previous = self._objects
        objects: dict[str, dict[str, Body]] = {}
        listed: list[Body] = []
        for item in items:
            key = _key(item)
            if key is not None:
                listed.append(strip(item))
                objects.setdefault(key[0], {})[key[1]] = self._kept(item)
        self._objects = objects
        self.resource_version = version
        self.lists += 1
        self._set_synced(True)
        self._notify()
        if self._on_event is not None:
            for namespace, names in previous.items():
                now = objects.get(namespace, {})
                for name, body in names.items():
                    if name not in now:
                        self._emit("DELETED", body)
            for item in listed:
                self._emit(None, item)

    async def _watch(self) -> None:
        events = self.client.watch(
            self.kind,
            self.namespace,
            self.resource_version,
            timeout_seconds=self._watch_timeout,
            on_open=lambda: self._set_synced(True),  # resumed: the index is current again
        )
        async with contextlib.aclosing(events):  # an ERROR event closes the stream at once
            async for event in events:
                self._apply(event)

    def _apply(self, event: Body) -> None:
        kind = event.get("type")
        body = event.get("object")
        if not isinstance(body, dict):
            return
        if kind == "ERROR":
            code = body.get("code")
            if code == 410:
                raise Expired("expired")
            log.warning(
                "watch ended with an error event; relisting",
                extra={"ordo": {"kind": self.kind, "errorStatus": code}},
            )
            raise Expired("error")
        self._expired_in_row = False
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            key = _key(body)
            if key is not None:
                objects = self._objects.setdefault(key[0], {})
                if kind == "DELETED":
                    objects.pop(key[1], None)
                else:
                    objects[key[1]] = self._kept(strip(body))
                if self._on_event is not None:
                    self._emit(kind, body)
        version = (body.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = str(version)
        self._notify()

    def _kept(self, body: Body) -> Body:
        """What the index holds of `body`: all of it, or (`index=False`) its identity."""
        if self._index:
            return body
        meta = body.get("metadata") or {}
        return {"metadata": {k: meta[k] for k in ("name", "namespace", "uid") if k in meta}}

    def _emit(self, kind: str | None, body: Body) -> None:
        """Hand one event to the listener: a copy if the index holds the body (listeners
        keep and change theirs). A failing listener is logged; the watch goes on."""
        assert self._on_event is not None
        try:
            self._on_event(kind, copy.deepcopy(body) if self._index else body)
        except Exception:
            log.exception("an event listener failed", extra={"ordo": {"kind": self.kind}})

    def _set_synced(self, value: bool) -> None:
        if self.synced != value:
            self.synced = value
            if self._on_state is not None:
                self._on_state(self)
            self._notify()

    def _restarted(self, reason: str) -> None:
        if self._on_restart is not None:
            self._on_restart(self.kind, reason)


def run_all(informers: Iterable[tuple[str, Informer]]) -> list[asyncio.Task[None]]:
    """Start `informer.run()` for each (task name, informer); see `cancel_all`."""
    return [asyncio.create_task(informer.run(), name=name) for name, informer in informers]


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel the informer tasks and wait until they have stopped; empties `tasks`."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    tasks.clear()


def _failure_message(kind: str, exc: ApiError) -> str:
    """The log line of a failed list or watch; a 404 means the API does not serve the kind:
    the operator runs ahead of its CRDs, and the line says which one to install."""
    if exc.status == 404 and kind in KINDS:
        return (
            f"the {KINDS[kind].plural}.{GROUP} CRD is not installed: no Task is claimed "
            "until it is (install or upgrade the CRDs before the operator, "
            "docs/operations.md); retrying"
        )
    return "list or watch failed; retrying"
