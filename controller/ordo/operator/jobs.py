"""Execution mode `Job`: one batch/v1 Job per Task, running the same engine in its own pod.

Pure parts, no I/O: which mode a Task runs in, the Job manifest the operator creates for it,
and how a failed Job (or a pod that cannot start) maps to a documented Task reason. The
scheduler (scheduler.py) creates and supervises the Job; the pod runs `ordo run-task`
(jobrunner.py), which takes the execution lease and runs the Task through the same Runner
as the operator's own process.

Why each field of the Job is what it is:
- `ownerReferences` → the Task: deleting the Task garbage-collects the Job and its pod.
- `podReplacementPolicy: Failed`: a replacement pod starts only once the previous one has
  fully terminated, so two pods of one Task never run at once (the execution lease would
  make the second one wait anyway).
- `podFailurePolicy`: a pod disrupted by Kubernetes (eviction, preemption, node drain) does
  not count against `backoffLimit`; it is replaced and resumes from the checkpoint.
- `backoffLimit`: a few replacements after crashes (a deleted pod, an API outage longer than
  the run-task process tolerates); each replacement resumes from the last checkpoint.
- `activeDeadlineSeconds`: the run's remaining timeout plus a grace; the run itself ends
  `Timeout` at its deadline, so the Job deadline only fires for a pod that is stuck or never
  started (the Task then ends `Timeout`).
- `ttlSecondsAfterFinished`: finished Jobs do not pile up (the Task keeps the outcome).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from ..api import TERMINAL_PHASES, parse_duration
from ..api.agent import EXECUTION_MODES, ExecutionMode
from ..api.task import Reason
from ..engine.state import RunResult
from ..runtime import TaskOutcome
from .checkpoint import CheckpointStore, decode
from .checkpoint import name_for as checkpoint_name
from .kube import ApiError, KubeClient
from .lease import ExecutionLease
from .metrics import Metrics
from .ownership import owner_reference
from .writer import TaskWriter

log = logging.getLogger("ordo.operator")

PREFIX = "ordo-task-"
MANAGED_BY = {"app.kubernetes.io/managed-by": "ordo"}
COMPONENT = "task-runner"
TASK_LABEL = "ordo.dev/task"
EXECUTION_ANNOTATION = "ordo.dev/execution-id"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTAINER = "run"
RUNNER_UID = 65532
IMAGE_NEVER_AVAILABLE = frozenset({"ErrImageNeverPull", "InvalidImageName"})
"""Waiting reasons that no amount of waiting fixes: the Task fails at once."""
IMAGE_PULL_FAILING = frozenset({"ErrImagePull", "ImagePullBackOff", "RegistryUnavailable"})
"""Waiting reasons that may clear (a registry hiccup): the Task fails after a grace."""
CONTAINER_NOT_CREATED = frozenset({"CreateContainerConfigError", "CreateContainerError"})


def job_name(task: Mapping[str, Any]) -> str:
    """`ordo-task-<task uid>`: one Job per Task, at most (a second create is a 409)."""
    return PREFIX + str(task["metadata"]["uid"])


def select_mode(
    agent: Mapping[str, Any] | None, default: ExecutionMode, recorded: str | None = None
) -> ExecutionMode:
    """The mode a Task runs in: the one recorded in its status (a claimed Task keeps its
    mode across resumes), else its Agent's `spec.execution.mode`, else the operator's
    default. Without a readable Agent the run ends at resolution (`AgentNotFound`,
    `InvalidSpec`): it does so in-process, with no pod started for nothing."""
    if recorded in EXECUTION_MODES:
        return recorded  # type: ignore[return-value]
    if agent is None:
        return "InProcess"
    execution = (agent.get("spec") or {}).get("execution") or {}
    mode = execution.get("mode") if isinstance(execution, Mapping) else None
    return mode if mode in EXECUTION_MODES else default


@dataclass(frozen=True)
class JobSettings:
    """How the operator builds Job-mode pods (`ordo operator --job-*` flags, Helm values)."""

    image: str = ""
    """The operator's own image (`--job-image`); required for Job mode."""
    service_account: str = "ordo-runner"
    """The runner ServiceAccount of the Task's namespace (the chart creates one per watched
    namespace): it reads that namespace's ordo objects and named Secrets only."""
    image_pull_policy: str = "IfNotPresent"
    requests: Mapping[str, str] = field(default_factory=lambda: {"cpu": "100m", "memory": "128Mi"})
    limits: Mapping[str, str] = field(default_factory=lambda: {"memory": "512Mi"})
    backoff_limit: int = 3
    ttl_seconds_after_finished: int = 600
    deadline_grace_seconds: float = 120.0
    """Added to the run's remaining timeout (and one lease) for activeDeadlineSeconds."""
    image_pull_grace_seconds: float = 120.0
    """How long a pod may fail to pull its image before the Task ends `ImageUnavailable`."""
    lease_seconds: float = 30.0
    tmp_size_limit: str = "64Mi"
    log_format: str = "json"
    log_level: str = "INFO"
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment of the pod (`--job-env NAME=VALUE`: proxies, or where the API
    server is when the `kubernetes` Service does not route)."""


_SUFFIX = {
    "": 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
}


def quantity(value: str) -> float:
    """A Kubernetes quantity (`500m`, `128Mi`, `1.5`) as a number; ValueError if it is not one
    of the forms the API's schema admits."""
    text = str(value).strip()
    for suffix in ("Ki", "Mi", "Gi", "Ti", "m", "k", "M", "G", "T", ""):
        if suffix and not text.endswith(suffix):
            continue
        number = text[: len(text) - len(suffix)] if suffix else text
        try:
            return float(number) * _SUFFIX[suffix]
        except ValueError:
            continue
    raise ValueError(f"not a quantity: {value!r}")


