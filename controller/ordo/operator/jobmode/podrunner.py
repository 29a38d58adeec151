"""`ordo run-task`: the process of a Job-mode pod. It runs one claimed Task through the same
Runner as the operator's own process (execution lease, checkpoint, fenced status writes,
Events), so what runs in a Job is what runs in-process.

1. Read the Task. Nothing to do (exit 0) if it is gone, terminal, or claimed by another
   execution than the Job's (`--execution-id`): a stale Job.
2. Wait until no other process holds the execution lease (a previous pod of this Job that
   was deleted keeps it until it stopped or the lease expired), then take it under this
   pod's name.
3. Resume from the checkpoint when one exists (a replaced pod), else start; a tool call that
   may have run without a recorded result is never repeated unless its Tool is idempotent.
4. Watch the Task for a cancel (`spec.cancel`, deletion): the run stops at its next step
   boundary and ends `Cancelled`, as in-process.

Exit status: 0 when the Task is terminal (or not this Job's to run), so the Job completes;
1 when the run stopped without ending the Task (lease lost, API failure), so the Job
starts a replacement pod that resumes; 143 after SIGTERM (pod deleted, node drained): the
checkpoint stays and the replacement resumes from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from typing import Any

from pydantic import ValidationError

from ...api import API_VERSION, TERMINAL_PHASES, Task
from ...credentials import Policy
from ...errors import validation_problem
from ...runtime import ModelFactory, TaskOutcome, default_model_factory
from ..kube.client import ApiError, KubeClient, login
from ..kube.store import KubeStore
from ..settings import LEASE_SECONDS
from ..tasks.checkpoint import name_for as checkpoint_name
from ..tasks.claim import Claim
from ..tasks.lease import ExecutionLease
from ..tasks.runner import Parked, Runner
from ..tasks.taskstore import SecretsReadOnce, credential_warning
from ..tasks.writer import TaskWriter
from ..telemetry import logs
from ..telemetry.metrics import Metrics

EXIT_DONE = 0
EXIT_RETRY = 1
EXIT_TERMINATED = 143
CANCEL_POLL_SECONDS = 2.0
log = logging.getLogger("ordo.operator")


def identity() -> str:
    """The lease holder: this pod's name (the Downward API's POD_NAME, else the hostname,
    which Kubernetes sets to the pod name)."""
    return os.environ.get("POD_NAME") or socket.gethostname()


class TaskRun:
    """One Job pod's attempt at running its Task."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        execution_id: str,
        *,
        holder: str,
        lease_seconds: float = LEASE_SECONDS.default,
        model_factory: ModelFactory = default_model_factory,
        cancel_poll_seconds: float = CANCEL_POLL_SECONDS,
        credential_policy: Policy = "Enforce",
        max_delegation_depth: int | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.execution_id = execution_id
        self.holder = holder
        self.lease_seconds = lease_seconds
        self.cancel_poll_seconds = cancel_poll_seconds
        self.writer = TaskWriter(client, Metrics())
        # The pod reads its Secrets itself (the runner Role: `get` on jobs.secretNames), under
        # the operator's --credential-policy; Warn-mode warnings go to the Task as Events.
        store = SecretsReadOnce(
            KubeStore(client, credential_policy),
            credential_warning(
                self.writer,
                {
                    "apiVersion": API_VERSION,
                    "kind": "Task",
                    "metadata": {"name": name, "namespace": namespace},
                },
            ),
        )
        self.runner = Runner(
            self.writer,
            store,
            self.writer.metrics,
            model_factory,
            max_delegation_depth=max_delegation_depth,
        )

    async def _current(self) -> dict[str, Any] | None:
        """The Task if this Job still has to run it, else None."""
        body = await self.client.get("Task", self.namespace, self.name)
        if body is None:
            log.info("the Task is gone; nothing to run")
            return None
        status = body.get("status") or {}
        if status.get("phase") in TERMINAL_PHASES:
            log.info("the Task has already ended", extra={"ordo": {"phase": status["phase"]}})
            return None
        if status.get("executionId") != self.execution_id or status.get("phase") != "Running":
            log.warning("the Task is claimed by another execution; this Job is stale")
            return None
        return body

    async def run(self) -> int:
        logs.bind(namespace=self.namespace, task=self.name, executionId=self.execution_id)
        body = await self._current()
        if body is None:
            return EXIT_DONE
        lease = ExecutionLease(
            self.client, body, self.holder, self.lease_seconds, self.execution_id
        )
        while True:
            remaining = await lease.held_elsewhere()
            if remaining <= 0 and await lease.acquire():
                break
            log.info(
                "the Task is held by another process; waiting for its lease",
                extra={"ordo": {"seconds": round(remaining, 1)}},
            )
            await asyncio.sleep(max(remaining, 0.5) + 0.2)
        try:
            # Read again under the lease: the Task may have ended while we waited.
            body = await self._current()
            if body is None:
                return EXIT_DONE
            try:
                task = Task.model_validate(body)
            except ValidationError as exc:
                await self.writer.finish(
                    body,
                    TaskOutcome(
                        "Failed", "InvalidSpec", f"Task is invalid at {validation_problem(exc)}"
                    ),
                    execution_id=self.execution_id,
                )
                return EXIT_DONE
            checkpoint = await self.client.get("ConfigMap", self.namespace, checkpoint_name(body))
            step = int((body.get("status") or {}).get("step") or 0)
            resuming = checkpoint is not None or step > 0
        except BaseException:
            await lease.release()
            raise
        cancel = asyncio.Event()
        watcher = asyncio.create_task(self._watch(cancel, asyncio.current_task()))
        try:
            # Runner.run renews the lease while the run lasts and releases it at the end; an
            # abandoned run wrote nothing for it: a replacement pod resumes (exit code below).
            ran = await self.runner.run(
                Claim(body, self.execution_id, lease, resuming), task, cancel
            )
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        if isinstance(ran, Parked):
            # Waiting for approvals or child Tasks: this pod's part is done. The operator
            # sees its Job complete, removes it, waits holding no slot, and starts a new Job
            # that resumes from the checkpoint (jobmode/supervisor.py).
            log.info("the run waits (approvals or child Tasks); this pod ends")
            return EXIT_DONE
        final = await self.client.get("Task", self.namespace, self.name)
        if final is None or (final.get("status") or {}).get("phase") in TERMINAL_PHASES:
            return EXIT_DONE
        log.warning("the run stopped without ending the Task; a replacement pod resumes it")
        return EXIT_RETRY

    async def _watch(self, cancel: asyncio.Event, run: asyncio.Task[Any] | None) -> None:
        """Poll the Task: a cancel request (spec.cancel, deletion) stops the run at its next
        step boundary; a Task that is gone or claimed by another execution stops it now."""
        while True:
            await asyncio.sleep(self.cancel_poll_seconds)
            try:
                body = await self.client.get("Task", self.namespace, self.name)
            except Exception:
                continue  # transient: the lease renewer decides whether we may go on
            if body is None or (body.get("status") or {}).get("executionId") != self.execution_id:
                if run is not None:
                    run.cancel()
                return
            if (body.get("spec") or {}).get("cancel") or (body.get("metadata") or {}).get(
                "deletionTimestamp"
            ):
                cancel.set()


