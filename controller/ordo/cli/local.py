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
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

from ..api import Task
from ..api.manifests import ManifestSet
from ..credentials import Destination, Release, release, visible_keys
from ..runtime import Prepared, TaskOutcome, execute
from ..runtime.status import to_patch as status_patch
from ..runtime.team import chain_entry
from .localapproval import LocalApprover
from .localtree import LocalDelegator, Progress, Tree


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


def _table(rows: Sequence[Progress]) -> Table:
    table = Table(title="ordo run", title_justify="left", expand=False)
    table.add_column("Task", overflow="fold")  # a child's name whole, over lines if need be
    for col in ("Agent", "Phase", "Step", "Tokens", "Last event"):
        table.add_column(col)
    colours = {"Succeeded": "green", "Failed": "red", "Cancelled": "yellow", "Running": "cyan"}
    for p in rows:
        colour = colours.get(p.phase, "white")
        name = f"{'  ' * (p.depth - 1)}└ {p.name}" if p.depth else p.name
        table.add_row(name, p.agent, f"[{colour}]{p.phase}[/]", str(p.step), str(p.tokens), p.last)
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
    tree: Tree | None = None,
) -> list[tuple[Task, TaskOutcome]]:
    """Run every Task of the set concurrently, and the child Tasks they delegate to
    (cli/localtree.py), each to its end; the live view goes to `console` if given. Calls that
    need a human approval are decided by `approver` (default: rejected, nobody can be asked).
    Returns every Task that ran, in tree order (children under their parent: a child has the
    label `ordo.dev/parent`; the manifests' own are the objects of `mset`). Cancelled (Ctrl-C under `asyncio.run`), it stops every run,
    children included, and raises RunInterrupted. `tree`: where the rows go (to watch them)."""
    approver = approver or LocalApprover("none")
    store = ManifestStore(mset, environ)
    tasks = [obj for _, obj in mset.objects if isinstance(obj, Task)]
    tree = tree if tree is not None else Tree()
    views = tree.rows
    finished: set[str] = set()

    async def one(task: Task, view: Progress) -> TaskOutcome:
        decider = approver.for_task(task.name)

        async def child(body: Task) -> TaskOutcome:
            below = Progress(body.name, chain_entry(body), view.depth + 1)
            tree.add(body, below, view)
            return await one(body, below)

        async def prepare(_: Any) -> Prepared:
            return Prepared(approval_decider=decider, delegator=LocalDelegator(task, child))

        async def prepare_team(_: Any) -> Prepared:  # a Team Task: its members are children
            return Prepared(delegator=LocalDelegator(task, child))

        outcome = await execute(
            task, store, listeners=[view], prepare=prepare, prepare_team=prepare_team
        )
        view.ended(outcome)
        tree.outcomes[task.name] = outcome
        finished.add(task.name)
        return outcome

    roots = [Progress(t.name, chain_entry(t)) for t in tasks]
    for t, v in zip(tasks, roots, strict=True):
        tree.add(t, v)
    jobs = asyncio.gather(*(one(t, v) for t, v in zip(tasks, roots, strict=True)))
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
        names = [v.name for v in views]
        running = [n for n in names if n not in finished]
        raise RunInterrupted(running, [n for n in names if n in finished]) from None
    assert len(outcomes) == len(tasks)
    return tree.ran()


def task_document(task: Task, outcome: TaskOutcome) -> dict[str, Any]:
    body = task.to_dict()
    body["status"] = status_patch(outcome.status())
    return body
