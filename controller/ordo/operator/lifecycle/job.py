"""The job of one Task in this process (started by the scheduler's dispatcher on a
`StartJob` action): its state, fed by the Task's watch events (`NotifyJob`), and its bounded
loop of attempts (process.py runs one attempt: wait, reserve, claim, run).

An attempt ends in a `Step`. Only failures consume an attempt: a transient Kubernetes API
failure (transport error, 429, 5xx), a claim or reservation that did not settle, and an
abandoned run (this execution lost the Task: look again after a backoff). Waiting for the
caches to sync, for references (bounded by their grace period) and for approvals does not.
Anything else ends the Task `Failed/InternalError`: a run never fails into a retry
(`execute` always returns an outcome), so no model request is repeated because the
operator stumbled. A job that runs out of attempts leaves the Task for the periodic sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, assert_never

from ..kube.cache import NotSynced
from ..kube.client import ApiError
from ..tasks.childwait import awaiting_children
from ..tasks.claim import NotSettled
from ..tasks.references import Missing
from ..tasks.runner import Abandoned, Parked
from .view import TaskView

RETRY_FIRST_SECONDS = 2.0
RETRY_MAX_SECONDS = 30.0
RETRY_ATTEMPTS = 6
"""Attempts of one job after transient API failures (about 90 s in all)."""
log = logging.getLogger("ordo.operator")


@dataclass
class Job:
    task: asyncio.Task[None] | None = None
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    """Set on every watch event of the Task or its batch Job (Job mode: re-check now)."""
    awaiting: bool = False
    """The Task's last event showed `AwaitingApproval=True` (approvals.py gates the job)."""
    children: bool = False
    """The Task's last event showed `AwaitingChildren=True` (childwait.py gates the job)."""
    seen: dict[str, Any] | None = None
    """The Task as the job last looked at it after a refused write (`TaskProcess.fresh`)."""
    revisit: dict[str, Any] | None = None
    """Set when another process (or a write of ours whose answer was lost) reserved the
    Task: once the job ends, look at the Task again if its events stop for a lease period."""
    body: dict[str, Any] | None = None
    """The Task as its latest watch event showed it, not yet used. A Pending Task is claimed
    from it instead of a GET: the claim's writes are fenced by its resourceVersion, so a stale
    body costs one conflict and a re-read, never a wrong claim."""

    @staticmethod
    def of(view: TaskView) -> Job:
        job = Job(awaiting=view.awaiting, children=awaiting_children(view.body), body=view.body)
        if view.stopping:
            job.cancel.set()
        return job

    def notify(self, cancel: bool, awaiting: bool, body: dict[str, Any]) -> None:
        """A watch event of the Task (a `NotifyJob` action)."""
        if cancel:
            self.cancel.set()
        self.awaiting = awaiting
        self.children = awaiting_children(body)
        self.body = body
        self.wake.set()

    def taken_elsewhere(self) -> bool:
        """The Task's latest watch event shows it reserved, claimed or ended. Asked only of a
        Task that was not reserved when its job began, before the job reserves it (a new Task
        is reserved only once it has a slot): so another process did."""
        if self.body is None:
            return False
        view = TaskView.of(self.body)
        return view is not None and (view.finalized or view.phase not in (None, "Pending"))

    def take_pending(self) -> dict[str, Any] | None:
        """The watched body if it shows a Pending (never claimed) Task, once; else None."""
        body, self.body = self.body, None
        if body is None or (body.get("status") or {}).get("phase") not in (None, "Pending"):
            return None
        return body


@dataclass(frozen=True, slots=True)
class Done:
    """Nothing more for this job: the Task ran, ended, is gone, or is another's."""


@dataclass(frozen=True, slots=True)
class Unsynced:
    """The cache lost its watch meanwhile: wait for it again."""


Step = Done | Parked | Abandoned | NotSettled | Missing | Unsynced
"""How one attempt ended (process.py)."""


async def attempts(
    job: Job,
    attempt: Callable[[], Awaitable[Step]],
    give_up: Callable[[Exception], Awaitable[None]],
) -> None:
    """Run `attempt` until it is done, within RETRY_ATTEMPTS failures (module docstring)."""
    backoff = RETRY_FIRST_SECONDS
    failures = 0
    while True:
        try:
            step = await attempt()
        except asyncio.CancelledError:
            return
        except NotSynced:
            step = Unsynced()
        except ApiError as exc:
            if not exc.transient:
                await give_up(exc)
                return
            failures += 1
            if failures == RETRY_ATTEMPTS:
                await give_up(exc)
                return
            log.warning(
                "kubernetes API failure; retrying the task job",
                extra={
                    "ordo": {
                        "errorStatus": exc.status,
                        "errorReason": exc.api_reason,
                        "attempt": failures,
                        "retryInSeconds": backoff,
                    }
                },
            )
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, RETRY_MAX_SECONDS)
            continue
        except Exception as exc:
            await give_up(exc)
            return
        match step:
            case Done():
                return
            case Parked(approvals=approvals, children=children):
                # stopped for approvals or children: wait for them, holding no slot
                job.awaiting, job.children = approvals, children
            case Unsynced():
                pass
            case Missing(delay=delay):
                job.wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(job.wake.wait(), delay)
            case Abandoned() | NotSettled():
                failures += 1
                if isinstance(step, NotSettled) and failures == RETRY_ATTEMPTS:
                    log.error(
                        f"the {step.what} did not settle; the task is left for the next sweep"
                    )
                    return
                # Abandoned: nothing was written for that run; look at the Task again
                # (another holder's lease is waited for, a finished Task is left alone).
                log.info(
                    "run abandoned; looking at the task again"
                    if isinstance(step, Abandoned)
                    else f"the {step.what} did not settle; trying again",
                    extra={"ordo": {"attempt": failures, "retryInSeconds": backoff}},
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RETRY_MAX_SECONDS)
                if failures == RETRY_ATTEMPTS:
                    return
            case _:
                assert_never(step)
