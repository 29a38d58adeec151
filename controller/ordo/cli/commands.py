"""The `ordo` subcommands that need the engine or the operator (`ordo run`, `ordo invoke`,
`ordo approvals` / `approve` / `reject`, `ordo operator`, `ordo console`, `ordo run-task`), registered here and
imported lazily so `ordo validate` and `ordo crds` stay fast."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import yaml
from rich.console import Console


def _cmd_run(args: argparse.Namespace) -> int:
    from ..api import Task, manifests
    from ..runtime import tracing
    from .local import RunInterrupted, run_tasks, task_document
    from .localapproval import LocalApprover, mode_for

    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        mset = manifests.load(args.filename)
    except FileNotFoundError as exc:
        err.print(f"[red]error:[/] {exc}")
        return 2
    for problem in mset.problems:
        if problem.severity == "error" or not args.quiet:
            err.print(
                f"[{'red' if problem.severity == 'error' else 'yellow'}]{problem.severity}:[/] ",
                end="",
            )
            err.print(problem.text, markup=False)
    if mset.errors:
        err.print("[red]not running: fix the errors above (`ordo validate` shows the same)[/]")
        return 1
    if not any(isinstance(obj, Task) for _, obj in mset.objects):
        err.print("[red]error:[/] no Task in the given manifests: nothing to run")
        return 1
    live = None if args.quiet else err
    if unusable := tracing.configure_or_explain("ordo"):
        err.print("[red]error:[/] ", end="")
        err.print(unusable, markup=False)
        return 2
    try:
        mode = mode_for(args.approve_all, args.reject_all, sys.stdin.isatty())
        approver = LocalApprover(mode, out=sys.stderr)
        results = asyncio.run(run_tasks(mset, console=live, approver=approver))
    except RunInterrupted as exc:
        err.print(str(exc), style="yellow", markup=False)
        return 130
    finally:
        tracing.shutdown()  # export the runs' spans before exiting
    docs = [task_document(task, outcome) for task, outcome in results]
    if args.output == "json":
        json.dump(docs if len(docs) > 1 else docs[0], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True, width=100))
    ran = [o for _, obj in mset.objects for task, o in results if task is obj]  # not children
    return 0 if all(o.phase == "Succeeded" for o in ran) else 1


def register(sub: Any) -> None:
    """Add the heavier subcommands to the `ordo` parser."""
    run = sub.add_parser("run", help="run the Tasks in manifests locally (no cluster needed)")
    run.add_argument(
        "-f",
        "--filename",
        action="extend",
        nargs="+",
        required=True,
        metavar="PATH",
        help="file, folder or '-'",
    )
    run.add_argument(
        "-o", "--output", choices=("yaml", "json"), default="yaml", help="format of the final Tasks"
    )
    run.add_argument("--quiet", "-q", action="store_true", help="no live progress, no warnings")
    decide = run.add_mutually_exclusive_group()
    decide.add_argument(
        "--approve-all",
        action="store_true",
        help="approve every tool call that needs a human approval (scripts)",
    )
    decide.add_argument(
        "--reject-all",
        action="store_true",
        help="reject every tool call that needs a human approval; without either flag a "
        "terminal asks, and without a terminal such calls are rejected",
    )
    run.set_defaults(func=_cmd_run)

    from . import invoke

    invoke_parser = sub.add_parser(
        "invoke", help="run an Agent on the cluster: create a Task, follow it, print its output"
    )
    invoke.add_arguments(invoke_parser)
    invoke_parser.set_defaults(func=invoke.run)

    from . import approvals as approvecli

    approvecli.register(sub)

    from ..operator import main as operator_main

    operator = sub.add_parser(
        "operator",
        help="run the Kubernetes operator (uses KUBECONFIG or the in-cluster service account)",
    )
    operator_main.add_arguments(operator)
    operator.set_defaults(func=operator_main.run)

    from ..gateway import main as gateway_main

    gateway = sub.add_parser("gateway", help="serve the Agents that opt in over A2A (docs/a2a.md)")
    gateway_main.add_arguments(gateway)
    gateway.set_defaults(func=gateway_main.run)

    from ..console import main as console_main

    console_main.register(sub)

    run_task = sub.add_parser(
        "run-task",
        help="run one claimed Task (the process of a Job-mode pod; see docs/operations.md)",
    )
    operator_main.add_run_task_arguments(run_task)
    run_task.set_defaults(func=operator_main.run_task)
