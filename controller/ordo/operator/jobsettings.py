"""The Job-mode rows of the operator's settings table (operator/settings.py assembles the
table; this module only keeps it under the size a module may have)."""

from __future__ import annotations

from .flags import Setting

JOB_IMAGE = Setting[str](
    "job_image",
    "--job-image",
    "",
    "image of the Job pods: this operator's own image (required for Job mode)",
    metavar="IMAGE",
    section="jobs",
    chart=("jobs.image.repository", "image.repository"),
    chart_renders="`jobs.image` (tag or digest), else the operator's own image (`image`)",
)
JOB_SERVICE_ACCOUNT = Setting[str](
    "job_service_account",
    "--job-service-account",
    "ordo-runner",
    "ServiceAccount of the Job pods in each Task's namespace",
    metavar="NAME",
    section="jobs",
    chart=("jobs.serviceAccountName",),
)
JOB_IMAGE_PULL_POLICY = Setting[str](
    "job_image_pull_policy",
    "--job-image-pull-policy",
    "IfNotPresent",
    "imagePullPolicy of the Job pods",
    choices=("Always", "IfNotPresent", "Never"),
    section="jobs",
    chart=("jobs.image.pullPolicy", "image.pullPolicy"),
)
JOB_REQUESTS = Setting[str](
    "job_requests",
    "--job-requests",
    "cpu=100m,memory=128Mi",
    "default resource requests of a Job pod (an Agent's spec.execution.resources wins)",
    unit="quantities",
    metavar="cpu=Q,memory=Q",
    section="jobs",
    chart=("jobs.resources.requests",),
)
JOB_LIMITS = Setting[str](
    "job_limits",
    "--job-limits",
    "memory=512Mi",
    "default resource limits of a Job pod",
    unit="quantities",
    metavar="cpu=Q,memory=Q",
    section="jobs",
    chart=("jobs.resources.limits",),
)
JOB_ENV = Setting[tuple[str, ...]](
    "job_env",
    "--job-env",
    (),
    "an extra environment variable of the Job pods (repeatable)",
    metavar="NAME=VALUE",
    action="append",
    section="jobs",
    chart=("jobs.env",),
)
JOB_BACKOFF_LIMIT = Setting[int](
    "job_backoff_limit",
    "--job-backoff-limit",
    3,
    "pod failures a Job tolerates before the Task ends PodFailed (its backoffLimit)",
    type=int,
    metavar="N",
    section="jobs",
    chart=("jobs.backoffLimit",),
)
JOB_TTL_SECONDS = Setting[int](
    "job_ttl_seconds",
    "--job-ttl-seconds",
    600,
    "how long a finished Job and its pod's log are kept (its ttlSecondsAfterFinished)",
    type=int,
    unit="seconds",
    metavar="S",
    section="jobs",
    chart=("jobs.ttlSecondsAfterFinished",),
)
JOB_DEADLINE_GRACE_SECONDS = Setting[float](
    "job_deadline_grace_seconds",
    "--job-deadline-grace-seconds",
    120.0,
    "added to the run's timeout (and one lease) for the Job's activeDeadlineSeconds",
    type=float,
    unit="seconds",
    metavar="S",
    section="jobs",
)
JOB_IMAGE_PULL_GRACE_SECONDS = Setting[float](
    "job_image_pull_grace_seconds",
    "--job-image-pull-grace-seconds",
    120.0,
    "a Job pod that cannot pull its image this long ends the Task ImageUnavailable",
    type=float,
    unit="seconds",
    metavar="S",
    section="jobs",
)
JOB_CANCEL_GRACE_SECONDS = Setting[float](
    "job_cancel_grace_seconds",
    "--job-cancel-grace-seconds",
    30.0,
    "a cancelled Job-mode run may take this long to stop by itself before its Job is deleted",
    type=float,
    unit="seconds",
    metavar="S",
    section="jobs",
)
JOB_POLL_SECONDS = Setting[float](
    "job_poll_seconds",
    None,
    10.0,
    "how often a supervised Job is re-read when no watch event arrives",
    unit="seconds",
    section="internal",
)
