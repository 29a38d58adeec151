"""`ordo operator`: run the operator in this process."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import Any

from . import logs


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
        help="kopf peering object for an active/standby pair (default: standalone)",
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
    parser.add_argument("--log-format", choices=("json", "text"), default="json")
    parser.add_argument("--log-level", default="INFO")


def run(args: argparse.Namespace) -> int:
    import kopf

    from . import handlers

    logs.configure(args.log_format, args.log_level.upper())
    if args.max_concurrent_tasks < 1:
        logging.getLogger("ordo.operator").error("--max-concurrent-tasks must be at least 1")
        return 2
    config = handlers.OperatorConfig(
        max_concurrent_tasks=args.max_concurrent_tasks,
        metrics_port=args.metrics_port or None,
        health_port=args.health_port or None,
        resync_seconds=args.resync_seconds,
        keep_checkpoints=args.keep_checkpoints,
        lease_seconds=args.lease_seconds,
        namespaces=list(args.namespace or []),
        peering=args.peering,
    )
    kwargs: dict[str, Any] = {"standalone": args.peering is None, "memo": handlers.new_memo(config)}
    if args.peering:
        kwargs["peering_name"] = args.peering
    if args.namespace:
        kwargs["namespaces"] = args.namespace
    else:
        kwargs["clusterwide"] = True

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await kopf.operator(stop_flag=stop, **kwargs)

    asyncio.run(main())
    return 0
