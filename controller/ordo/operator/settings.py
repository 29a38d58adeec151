"""The operator's settings in one table: for each its name, type, default, unit, the
`ordo operator` flag, the chart value that sets it and its help text (rows: `flags.Setting`).

`ordo operator`'s and `ordo run-task`'s flags are generated from `SETTINGS` (operator/main.py),
the settings objects below take their defaults from it, the flags table of
docs/operations.md is generated from it (operator/settingsdoc.py) and the chart is checked
against it (tests/unit/test_settings_table.py). A default is written here once, nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..api.agent import ExecutionMode
from ..credentials import POLICIES, Policy
from ..engine.approvals import DEFAULT_TIMEOUT_SECONDS
from ..runtime.delegation import DEFAULT_MAX_DEPTH
from .flags import Setting, duration_seconds, non_negative, parse_quantities, workers_flag
from .jobsettings import (
    JOB_BACKOFF_LIMIT,
    JOB_CANCEL_GRACE_SECONDS,
    JOB_DEADLINE_GRACE_SECONDS,
    JOB_ENV,
    JOB_IMAGE,
    JOB_IMAGE_PULL_GRACE_SECONDS,
    JOB_IMAGE_PULL_POLICY,
    JOB_LIMITS,
    JOB_POLL_SECONDS,
    JOB_REQUESTS,
    JOB_SERVICE_ACCOUNT,
    JOB_TTL_SECONDS,
)

# -- the table -------------------------------------------------------------------------------


NAMESPACE = Setting[list[str] | None](
    "namespace",
    "--namespace",
    None,
    "watch this namespace (repeatable)",
    metavar="NS",
    action="append",
    section="scope",
    aliases=("-n",),
    chart=("watchNamespaces",),
    chart_renders="`watchNamespaces` (or each shard's `namespaces`); none: `--all-namespaces`",
)
ALL_NAMESPACES = Setting[bool](
    "all_namespaces",
    "--all-namespaces",
    False,
    "watch every namespace (the default without --namespace)",
    action="store_true",
    section="scope",
    aliases=("-A",),
    chart=("watchNamespaces",),
    chart_renders="passed when `watchNamespaces` and `shards` are empty",
)
MAX_CONCURRENT_TASKS = Setting[int](
    "max_concurrent_tasks",
    "--max-concurrent-tasks",
    10,
    "Tasks executing at once; the rest wait Pending",
    type=int,
    metavar="N",
    chart=("operator.maxConcurrentTasks",),
)
METRICS_PORT = Setting[int](
    "metrics_port",
    "--metrics-port",
    8080,
    "Prometheus /metrics port (0 disables)",
    type=int,
    metavar="P",
    chart=("ports.metrics",),
)
HEALTH_PORT = Setting[int](
    "health_port",
    "--health-port",
    8081,
    "/healthz and /readyz port (0 disables)",
    type=int,
    metavar="P",
    chart=("ports.health",),
)
PEERING = Setting[str | None](
    "peering",
    "--peering",
    None,
    "kopf peering object (ClusterKopfPeering, or KopfPeering per namespace): a guard "
    "against a second operator on the same scope, whose equal-priority peers all pause "
    "until one is left; not an active/standby pair (default: standalone, no peering)",
    metavar="NAME",
    chart=("peering.name",),
    chart_renders="off; with `peering.enabled`, `peering.name` or the release's full name",
)
KEEP_CHECKPOINTS = Setting[bool](
    "keep_checkpoints",
    "--keep-checkpoints",
    False,
    "keep each Task's checkpoint ConfigMap after it ends",
    action="store_true",
    chart=("operator.keepCheckpoints",),
)
CHECKPOINT_KEY_FILE = Setting[str](
    "checkpoint_key_file",
    "--checkpoint-key-file",
    "",
    "keyring that seals checkpoints (AES-256-GCM; one base64 32-byte key per line, the first "
    "seals, all open: docs/security.md); none: a key of this process's own, so a restarted "
    "operator cannot resume a checkpointed run and ends it Interrupted",
    metavar="PATH",
    chart=("checkpoints.keySecret.name",),
    chart_renders="`/etc/ordo/checkpoint-key/keyring`, mounted from the Secret "
    "`checkpoints.keySecret.name` (default: the chart's own `<release>-checkpoint-key`)",
)
LEASE_SECONDS = Setting[float](
    "lease_seconds",
    "--lease-seconds",
    30.0,
    "execution lease of a running Task: after a crash, another process resumes the Task "
    "once the lease expires",
    type=float,
    unit="seconds",
    metavar="S",
    chart=("operator.leaseSeconds",),
)
LEASE_NAMESPACE = Setting[str](
    "lease_namespace",
    "--lease-namespace",
    "",
    "namespace of this process's coordination.k8s.io Lease (one per operator process, "
    "renewed every sixth of --lease-seconds; the Tasks it runs name it as their holder); "
    "default: $POD_NAMESPACE, else the ServiceAccount's namespace, else default",
    metavar="NS",
)
WORKERS = Setting[str](
    "workers",
    "--workers",
    "auto",
    "worker processes that execute the runs (each an event loop with many runs), apart "
    "from the control process that keeps the watches, caches, claims, leases, health and "
    "metrics; auto: the CPUs the container may use (its cgroup quota), as far as its memory "
    "limit holds them, at least 1; 0 runs every Task on the control process's own loop",
    type=workers_flag,
    metavar="N|auto",
    chart=("operator.workers",),
)
WORKER_STALL_SECONDS = Setting[float](
    "worker_stall_seconds",
    "--worker-stall-seconds",
    10.0,
    "a worker whose event loop does not answer its heartbeat this long is killed and "
    "replaced, and its runs resume elsewhere from their checkpoints; a Task in a worker "
    "lost twice ends WorkerLost",
    type=float,
    unit="seconds",
    metavar="S",
    chart=("operator.workerStallSeconds",),
)
RESYNC_SECONDS = Setting[float](
    "resync_seconds",
    "--resync-seconds",
    60.0,
    "re-check Ready conditions this often",
    type=float,
    unit="seconds",
    metavar="S",
    chart=("operator.resyncSeconds",),
)
REFERENCE_GRACE = Setting[float](
    "reference_grace",
    "--reference-grace",
    60.0,
    "how long a Task whose Agent, endpoint, Tool, Memory or Secret is missing waits "
    "Pending for it to appear before it fails (GitOps applies in any order; 0s fails at "
    "once; per Task: annotation ordo.dev/reference-grace)",
    type=duration_seconds,
    unit="duration",
    metavar="DURATION",
)
APPROVAL_TIMEOUT = Setting[float](
    "approval_timeout",
    "--approval-timeout",
    DEFAULT_TIMEOUT_SECONDS,
    "how long a tool call that needs a human approval waits for a ToolApproval before "
    "it counts as rejected (ApprovalTimedOut), unless its Tool sets spec.approval.timeout",
    type=duration_seconds,
    unit="duration",
    metavar="DURATION",
)
MAX_DELEGATION_DEPTH = Setting[int](
    "max_delegation_depth",
    "--max-delegation-depth",
    DEFAULT_MAX_DEPTH,
    "how deep a tree of Tasks may grow: a Task at this depth (0: a root) may not delegate "
    "to an Agent (DelegationDepthExceeded); an AgentPolicy's maxDelegationDepth may lower it",
    type=non_negative,
    metavar="N",
    chart=("operator.maxDelegationDepth",),
)
TASK_TTL = Setting[float](
    "task_ttl",
    "--task-ttl",
    0.0,
    "delete a finished Task (and what it owns) this long after it ended, unless it "
    "sets spec.ttlSecondsAfterFinished; 0s keeps finished Tasks",
    type=duration_seconds,
    unit="duration",
    metavar="DURATION",
    chart=("operator.taskTtlSeconds",),
)
DEFAULT_EXECUTION_MODE = Setting[ExecutionMode](
    "default_execution_mode",
    "--default-execution-mode",
    "InProcess",
    "where Tasks run whose Agent sets no spec.execution.mode: in this process "
    "(InProcess), or one batch/v1 Job per Task (Job)",
    choices=("InProcess", "Job"),
    chart=("jobs.defaultMode",),
)
CREDENTIAL_POLICY = Setting[Policy](
    "credential_policy",
    "--credential-policy",
    "Enforce",
    "Secrets without the label ordo.dev/credential=true, or sent to a host their "
    "ordo.dev/allowed-hosts does not list: refused (Enforce), or only warned about in Ready, "
    "a Warning Event on the Task and ordo_credential_violations_total, and still sent (Warn, "
    "for a migration)",
    choices=POLICIES,
    chart=("operator.credentialPolicy",),
)
LOG_FORMAT = Setting[str](
    "log_format",
    "--log-format",
    "json",
    "log line format",
    choices=("json", "text"),
    chart=("operator.logFormat",),
)
LOG_LEVEL = Setting[str](
    "log_level",
    "--log-level",
    "INFO",
    "the lowest level logged (DEBUG, INFO, WARNING, ERROR)",
    metavar="LEVEL",
    chart=("operator.logLevel",),
)

SETTINGS: tuple[Setting[Any], ...] = (
    NAMESPACE,
    ALL_NAMESPACES,
    MAX_CONCURRENT_TASKS,
    METRICS_PORT,
    HEALTH_PORT,
    PEERING,
    KEEP_CHECKPOINTS,
    CHECKPOINT_KEY_FILE,
    LEASE_SECONDS,
    LEASE_NAMESPACE,
    WORKERS,
    WORKER_STALL_SECONDS,
    RESYNC_SECONDS,
    REFERENCE_GRACE,
    APPROVAL_TIMEOUT,
    MAX_DELEGATION_DEPTH,
    TASK_TTL,
    DEFAULT_EXECUTION_MODE,
    JOB_IMAGE,
    JOB_SERVICE_ACCOUNT,
    JOB_IMAGE_PULL_POLICY,
    JOB_REQUESTS,
    JOB_LIMITS,
    JOB_ENV,
    JOB_BACKOFF_LIMIT,
    JOB_TTL_SECONDS,
    JOB_DEADLINE_GRACE_SECONDS,
    JOB_IMAGE_PULL_GRACE_SECONDS,
    JOB_CANCEL_GRACE_SECONDS,
    JOB_POLL_SECONDS,
    CREDENTIAL_POLICY,
    LOG_FORMAT,
    LOG_LEVEL,
)
"""Every setting of `ordo operator`, in the order of its `--help`."""

RUN_TASK_SETTINGS: tuple[Setting[Any], ...] = (
    LEASE_SECONDS,
    MAX_DELEGATION_DEPTH,
    CREDENTIAL_POLICY,
    LOG_FORMAT,
    LOG_LEVEL,
)
"""The operator's settings that `ordo run-task` (a Job pod) takes too: the Job's command
passes the operator's values on."""


