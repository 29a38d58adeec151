"""`ordo run`: run Tasks from manifests on this machine, no cluster needed.

Objects come from the manifest files; Secret values from Secret manifests in the set
(`data` or `stringData`), which follow the operator's rule (`credentials.release`, enforced:
the label `ordo.dev/credential: "true"` and the annotation `ordo.dev/allowed-hosts`), or from
environment variables named `ORDO_SECRET_<SECRET NAME>_<KEY>` (upper case, every character
outside A-Z and 0-9 as `_`), e.g. `ORDO_SECRET_OPENAI_API_KEY` for Secret `openai`, key
`api-key`: those are the user's own and go wherever the manifests send them.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from ..api import Task
from ..api.manifests import ManifestSet
from ..credentials import Destination, Release, release, visible_keys
from ..engine.events import (
    Event,
    ModelResponded,
    RunFinished,
    StepStarted,
    ToolDecided,
    ToolFinished,
)
from ..runtime import Prepared, TaskOutcome, execute
from ..runtime.status import to_patch as status_patch
from .localapproval import LocalApprover


def secret_env_name(name: str, key: str) -> str:
    return "ORDO_SECRET_" + re.sub(r"[^A-Z0-9]", "_", f"{name}_{key}".upper())


class ManifestStore:
    """An ObjectStore over a parsed manifest set (plus environment variables for Secrets)."""

    def __init__(self, mset: ManifestSet, environ: dict[str, str] | None = None) -> None:
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        for _, obj in mset.objects:
            body = obj.to_dict()
            body.setdefault("metadata", {}).setdefault("namespace", obj.namespace)
            body["metadata"].setdefault("generation", 1)
            self._objects[(obj.kind, obj.namespace, obj.name)] = body
        self._secrets: dict[tuple[str, str], dict[str, Any]] = {}
        for doc in mset.secrets:
            meta = doc.body.get("metadata") or {}
            self._secrets[(meta.get("namespace") or "default", meta.get("name", ""))] = doc.body
        self._environ = environ if environ is not None else dict(os.environ)

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self._objects.get((kind, namespace, name))

    async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        return [b for (k, ns, _), b in self._objects.items() if k == kind and ns == namespace]

    async def credential(
        self, namespace: str, name: str, key: str, dest: Destination | None
    ) -> Release:
        """A Secret manifest's value as the operator would release it (raises
        CredentialRefused likewise); else the environment variable's, for any destination."""
        body = self._secrets.get((namespace, name))
        released = release(body, name, key, dest, "Enforce")
        if released.value is not None:
            return released
        return Release(self._environ.get(secret_env_name(name, key)))

    async def secret_keys(self, namespace: str, name: str) -> builtins.list[str] | None:
        """Key names of the opted-in Secret manifest in the set, or None when there is none."""
        return visible_keys(self._secrets.get((namespace, name)), "Enforce")

    def secret_hint(self, name: str, key: str) -> str:
        return (
            f"under `ordo run`, set {secret_env_name(name, key)} or add a Secret manifest "
            f'{name!r} with key {key!r} and the label ordo.dev/credential: "true"'
        )


@dataclass
class Progress:
    """Live view of one Task (names and counts only, never content)."""

    name: str
    agent: str
    phase: str = "Pending"
    step: int = 0
    tokens: int = 0
    last: str = ""
    started: float = field(default_factory=time.monotonic)

    async def __call__(self, event: Event) -> None:
        if isinstance(event, StepStarted):
            self.phase, self.step, self.last = "Running", event.step, "calling model"
        elif isinstance(event, ModelResponded):
            self.tokens += event.usage.total_tokens
            self.last = (
                f"model answered ({event.tool_calls} tool call(s))"
                if event.tool_calls
                else "model answered"
            )
        elif isinstance(event, ToolDecided):
            r = event.record
            self.last = f"{r.tool}: {r.decision} ({r.reason})"
        elif isinstance(event, ToolFinished):
            self.last = f"{event.tool}: {event.outcome}"
        elif isinstance(event, RunFinished):
            self.phase, self.last = event.result.phase, event.result.reason


def _table(rows: Sequence[Progress]) -> Table:
    table = Table(title="ordo run", title_justify="left", expand=False)
    for col in ("Task", "Agent", "Phase", "Step", "Tokens", "Last event"):
        table.add_column(col)
    colours = {"Succeeded": "green", "Failed": "red", "Cancelled": "yellow", "Running": "cyan"}
    for p in rows:
        colour = colours.get(p.phase, "white")
        table.add_row(
            p.name, p.agent, f"[{colour}]{p.phase}[/]", str(p.step), str(p.tokens), p.last
        )
    return table


class RunInterrupted(Exception):
    """`ordo run` was interrupted (Ctrl-C): the Tasks that were still running, and those that
    had finished, by name."""

    def __init__(self, running: Sequence[str], finished: Sequence[str]) -> None:
        self.running = list(running)
        self.finished = list(finished)
        text = "interrupted; still running: " + (", ".join(self.running) or "none")
        if self.finished:
            text += "; finished: " + ", ".join(self.finished)
        super().__init__(text)


async def run_tasks(
    mset: ManifestSet,
    *,
    console: Console | None = None,
    environ: dict[str, str] | None = None,
    approver: LocalApprover | None = None,
) -> list[tuple[Task, TaskOutcome]]:
    """Run every Task of the set concurrently; the live view goes to `console` if given.
    Calls that need a human approval are decided by `approver` (default: rejected, nobody
    can be asked). Cancelled (Ctrl-C under `asyncio.run`), it stops every run and raises
    RunInterrupted."""
    approver = approver or LocalApprover("none")
    store = ManifestStore(mset, environ)
    tasks = [obj for _, obj in mset.objects if isinstance(obj, Task)]
    views = [Progress(t.name, t.spec.agent_ref) for t in tasks]
    finished: set[str] = set()

    async def one(task: Task, view: Progress) -> TaskOutcome:
        decider = approver.for_task(task.name)

        async def prepare(_: Any) -> Prepared:
            return Prepared(approval_decider=decider)

        outcome = await execute(task, store, listeners=[view], prepare=prepare)
        view.phase, view.last = outcome.phase, outcome.reason
        finished.add(task.name)
        return outcome

    jobs = asyncio.gather(*(one(t, v) for t, v in zip(tasks, views, strict=True)))
    try:
        if console is None:
            outcomes = await jobs
        else:
            with Live(
                _table(views), console=console, refresh_per_second=8, transient=False
            ) as live:
                approver.pause = lambda paused: live.stop() if paused else live.start()
                while not jobs.done():
                    live.update(_table(views))
                    await asyncio.sleep(0.1)
                outcomes = await jobs
                live.update(_table(views))
    except asyncio.CancelledError:
        jobs.cancel()
        with contextlib.suppress(BaseException):
            await jobs
        running = [t.name for t in tasks if t.name not in finished]
        raise RunInterrupted(running, [t.name for t in tasks if t.name in finished]) from None
    return list(zip(tasks, outcomes, strict=True))


def task_document(task: Task, outcome: TaskOutcome) -> dict[str, Any]:
    body = task.to_dict()
    body["status"] = status_patch(outcome.status())
    return body