def resources(agent: Mapping[str, Any] | None, settings: JobSettings) -> dict[str, Any]:
    """The pod's requests and limits: the Agent's `spec.execution.resources`, each quantity
    falling back to the operator's default. A default request above the limit the Agent sets
    is lowered to that limit (the API refuses a request above its limit)."""
    execution = ((agent or {}).get("spec") or {}).get("execution") or {}
    own = execution.get("resources") or {}
    own_requests = {k: str(v) for k, v in (own.get("requests") or {}).items() if v}
    own_limits = {k: str(v) for k, v in (own.get("limits") or {}).items() if v}
    requests = {k: str(v) for k, v in settings.requests.items()} | own_requests
    limits = {k: str(v) for k, v in settings.limits.items()} | own_limits
    for key, limit in limits.items():
        if key in requests and key not in own_requests:
            try:
                if quantity(requests[key]) > quantity(limit):
                    requests[key] = limit
            except ValueError:
                continue
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def deadline_seconds(remaining_timeout: float, settings: JobSettings) -> int:
    """activeDeadlineSeconds: the run's remaining timeout, one lease (a replacement pod may
    wait for its predecessor's) and the grace; at least one minute."""
    total = max(remaining_timeout, 0.0) + settings.lease_seconds + settings.deadline_grace_seconds
    return max(60, math.ceil(total))


def build_job(
    task: Mapping[str, Any],
    agent: Mapping[str, Any] | None,
    execution_id: str,
    settings: JobSettings,
    *,
    remaining_timeout: float,
) -> dict[str, Any]:
    """The Job that runs `task` (as the API returns it) for the claim `execution_id`."""
    if not settings.image:
        raise ValueError("Job mode needs the runner image (ordo operator --job-image)")
    meta = task["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    labels = {
        **MANAGED_BY,
        "app.kubernetes.io/name": "ordo",
        "app.kubernetes.io/component": COMPONENT,
        TASK_LABEL: _label_value(name),
    }
    annotations = {EXECUTION_ANNOTATION: execution_id}
    command = [
        "ordo",
        "run-task",
        "--namespace",
        namespace,
        "--name",
        name,
        "--execution-id",
        execution_id,
        f"--lease-seconds={settings.lease_seconds:g}",
        f"--log-format={settings.log_format}",
        f"--log-level={settings.log_level}",
    ]
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": command,
        "env": [
            # The execution lease's holder identity (one per pod).
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            # The root filesystem is read-only: nothing may write outside /tmp.
            {"name": "HOME", "value": "/tmp"},
            {"name": "TMPDIR", "value": "/tmp"},
            {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            *({"name": k, "value": v} for k, v in sorted(settings.env.items())),
        ],
        "resources": resources(agent, settings),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(task),
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(dict(task))],
        },
        "spec": {
            "completions": 1,
            "parallelism": 1,
            "backoffLimit": settings.backoff_limit,
            "activeDeadlineSeconds": deadline_seconds(remaining_timeout, settings),
            "ttlSecondsAfterFinished": settings.ttl_seconds_after_finished,
            "podReplacementPolicy": "Failed",
            "podFailurePolicy": {
                "rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
                ]
            },
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": settings.service_account,
                    "automountServiceAccountToken": True,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 30,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": RUNNER_UID,
                        "runAsGroup": RUNNER_UID,
                        "fsGroup": RUNNER_UID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": [
                        {"name": "tmp", "emptyDir": {"sizeLimit": settings.tmp_size_limit}}
                    ],
                },
            },
        },
    }


