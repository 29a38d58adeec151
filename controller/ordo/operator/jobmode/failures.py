"""Execution mode `Job`, its failures: how a Job that failed (or a pod that cannot start)
maps to a documented Task reason. Pure, no I/O; the JobSupervisor (supervisor.py) acts on the
verdicts, ending the Task only when its pod cannot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from ... import timestamps
from ...api.task import Reason

IMAGE_NEVER_AVAILABLE = frozenset({"ErrImageNeverPull", "InvalidImageName"})
"""Waiting reasons that no amount of waiting fixes: the Task fails at once."""
IMAGE_PULL_FAILING = frozenset({"ErrImagePull", "ImagePullBackOff", "RegistryUnavailable"})
"""Waiting reasons that may clear (a registry hiccup): the Task fails after a grace."""
CONTAINER_NOT_CREATED = frozenset({"CreateContainerConfigError", "CreateContainerError"})


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
    at = timestamps.parse(created)
    if at is None:
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


def pods_active(pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Names of pods that may still be running the Task's process."""
    return [
        str((p.get("metadata") or {}).get("name", ""))
        for p in pods
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