# -- the settings objects, their defaults from the table -------------------------------------


@dataclass(frozen=True)
class JobSettings:
    """How the operator builds Job-mode pods (`ordo operator --job-*` flags, Helm values)."""

    image: str = JOB_IMAGE.default
    """The operator's own image (`--job-image`); required for Job mode."""
    service_account: str = JOB_SERVICE_ACCOUNT.default
    """The runner ServiceAccount of the Task's namespace (the chart creates one per watched
    namespace): it reads that namespace's ordo objects and named Secrets only."""
    image_pull_policy: str = JOB_IMAGE_PULL_POLICY.default
    requests: Mapping[str, str] = field(
        default_factory=lambda: parse_quantities(JOB_REQUESTS.default)
    )
    limits: Mapping[str, str] = field(default_factory=lambda: parse_quantities(JOB_LIMITS.default))
    backoff_limit: int = JOB_BACKOFF_LIMIT.default
    ttl_seconds_after_finished: int = JOB_TTL_SECONDS.default
    deadline_grace_seconds: float = JOB_DEADLINE_GRACE_SECONDS.default
    """Added to the run's remaining timeout (and one lease) for activeDeadlineSeconds."""
    image_pull_grace_seconds: float = JOB_IMAGE_PULL_GRACE_SECONDS.default
    """How long a pod may fail to pull its image before the Task ends `ImageUnavailable`."""
    lease_seconds: float = LEASE_SECONDS.default
    tmp_size_limit: str = "64Mi"
    log_format: str = LOG_FORMAT.default
    log_level: str = LOG_LEVEL.default
    credential_policy: Policy = CREDENTIAL_POLICY.default
    """Passed on to the pod (`ordo run-task --credential-policy`), which reads its Secrets."""
    max_delegation_depth: int = MAX_DELEGATION_DEPTH.default
    """Passed on to the pod (`ordo run-task --max-delegation-depth`): its run delegates."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment of the pod (`--job-env NAME=VALUE`: proxies, or where the API
    server is when the `kubernetes` Service does not route)."""


