"""Execution mode `Job`, the Job itself: which mode a Task runs in (`select_mode`,
`runs_in_job`), the operator's Job settings, and the batch/v1 Job manifest it creates for a
claimed Task, with the deadline derived from the run's remaining timeout. Pure, no I/O.

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

import math
from collections.abc import Mapping
from typing import Any

from ... import timestamps
from ...api import parse_duration
from ...api.agent import EXECUTION_MODES, ExecutionMode
from ..settings import JobSettings
from ..tasks.ownership import owner_reference

PREFIX = "ordo-task-"
MANAGED_BY = {"app.kubernetes.io/managed-by": "ordo"}
COMPONENT = "task-runner"
TASK_LABEL = "ordo.dev/task"
EXECUTION_ANNOTATION = "ordo.dev/execution-id"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTAINER = "run"
RUNNER_UID = 65532


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


KEY_DIR = "/etc/ordo/checkpoint-key"


def runner_key_secret(settings: JobSettings) -> str:
    """The Secret of the Task's namespace whose keyring the pod seals checkpoints with (the
    chart creates one beside each runner ServiceAccount): a namespace key, never the
    operator's (docs/security.md#job-mode)."""
    return f"{settings.service_account}-checkpoint-key"


def build_job(
    task: Mapping[str, Any],
    agent: Mapping[str, Any] | None,
    execution_id: str,
    settings: JobSettings,
    *,
    remaining_timeout: float,
    key_secret_exists: bool = False,
) -> dict[str, Any]:
    """The Job that runs `task` (as the API returns it) for the claim `execution_id`.

    `key_secret_exists`: the namespace has the runner's checkpoint key Secret, so the pod
    mounts it as required (the kubelet retries until it can), never starting without it."""
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
        f"--credential-policy={settings.credential_policy}",
        f"--max-delegation-depth={settings.max_delegation_depth}",
        f"--log-format={settings.log_format}",
        f"--log-level={settings.log_level}",
        f"--checkpoint-key-file={KEY_DIR}/keyring",
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
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "checkpoint-key", "mountPath": KEY_DIR, "readOnly": True},
        ],
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
                        {"name": "tmp", "emptyDir": {"sizeLimit": settings.tmp_size_limit}},
                        {
                            "name": "checkpoint-key",
                            # Optional only where the Secret does not exist: the pod then
                            # seals with a key of its own, and a replacement pod cannot
                            # resume (podrunner.py). Where it exists it is required, so a
                            # kubelet that cannot read it yet retries rather than starting the
                            # pod keyless (a replacement pod that ends the Task Interrupted).
                            "secret": {
                                "secretName": runner_key_secret(settings),
                                "optional": not key_secret_exists,
                                "defaultMode": 0o440,
                            },
                        },
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
    return timestamps.epoch(value)


def runs_in_job(task: Mapping[str, Any]) -> bool:
    """The Task was claimed for Job mode and is still running: its Job (or the next one)
    runs it, the operator only supervises."""
    status = task.get("status") or {}
    return status.get("phase") == "Running" and status.get("executionMode") == "Job"
