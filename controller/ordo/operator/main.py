"""`ordo operator`: run the operator in this process."""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import logging
import signal
from typing import Any

from ..runtime import tracing
from .telemetry import logs


def _duration_seconds(value: str) -> float:
    from ..api import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "--namespace", "-n", action="append", metavar="NS", help="watch this namespace (repeatable)"
    )
    scope.add_argument(
        "--all-namespaces",
        "-A",
        action="store_true",
        help="watch every namespace (the default without --namespace)",
    )
    parser.add_argument(
        "--max-concurrent-tasks",
        type=int,
        default=10,
        metavar="N",
        help="Tasks executing at once (default 10); the rest wait Pending",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=8080,
        metavar="P",
        help="Prometheus /metrics port (default 8080; 0 disables)",
    )
    parser.add_argument(
        "--health-port",
        type=int,
        default=8081,
        metavar="P",
        help="/healthz and /readyz port (default 8081; 0 disables)",
    )
    parser.add_argument(
        "--peering",
        metavar="NAME",
        help="kopf peering object (ClusterKopfPeering, or KopfPeering per namespace): a guard "
        "against a second operator on the same scope, whose equal-priority peers all pause "
        "until one is left; not an active/standby pair (default: standalone, no peering)",
    )
    parser.add_argument(
        "--keep-checkpoints",
        action="store_true",
        help="keep each Task's checkpoint ConfigMap after it ends",
    )
    parser.add_argument(
        "--lease-seconds",
        type=float,
        default=30.0,
        help="execution lease of a running Task (default 30): after a crash, another "
        "process resumes the Task once the lease expires",
    )
    parser.add_argument(
        "--resync-seconds",
        type=float,
        default=60.0,
        help="re-check Ready conditions this often (default 60)",
    )
    parser.add_argument(
        "--reference-grace",
        type=_duration_seconds,
        default=60.0,
        metavar="DURATION",
        help="how long a Task whose Agent, endpoint, Tool, Memory or Secret is missing waits "
        "Pending for it to appear before it fails (GitOps applies in any order; default 60s; "
        "0s fails at once; per Task: annotation ordo.dev/reference-grace)",
    )
    parser.add_argument(
        "--approval-timeout",
        type=_duration_seconds,
        default=24 * 3600.0,
        metavar="DURATION",
        help="how long a tool call that needs a human approval waits for a ToolApproval before "
        "it counts as rejected (ApprovalTimedOut), unless its Tool sets spec.approval.timeout "
        "(default 24h)",
    )
    parser.add_argument(
        "--task-ttl",
        type=_duration_seconds,
        default=0.0,
        metavar="DURATION",
        help="delete a finished Task (and what it owns) this long after it ended, unless it "
        "sets spec.ttlSecondsAfterFinished (default 0s: keep finished Tasks)",
    )
    parser.add_argument(
        "--default-execution-mode",
        choices=("InProcess", "Job"),
        default="InProcess",
        help="where Tasks run whose Agent sets no spec.execution.mode: in this process "
        "(default), or one batch/v1 Job per Task",
    )
    jobs = parser.add_argument_group("Job mode (one batch/v1 Job per Task)")
    jobs.add_argument(
        "--job-image",
        default="",
        metavar="IMAGE",
        help="image of the Job pods: this operator's own image (required for Job mode)",
    )
    jobs.add_argument(
        "--job-service-account",
        default="ordo-runner",
        metavar="NAME",
        help="ServiceAccount of the Job pods in each Task's namespace (default ordo-runner)",
    )
    jobs.add_argument(
        "--job-image-pull-policy",
        choices=("Always", "IfNotPresent", "Never"),
        default="IfNotPresent",
    )
    jobs.add_argument(
        "--job-requests",
        default="cpu=100m,memory=128Mi",
        metavar="cpu=Q,memory=Q",
        help="default resource requests of a Job pod (an Agent's spec.execution.resources wins)",
    )
    jobs.add_argument(
        "--job-limits",
        default="memory=512Mi",
        metavar="cpu=Q,memory=Q",
        help="default resource limits of a Job pod",
    )
    jobs.add_argument(
        "--job-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an extra environment variable of the Job pods (repeatable)",
    )
    jobs.add_argument("--job-backoff-limit", type=int, default=3, metavar="N")
    jobs.add_argument("--job-ttl-seconds", type=int, default=600, metavar="S")
    jobs.add_argument(
        "--job-deadline-grace-seconds",
        type=float,
        default=120.0,
        metavar="S",
        help="added to the run's timeout (and one lease) for the Job's activeDeadlineSeconds",
    )
    jobs.add_argument(
        "--job-image-pull-grace-seconds",
        type=float,
        default=120.0,
        metavar="S",
        help="a Job pod that cannot pull its image this long ends the Task ImageUnavailable",
    )
    jobs.add_argument(
        "--job-cancel-grace-seconds",
        type=float,
        default=30.0,
        metavar="S",
        help="a cancelled Job-mode run may take this long to stop by itself before its Job "
        "is deleted",
    )
    parser.add_argument("--log-format", choices=("json", "text"), default="json")
    parser.add_argument("--log-level", default="INFO")