def _label_value(value: str) -> str:
    cut = value[:63]
    while cut and not cut[-1].isalnum():
        cut = cut[:-1]
    return cut


# -- failures ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobFailure:
    """Why a Job-mode Task cannot finish in its Job: the Task ends `Failed` with `reason`."""

    reason: Reason
    message: str
    stop_job: bool
    """Delete the Job first (its pods are still running or would be retried)."""
    phase: Literal["Failed", "Cancelled"] = "Failed"


def _condition(job: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return dict(c)
    return None


def finished(job: Mapping[str, Any]) -> Literal["Complete", "Failed"] | None:
    """The Job's terminal condition, if it has one."""
    if _condition(job, "Failed") is not None:
        return "Failed"
    if _condition(job, "Complete") is not None:
        return "Complete"
    return None


def _age(obj: Mapping[str, Any], now: datetime) -> float:
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    if not created:
        return 0.0
    try:
        at = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return 0.0
    return max(0.0, (now - at).total_seconds())


def _statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _limit(pod: Mapping[str, Any], resource: str) -> str:
    for c in (pod.get("spec") or {}).get("containers") or []:
        value = ((c.get("resources") or {}).get("limits") or {}).get(resource)
        if value:
            return str(value)
    return "unset"


def _newest_first(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(
        pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "", reverse=True
    )


def pod_problem(
    pods: Sequence[Mapping[str, Any]], now: datetime, image_pull_grace: float
) -> JobFailure | None:
    """A pod state that ends the Task without waiting for the Job to give up: an OOMKilled
    container (the same run would be killed again), an image that is not present or cannot
    be pulled (at once for `ErrImageNeverPull`, after `image_pull_grace` seconds for pull
    errors), a container that cannot be created (after the same grace)."""
    for pod in _newest_first(pods):
        pod_name = (pod.get("metadata") or {}).get("name", "")
        age = _age(pod, now)
        for cs in _statuses(pod):
            state = cs.get("state") or {}
            terminated = state.get("terminated") or {}
            waiting = state.get("waiting") or {}
            if terminated.get("reason") == "OOMKilled":
                return JobFailure(
                    "PodFailed",
                    f"pod {pod_name} was OOMKilled (memory limit {_limit(pod, 'memory')}); "
                    "raise the Agent's spec.execution.resources.limits.memory",
                    stop_job=True,
                )
            why = waiting.get("reason")
            if why in IMAGE_NEVER_AVAILABLE or (
                why in IMAGE_PULL_FAILING and age >= image_pull_grace
            ):
                return JobFailure(
                    "ImageUnavailable",
                    f"pod {pod_name} cannot start: {why} for image {cs.get('image', '')!r}"[:1024],
                    stop_job=True,
                )
            if why in CONTAINER_NOT_CREATED and age >= image_pull_grace:
                return JobFailure(
                    "PodFailed",
                    f"pod {pod_name} cannot start: {why} (see `kubectl describe pod`)",
                    stop_job=True,
                )
    return None


def _describe_failed_pod(pods: Sequence[Mapping[str, Any]]) -> str:
    for pod in _newest_first(pods):
        status = pod.get("status") or {}
        pod_name = (pod.get("metadata") or {}).get("name", "")
        if status.get("phase") != "Failed":
            continue
        if status.get("reason"):
            return f"; last pod {pod_name}: {status['reason']}"
        for cs in _statuses(pod):
            terminated = (cs.get("state") or {}).get("terminated") or {}
            if terminated:
                return (
                    f"; last pod {pod_name}: {terminated.get('reason', 'terminated')} "
                    f"(exit code {terminated.get('exitCode', '?')})"
                )
    return ""


def job_problem(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> JobFailure | None:
    """The Task reason for a Job that finished without the Task reaching a terminal phase
    (the caller has checked the Task): `DeadlineExceeded` → `Timeout`; every other failure
    (pods failed `backoffLimit + 1` times, or completed without ending the Task) →
    `PodFailed`, naming the last pod's reason and exit code."""
    failed = _condition(job, "Failed")
    spec = job.get("spec") or {}
    attempts = int((job.get("status") or {}).get("failed") or 0)
    if failed is not None:
        why = failed.get("reason", "")
        if why == "DeadlineExceeded":
            return JobFailure(
                "Timeout",
                f"Job {job_name_of(job)} exceeded its activeDeadlineSeconds "
                f"({spec.get('activeDeadlineSeconds')}s: the run's timeout plus a grace) "
                "before the run ended",
                stop_job=False,
            )
        return JobFailure(
            "PodFailed",
            f"Job {job_name_of(job)} failed ({why or 'Failed'}) after {attempts} failed pod(s)"
            + _describe_failed_pod(pods),
            stop_job=False,
        )
    if _condition(job, "Complete") is not None:
        return JobFailure(
            "PodFailed",
            f"Job {job_name_of(job)} completed but its pod did not end the Task",
            stop_job=False,
        )
    return None


def job_name_of(job: Mapping[str, Any]) -> str:
    return str((job.get("metadata") or {}).get("name", ""))


def task_terminal(task: Mapping[str, Any] | None) -> bool:
    return task is not None and (task.get("status") or {}).get("phase") in TERMINAL_PHASES


def pods_active(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Names of pods that may still be running the Task's process."""
    return [
        str((p.get("metadata") or {}).get("name", ""))
        for p in pods
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]


# -- supervision (the operator's side of a Job-mode Task) --------------------------------------


class JobGone(Exception):
    """The Task's Job disappeared while the Task is still running (deleted by someone, or
    expired after the operator was down): the scheduler resumes the Task in a new Job."""


def remaining_timeout(
    task: Mapping[str, Any], agent: Mapping[str, Any] | None, now: float
) -> float:
    """Seconds left of the run's timeout (the smaller of the Agent's and the Task's, anchored
    at `status.startedAt`, as the run itself computes it; policies may narrow it further,
    which only makes the Job's deadline more generous than needed)."""
    values = [((agent or {}).get("spec") or {}).get("limits", {}).get("timeout") or "5m"]
    own = ((task.get("spec") or {}).get("limits") or {}).get("timeout")
    if own:
        values.append(own)
    seconds = []
    for value in values:
        try:
            seconds.append(parse_duration(str(value)))
        except ValueError:
            continue
    timeout = min((s for s in seconds if s > 0), default=300.0)
    started = _parse_time((task.get("status") or {}).get("startedAt"))
    return timeout - (now - started) if started is not None else timeout


def _parse_time(value: str | None) -> float | None:
    if not value:
        return None
    for fmt in ("%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S.%fZ"):
        try:
            return datetime.strptime(value, fmt).replace(tzinfo=UTC).timestamp()
        except ValueError:
            continue
    return None


def runs_in_job(task: Mapping[str, Any]) -> bool:
    """The Task was claimed for Job mode and is still running: its Job (or the next one)
    runs it, the operator only supervises."""
    status = task.get("status") or {}
    return status.get("phase") == "Running" and status.get("executionMode") == "Job"


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
        poll_seconds: float = 5.0,
        cancel_grace_seconds: float = 30.0,
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
    ) -> None:
        """Watch the Task's Job until the Task ends; raises `JobGone` if the Job disappears
        while the Task still runs (and no cancel was asked)."""
        ns, name = task["metadata"]["namespace"], task["metadata"]["name"]
        jname = job_name(task)
        cancel_deadline: float | None = None
        self.metrics.jobs_running.inc()
        try:
            while True:
                wake.clear()
                current = await self.client.get("Task", ns, name)
                if current is None:
                    return  # deleted: garbage collection removes the Job
                status = current.get("status") or {}
                if task_terminal(current):
                    self._count(current, started)
                    return
                if status.get("executionId") != execution_id:
                    return  # another execution owns the Task now
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
                    return
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
            state = decode(body) if body is not None else None
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

    async def _wait_stopped(self, task: Mapping[str, Any], jname: str) -> bool:
        """Wait until no pod of the Job may still run the Task's process: every pod finished
        or gone, and the execution lease free (released, or expired)."""
        ns = task["metadata"]["namespace"]
        deadline = time.monotonic() + self.stop_timeout_seconds + self.settings.lease_seconds
        lease = ExecutionLease(
            self.client, dict(task), "ordo-operator-supervisor", self.settings.lease_seconds
        )
        while time.monotonic() < deadline:
            pods = await self.client.list("Pod", ns, f"{JOB_NAME_LABEL}={jname}")
            if not pods_active(pods) and await lease.held_elsewhere() <= 0:
                return True
            await asyncio.sleep(1.0)
        return False

    async def _wait_job_gone(self, ns: str, name: str) -> None:
        deadline = time.monotonic() + self.stop_timeout_seconds
        while time.monotonic() < deadline:
            if await self.client.get("Job", ns, name) is None:
                return
            await asyncio.sleep(1.0)