@dataclass
class SchedulerSettings:
    max_concurrent_tasks: int = MAX_CONCURRENT_TASKS.default
    """Tasks executing at once in this process; the rest wait Pending."""
    keep_checkpoints: bool = KEEP_CHECKPOINTS.default
    """Keep the checkpoint ConfigMap after a Task ends (for debugging / replay)."""
    lease_seconds: float = LEASE_SECONDS.default
    """Execution lease duration: how long after a crash another process may resume a Task."""
    default_execution_mode: ExecutionMode = DEFAULT_EXECUTION_MODE.default
    """Where Tasks run whose Agent names no `spec.execution.mode`."""
    job: JobSettings = field(default_factory=JobSettings)
    """How Job-mode pods are built (image, ServiceAccount, resources, deadlines)."""
    job_poll_seconds: float = JOB_POLL_SECONDS.default
    """How often a supervised Job is re-read when no watch event arrives."""
    job_cancel_grace_seconds: float = JOB_CANCEL_GRACE_SECONDS.default
    """How long a cancelled Job-mode run may take to stop by itself before its Job is deleted."""
    reference_grace_seconds: float = REFERENCE_GRACE.default
    """How long a Task whose references are missing waits Pending before it fails."""
    approval_timeout: float | None = APPROVAL_TIMEOUT.default
    """Seconds a tool call waits for a human decision (`--approval-timeout`; None: the
    engine's default, the same 24h)."""
    max_delegation_depth: int = MAX_DELEGATION_DEPTH.default
    """The deepest a tree of Tasks may grow (`--max-delegation-depth`)."""
    workers: int = 0
    """Worker processes that execute the runs (`--workers`, resolved: `ordo operator`
    passes the cgroup's CPUs for auto); 0 runs them on this process's loop (the default
    of a scheduler built directly, as the unit tests do)."""
    worker_stall_seconds: float = WORKER_STALL_SECONDS.default
    """A worker that does not answer its heartbeat this long is killed and replaced."""
    credential_policy: Policy = CREDENTIAL_POLICY.default
    """How the runs' Secret reads treat a Secret that does not allow its use
    (`--credential-policy`; credentials.py)."""