async def run_task(
    namespace: str,
    name: str,
    execution_id: str,
    lease_seconds: float,
    credential_policy: Policy = "Enforce",
    max_delegation_depth: int | None = None,
) -> int:
    """The `ordo run-task` process: run the Task, map the outcome to an exit status."""
    client = KubeClient(login(), relogin=login)
    attempt = TaskRun(
        client,
        namespace,
        name,
        execution_id,
        holder=identity(),
        lease_seconds=lease_seconds,
        credential_policy=credential_policy,
        max_delegation_depth=max_delegation_depth,
    )
    current = asyncio.current_task()
    terminated = False

    def on_term() -> None:
        nonlocal terminated
        terminated = True
        log.warning("SIGTERM: stopping the run; the checkpoint stays for the next pod")
        if current is not None:
            current.cancel()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_term)
    try:
        return await attempt.run()
    except asyncio.CancelledError:
        # SIGTERM, or the run was stopped (lease lost, Task claimed elsewhere): the checkpoint
        # stays and a replacement pod decides what is left to do.
        return EXIT_TERMINATED if terminated else EXIT_RETRY
    except Exception as exc:
        fields: dict[str, Any] = {"error": type(exc).__name__}
        if isinstance(exc, ApiError):
            fields.update(errorStatus=exc.status, errorReason=exc.api_reason)
        log.error("the run could not be carried out", extra={"ordo": fields})
        return EXIT_RETRY
    finally:
        await client.close()
