"""Execution mode `Job`: one batch/v1 Job per Task, running the same engine in its own pod.

The scheduler (lifecycle/scheduler.py, with the Job-mode steps in steps.py) claims the Task and hands
it to the JobSupervisor here, which creates the Job and watches it while the Task runs; the
pod runs `ordo run-task` (podrunner.py), which takes the execution lease and runs the Task
through the same Runner as the operator's own process.

The pure parts live beside it: mode selection, the settings and the Job manifest (and why
each of its fields is what it is) in spec.py; how a failed Job or a pod that cannot start
maps to a Task reason in failures.py. This module re-exports both, so `ordo.operator.jobmode.supervisor`
still offers every name it did.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ...api import TERMINAL_PHASES
from ...engine.state import RunResult
from ...runtime import TaskOutcome
from ..jobsettings import JOB_CANCEL_GRACE_SECONDS, JOB_POLL_SECONDS
from ..kube.client import ApiError, KubeClient
from ..settings import JobSettings
from ..tasks import sealing
from ..tasks.approvals import awaiting
from ..tasks.checkpoint import CheckpointStore, decode
from ..tasks.checkpoint import name_for as checkpoint_name
from ..tasks.checkpointdata import subject_of
from ..tasks.childwait import awaiting_children
from ..tasks.lease import remaining as lease_remaining
from ..tasks.runner import Parked
from ..tasks.writer import TaskWriter
from ..telemetry.metrics import Metrics
from .failures import (
    CONTAINER_NOT_CREATED,
    IMAGE_NEVER_AVAILABLE,
    IMAGE_PULL_FAILING,
    JobFailure,
    finished,
    job_name_of,
    job_problem,
    pod_problem,
    pods_active,
)
from .spec import (
    COMPONENT,
    CONTAINER,
    EXECUTION_ANNOTATION,
    JOB_NAME_LABEL,
    MANAGED_BY,
    PREFIX,
    RUNNER_UID,
    TASK_LABEL,
    build_job,
    deadline_seconds,
    job_name,
    quantity,
    remaining_timeout,
    resources,
    runner_key_secret,
    runs_in_job,
    select_mode,
)

__all__ = [
    "COMPONENT",
    "CONTAINER",
    "CONTAINER_NOT_CREATED",
    "EXECUTION_ANNOTATION",
    "IMAGE_NEVER_AVAILABLE",
    "IMAGE_PULL_FAILING",
    "JOB_NAME_LABEL",
    "MANAGED_BY",
    "PREFIX",
    "RUNNER_UID",
    "TASK_LABEL",
    "JobFailure",
    "JobGone",
    "JobSettings",
    "JobSupervisor",
    "build_job",
    "deadline_seconds",
    "finished",
    "job_name",
    "job_name_of",
    "job_problem",
    "pod_problem",
    "pods_active",
    "quantity",
    "remaining_timeout",
    "resources",
    "runs_in_job",
    "select_mode",
    "task_terminal",
]

log = logging.getLogger("ordo.operator")


def parked(task: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    """The Task's run stopped to wait (approvals or child Tasks) and its Job's pod ended
    successfully (podrunner.py exits 0 then)."""
    waits = awaiting(dict(task)) or awaiting_children(dict(task))
    return waits and bool((job.get("status") or {}).get("succeeded"))


def task_terminal(task: Mapping[str, Any] | None) -> bool:
    return task is not None and (task.get("status") or {}).get("phase") in TERMINAL_PHASES


class JobGone(Exception):
    """The Task's Job disappeared while the Task is still running (deleted by someone, or
    expired after the operator was down): the scheduler resumes the Task in a new Job."""


class JobSupervisor:
    """Creates the Job of a claimed Task and watches it until the Task ends. The pod writes
    the Task's progress and outcome; the supervisor ends the Task only when the pod cannot
    (OOMKilled, image unavailable, Job failed or past its deadline, cancel not honoured in
    time), and then only after every pod of the Job has stopped and the execution lease is
    free, so its terminal write never races a running pod."""

    def __init__(
        self,
        client: KubeClient,
        writer: TaskWriter,
        metrics: Metrics,
        settings: JobSettings,
        *,
        poll_seconds: float = JOB_POLL_SECONDS.default,
        cancel_grace_seconds: float = JOB_CANCEL_GRACE_SECONDS.default,
        stop_timeout_seconds: float = 60.0,
        keep_checkpoints: bool = False,
    ) -> None:
        self.client = client
        self.writer = writer
        self.metrics = metrics
        self.settings = settings
        self.poll_seconds = poll_seconds
        self.cancel_grace_seconds = cancel_grace_seconds
        self.stop_timeout_seconds = stop_timeout_seconds
        self.keep_checkpoints = keep_checkpoints

    async def start(
        self, task: dict[str, Any], agent: Mapping[str, Any] | None, execution_id: str
    ) -> None:
        """Create the Job for the claim `execution_id` (finding our own after a lost
        answer; stopping a leftover Job of an earlier execution first)."""
        ns, name = task["metadata"]["namespace"], job_name(task)
        manifest = build_job(
            task,
            agent,
            execution_id,
            self.settings,
            remaining_timeout=remaining_timeout(task, agent, time.time()),
            key_secret_exists=await self._runner_key_exists(ns),
        )
        for _ in range(5):
            try:
                await self.client.create("Job", ns, manifest)
                return
            except ApiError as exc:
                if not (exc.conflict or exc.transient):
                    raise
            current = await self.client.get("Job", ns, name)
            if current is None:
                continue
            owner = ((current.get("metadata") or {}).get("annotations") or {}).get(
                EXECUTION_ANNOTATION
            )
            if owner == execution_id:
                return
            log.info("a Job of an earlier execution exists; stopping it first")
            await self.client.delete("Job", ns, name, propagation="Background")
            await self._wait_job_gone(ns, name)
        raise ApiError(409, "Conflict", f"Job {name} could not be created")

    async def supervise(
        self,
        task: dict[str, Any],
        execution_id: str,
        wake: asyncio.Event,
        cancel: asyncio.Event,
        started: float | None = None,
    ) -> Parked | None:
        """Watch the Task's Job until the Task ends; raises `JobGone` if the Job disappears
        while the Task still runs (and no cancel was asked). `Parked` when the pod's run
        stopped to wait for approvals or child Tasks and its Job completed: the Job is
        removed (the next one, of the same name, resumes the run) and the caller waits
        holding no slot."""
        ns, name = task["metadata"]["namespace"], task["metadata"]["name"]
        jname = job_name(task)
        cancel_deadline: float | None = None
        self.metrics.jobs_running.inc()
        try:
            while True:
                wake.clear()
                current = await self.client.get("Task", ns, name)
                if current is None:
                    return None  # deleted: garbage collection removes the Job
                status = current.get("status") or {}
                if task_terminal(current):
                    self._count(current, started)
                    return None
                if status.get("executionId") != execution_id:
                    return None  # another execution owns the Task now
                spec = current.get("spec") or {}
                if cancel_deadline is None and (
                    cancel.is_set()
                    or spec.get("cancel")
                    or (current.get("metadata") or {}).get("deletionTimestamp")
                ):
                    # The pod sees the cancel too and ends the run at its next step boundary;
                    # past the grace (or with no pod running yet) the Job is stopped.
                    cancel_deadline = time.monotonic() + self.cancel_grace_seconds
                job = await self.client.get("Job", ns, jname)
                if job is None or (job.get("metadata") or {}).get("deletionTimestamp"):
                    if cancel_deadline is None:
                        raise JobGone(jname)
                    job = None
                if job is not None and cancel_deadline is None and parked(current, job):
                    await self.client.delete("Job", ns, jname, propagation="Background")
                    await self._wait_job_gone(ns, jname)
                    return Parked(awaiting(current), awaiting_children(current))
                pods = await self.client.list("Pod", ns, f"{JOB_NAME_LABEL}={jname}")
                failure = None
                if job is not None:
                    failure = pod_problem(
                        pods, datetime.now(UTC), self.settings.image_pull_grace_seconds
                    ) or job_problem(job, pods)
                if failure is None and cancel_deadline is not None:
                    running = any((p.get("status") or {}).get("phase") == "Running" for p in pods)
                    if job is None or not running or time.monotonic() >= cancel_deadline:
                        failure = JobFailure(
                            "Cancelled",
                            "cancelled; the Task's Job was stopped",
                            stop_job=True,
                            phase="Cancelled",
                        )
                if failure is not None:
                    await self._end(current, failure, execution_id, started)
                    return None
                waiters = [asyncio.ensure_future(wake.wait())]
                if cancel_deadline is None:
                    waiters.append(asyncio.ensure_future(cancel.wait()))
                try:
                    await asyncio.wait(
                        waiters, timeout=self.poll_seconds, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    for w in waiters:
                        w.cancel()
        finally:
            self.metrics.jobs_running.dec()

    def _count(self, task: Mapping[str, Any], started: float | None) -> None:
        """Count a Task its pod ended (the pod's own metrics die with it)."""
        status = task.get("status") or {}
        ns = task["metadata"]["namespace"]
        agent = (task.get("spec") or {}).get("agentRef", "")
        self.metrics.tasks.labels(ns, agent, status.get("phase"), status.get("reason", "")).inc()
        self.metrics.task_steps.labels(ns, agent).observe(int(status.get("step") or 0))
        if started is not None:
            self.metrics.task_duration.labels(ns, agent).observe(time.monotonic() - started)

    async def _end(
        self,
        task: dict[str, Any],
        failure: JobFailure,
        execution_id: str,
        started: float | None,
    ) -> None:
        ns, name = task["metadata"]["namespace"], task["metadata"]["name"]
        jname = job_name(task)
        if failure.stop_job:
            await self.client.delete("Job", ns, jname, propagation="Background")
        if not await self._wait_stopped(task, jname):
            log.warning("the Task's pod did not stop in time; its outcome is left for later")
            return
        fresh = await self.client.get("Task", ns, name)
        if fresh is None:
            return
        if task_terminal(fresh):
            self._count(fresh, started)
            return
        if (fresh.get("status") or {}).get("executionId") != execution_id:
            return
        checkpoints = CheckpointStore(self.client, fresh, execution_id)
        state = None
        with contextlib.suppress(Exception):  # progress is a nicety; the outcome is not
            body = await self.client.get("ConfigMap", ns, checkpoint_name(fresh))
            # Sealed with the namespace's runner keyring (docs/security.md#job-mode), which
            # the operator may read as it reads the Secrets endpoints name.
            loaded = None
            if body is not None:
                loaded = decode(body, subject_of(fresh), await self._runner_keyring(ns))
            state = loaded[1] if loaded is not None else None
        result = (
            RunResult(failure.phase, failure.reason, failure.message, "", None, state)
            if state is not None
            else None
        )
        log.warning(
            "the Task's Job ended the run",
            extra={"ordo": {"reason": failure.reason, "job": jname}},
        )
        await self.writer.finish(
            fresh,
            TaskOutcome(failure.phase, failure.reason, failure.message, result),
            execution_id=execution_id,
            started=started,
        )
        if not self.keep_checkpoints:
            with contextlib.suppress(ApiError):
                await checkpoints.delete()

    async def _runner_key_exists(self, namespace: str) -> bool:
        """Whether the namespace has the runner's checkpoint key Secret (unreadable: as if not,
        the pod's volume then stays optional, as before)."""
        try:
            secret = await self.client.get("Secret", namespace, runner_key_secret(self.settings))
        except ApiError:
            return False
        return secret is not None

    async def _runner_keyring(self, namespace: str) -> sealing.Keyring:
        secret = await self.client.get("Secret", namespace, runner_key_secret(self.settings))
        text = base64.b64decode(((secret or {}).get("data") or {}).get("keyring", "")).decode()
        return sealing.parse(text, "the runner's checkpoint key Secret")

    async def _wait_stopped(self, task: Mapping[str, Any], jname: str) -> bool:
        """Wait until no pod of the Job may still run the Task's process: every pod finished
        or gone, and the execution lease free (released, or expired)."""
        ns, name = task["metadata"]["namespace"], task["metadata"]["name"]
        deadline = time.monotonic() + self.stop_timeout_seconds + self.settings.lease_seconds
        while time.monotonic() < deadline:
            pods = await self.client.list("Pod", ns, f"{JOB_NAME_LABEL}={jname}")
            if not pods_active(pods):
                current = await self.client.get("Task", ns, name)
                if current is None or lease_remaining(current, datetime.now(UTC)) <= 0:
                    return True
            await asyncio.sleep(1.0)
        return False

    async def _wait_job_gone(self, ns: str, name: str) -> None:
        deadline = time.monotonic() + self.stop_timeout_seconds
        while time.monotonic() < deadline:
            if await self.client.get("Job", ns, name) is None:
                return
            await asyncio.sleep(1.0)