def add_run_task_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", "-n", required=True, help="the Task's namespace")
    parser.add_argument("--name", required=True, help="the Task's name")
    parser.add_argument(
        "--execution-id", required=True, help="the claim this Job runs (status.executionId)"
    )
    parser.add_argument(
        "--lease-seconds", type=float, default=30.0, help="execution lease duration (default 30)"
    )
    parser.add_argument("--log-format", choices=("json", "text"), default="json")
    parser.add_argument("--log-level", default="INFO")


def run_task(args: argparse.Namespace) -> int:
    """`ordo run-task`: the process of a Job-mode pod (operator/jobrunner.py)."""
    from .jobmode.podrunner import run_task as run

    logs.configure(args.log_format, args.log_level.upper())
    if problem := tracing.configure_or_explain("ordo-task"):
        logging.getLogger("ordo.operator").error(problem)
        return 2
    try:
        return asyncio.run(run(args.namespace, args.name, args.execution_id, args.lease_seconds))
    finally:
        tracing.shutdown()


def parse_quantities(value: str) -> dict[str, str]:
    """`cpu=100m,memory=128Mi` as a resource map (empty string: none)."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        key, sep, amount = part.partition("=")
        if not sep or key not in ("cpu", "memory") or not amount:
            raise ValueError(f"expected cpu=QUANTITY or memory=QUANTITY, got {part!r}")
        out[key] = amount
    return out


PRELOADED = (
    "ordo.providers.openai_provider",
    "ordo.providers.anthropic_provider",
    "ordo.tools.http",
    "ordo.tools.guardcheck",
    "ordo.memory",
    "ordo.tools.memory_tools",
)
"""Modules a Task loads on first use, imported at startup instead: the model SDKs alone are
about 0.5 s of CPU, which on the first Task would block the event loop (every other Task
and the watches with it)."""


def preload() -> None:
    """Import `PRELOADED` and build the shared TLS context (the CA bundle and the HTTP
    stack under it: another ~0.2 s), before the event loop starts."""
    from ..tls import shared_ssl_context

    for name in PRELOADED:
        importlib.import_module(name)
    shared_ssl_context()


GC_THRESHOLDS = (50_000, 20, 100)
"""Allocations between collections of the youngest generation (Python's default: 700), and
the default ratios for the older two."""


def tune_gc() -> None:
    """Move what start-up built (the imported SDKs, kopf, the TLS context: never garbage) out
    of the collector's scans, and collect the youngest generation every 50,000 allocations
    instead of 700. With many runs at once the defaults spent about a sixth of the CPU in
    the collector (issue 14); cycles are still collected, only less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run(args: argparse.Namespace) -> int:
    import kopf

    from . import handlers
    from .jobmode.supervisor import JobSettings

    logs.configure(args.log_format, args.log_level.upper())
    if problem := tracing.configure_or_explain("ordo-operator"):
        logging.getLogger("ordo.operator").error(problem)
        return 2
    if args.max_concurrent_tasks < 1:
        logging.getLogger("ordo.operator").error("--max-concurrent-tasks must be at least 1")
        return 2
    try:
        requests = parse_quantities(args.job_requests)
        limits = parse_quantities(args.job_limits)
        env = dict(item.split("=", 1) for item in args.job_env if "=" in item)
    except ValueError as exc:
        logging.getLogger("ordo.operator").error(f"--job-requests/--job-limits: {exc}")
        return 2
    if len(env) != len(args.job_env):
        logging.getLogger("ordo.operator").error("--job-env expects NAME=VALUE")
        return 2
    if args.default_execution_mode == "Job" and not args.job_image:
        logging.getLogger("ordo.operator").error(
            "--default-execution-mode Job needs --job-image (the operator's own image)"
        )
        return 2
    job = JobSettings(
        image=args.job_image,
        service_account=args.job_service_account,
        image_pull_policy=args.job_image_pull_policy,
        requests=requests,
        limits=limits,
        backoff_limit=args.job_backoff_limit,
        ttl_seconds_after_finished=args.job_ttl_seconds,
        deadline_grace_seconds=args.job_deadline_grace_seconds,
        image_pull_grace_seconds=args.job_image_pull_grace_seconds,
        lease_seconds=args.lease_seconds,
        log_format=args.log_format,
        log_level=args.log_level.upper(),
        env=env,
    )
    config = handlers.OperatorConfig(
        max_concurrent_tasks=args.max_concurrent_tasks,
        metrics_port=args.metrics_port or None,
        health_port=args.health_port or None,
        resync_seconds=args.resync_seconds,
        keep_checkpoints=args.keep_checkpoints,
        lease_seconds=args.lease_seconds,
        namespaces=list(args.namespace or []),
        peering=args.peering,
        default_execution_mode=args.default_execution_mode,
        job=job,
        job_cancel_grace_seconds=args.job_cancel_grace_seconds,
        reference_grace_seconds=args.reference_grace,
        approval_timeout_seconds=args.approval_timeout,
        task_ttl_seconds=args.task_ttl or None,
    )
    kwargs: dict[str, Any] = {"standalone": args.peering is None, "memo": handlers.new_memo(config)}
    if args.peering:
        kwargs["peering_name"] = args.peering
        handlers.watch_tasks_through_kopf()
    if args.namespace:
        kwargs["namespaces"] = args.namespace
    else:
        kwargs["clusterwide"] = True

    preload()
    tune_gc()

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await kopf.operator(stop_flag=stop, **kwargs)

    try:
        asyncio.run(main())
    finally:
        tracing.shutdown()  # export what is buffered
    return 0
