"""`ordo operator`: run the operator in this process."""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import logging
import os
import signal
from typing import Any

from ..runtime import tracing
from .flags import add_flags, parse_workers
from .flags import parse_quantities as parse_quantities  # where `ordo operator` had it
from .settings import RUN_TASK_SETTINGS, SETTINGS
from .telemetry import logs
from .workers.cpus import auto_workers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of `ordo operator`, from the settings table (operator/settings.py)."""
    add_flags(parser, SETTINGS)


def add_run_task_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", "-n", required=True, help="the Task's namespace")
    parser.add_argument("--name", required=True, help="the Task's name")
    parser.add_argument(
        "--execution-id", required=True, help="the claim this Job runs (status.executionId)"
    )
    parser.add_argument(
        "--checkpoint-key-file",
        default="",
        metavar="PATH",
        help="the namespace's checkpoint keyring (mounted from the runner's key Secret); "
        "absent: a key of this pod's own, so a replacement pod cannot resume",
    )
    add_flags(parser, RUN_TASK_SETTINGS)


def run_task(args: argparse.Namespace) -> int:
    """`ordo run-task`: the process of a Job-mode pod (operator/jobmode/podrunner.py)."""
    from .jobmode.podrunner import run_task as run

    logs.configure(args.log_format, args.log_level.upper())
    if problem := tracing.configure_or_explain("ordo-task"):
        logging.getLogger("ordo.operator").error(problem)
        return 2
    path = args.checkpoint_key_file
    if path and not os.path.exists(path):  # the optional Secret volume is not there
        path = ""
    if not install_checkpoint_key(path):
        return 2
    try:
        return asyncio.run(
            run(
                args.namespace,
                args.name,
                args.execution_id,
                args.lease_seconds,
                args.credential_policy,
                args.max_delegation_depth,
            )
        )
    finally:
        tracing.shutdown()


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


def resolve_workers(value: str) -> int:
    """`--workers`: the number given, or for `auto` the CPUs the container may use (as far
    as its memory limit holds them: workers/cpus.py)."""
    count = parse_workers(value)
    return auto_workers() if count is None else count


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


def install_checkpoint_key(path: str) -> bool:
    """Seal checkpoints with the keyring in `path` (False after logging why it cannot be
    used), or, without one, with a key of this process's own (a warning: docs/security.md)."""
    from .tasks import sealing

    log = logging.getLogger("ordo.operator")
    if not path:
        log.warning(
            "no checkpoint keyring (--checkpoint-key-file): checkpoints are sealed with a key "
            "of this process's own, so no other process (a restarted operator, a replacement "
            "Job pod) can resume them: such a Task ends Interrupted"
        )
        return True
    try:
        sealing.install(sealing.load(path))
    except sealing.KeyFileError as exc:
        log.error(str(exc))
        return False
    return True


def run(args: argparse.Namespace) -> int:
    import kopf

    from . import handlers
    from .settings import JobSettings

    logs.configure(args.log_format, args.log_level.upper())
    if problem := tracing.configure_or_explain("ordo-operator"):
        logging.getLogger("ordo.operator").error(problem)
        return 2
    if args.max_concurrent_tasks < 1:
        logging.getLogger("ordo.operator").error("--max-concurrent-tasks must be at least 1")
        return 2
    if not install_checkpoint_key(args.checkpoint_key_file):
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
        credential_policy=args.credential_policy,
        max_delegation_depth=args.max_delegation_depth,
        env=env,
    )
    config = handlers.OperatorConfig(
        max_concurrent_tasks=args.max_concurrent_tasks,
        metrics_port=args.metrics_port or None,
        health_port=args.health_port or None,
        resync_seconds=args.resync_seconds,
        keep_checkpoints=args.keep_checkpoints,
        lease_seconds=args.lease_seconds,
        lease_namespace=args.lease_namespace,
        workers=resolve_workers(args.workers),
        worker_stall_seconds=args.worker_stall_seconds,
        namespaces=list(args.namespace or []),
        peering=args.peering,
        default_execution_mode=args.default_execution_mode,
        job=job,
        job_cancel_grace_seconds=args.job_cancel_grace_seconds,
        reference_grace_seconds=args.reference_grace,
        approval_timeout_seconds=args.approval_timeout,
        max_delegation_depth=args.max_delegation_depth,
        task_ttl_seconds=args.task_ttl or None,
        credential_policy=args.credential_policy,
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
