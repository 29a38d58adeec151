"""The arguments of `ordo invoke AGENT` and what they mean: its flags, where the input comes
from (`--input`, `--input-file`, `-`), `--timeout`, the Task manifest it creates, and the exit
codes that say how the Task ended. `ordo.cli.invoke` runs the command with them."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from ..api import GROUP, VERSION
from ..api.base import parse_duration
from ..api.task import REQUESTER_ANNOTATION
from ..runtime.team import TEAM_CHAIN_PREFIX

EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
"""Bad arguments, no cluster credentials, the API refused or could not be reached."""
EXIT_CANCELLED = 3
EXIT_TIMEOUT = 4
"""`--timeout` reached while waiting: the Task is left running."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT): the Task was cancelled (or left running, if you said so) and waited for."""
EXIT_TERMINATED = 143
"""SIGTERM (a CI system stopping the job): the Task was cancelled without asking, waited for."""

EXIT_CODES = f"""\
exit codes:
  {EXIT_SUCCEEDED}    the Task Succeeded (or --no-wait: it was created)
  {EXIT_FAILED}    the Task Failed (its reason and message are printed)
  {EXIT_USAGE}    usage error, no credentials, or the Kubernetes API refused or was unreachable
  {EXIT_CANCELLED}    the Task was Cancelled (spec.cancel) or deleted
  {EXIT_TIMEOUT}    --timeout reached while waiting (the Task keeps running; its name is printed)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); without a TTY the Task is cancelled first
  {EXIT_TERMINATED}  terminated (SIGTERM, e.g. a CI job stopped): the Task is cancelled first

Ctrl-C asks "cancel Task X? [y/N]" when stdin is a terminal; without one (CI, stdin
closed) it cancels the Task (sets spec.cancel), waits for it to end and exits {EXIT_INTERRUPTED}.
A second Ctrl-C stops waiting. A signal while the Task is being created cancels it once the
create returns; one before that creates no Task."""

MAX_PREFIX = 58
"""generateName prefix cap: the API server adds 5 characters, so names fit 63 (a label)."""


class InvokeError(Exception):
    """A usage or connection problem: printed, exit 2."""


def exit_code(phase: str | None) -> int:
    """The exit code of a Task that ended in `phase`."""
    if phase == "Succeeded":
        return EXIT_SUCCEEDED
    if phase == "Cancelled":
        return EXIT_CANCELLED
    return EXIT_FAILED


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = (
        "Create a Task for AGENT on the cluster (KUBECONFIG or ~/.kube/config, like kubectl;\n"
        "in a pod, its ServiceAccount), print its progress to stderr and its output to stdout."
    )
    parser.epilog = EXIT_CODES
    parser.add_argument(
        "agent", metavar="AGENT", help="name of the Agent to run, or team/NAME for a Team"
    )
    parser.add_argument(
        "stdin",
        nargs="?",
        choices=["-"],
        metavar="-",
        help="read the input from stdin (right after AGENT; or --input-file -)",
    )
    parser.add_argument("--input", "-i", metavar="TEXT", help="the Task's input")
    parser.add_argument(
        "--input-file", metavar="FILE", help="read the input from FILE ('-': stdin)"
    )
    parser.add_argument(
        "--namespace",
        "-n",
        metavar="NS",
        help="namespace (default: the kubeconfig context's, else 'default')",
    )
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG)")
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context to use")
    parser.add_argument(
        "--wait",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="wait for the Task to end (default); --no-wait prints its name and exits 0",
    )
    parser.add_argument(
        "--timeout",
        metavar="DURATION",
        help="stop waiting after DURATION (e.g. 30s, 5m): exit 4, the Task keeps running",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "yaml", "json"),
        default="text",
        help="text: the output (default); yaml|json: the Task's final status",
    )


def read_input(args: argparse.Namespace, stdin: TextIO | None) -> str | None:
    """The input text from `--input`, `--input-file` or `-` (at most one), or None. `stdin`
    is None when file descriptor 0 is closed (a CI job may run commands so)."""
    given = [
        flag
        for flag, value in (
            ("--input", args.input),
            ("--input-file", args.input_file),
            ("-", args.stdin),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise InvokeError(f"give the input once: {' and '.join(given)} both set")
    if args.input is not None:
        return str(args.input)
    if args.input_file == "-" or args.stdin is not None:
        if stdin is None:
            raise InvokeError("stdin is closed: give the input with --input or --input-file")
        return stdin.read()
    if args.input_file is not None:
        try:
            return Path(args.input_file).read_text()
        except OSError as exc:
            raise InvokeError(f"cannot read --input-file: {exc.strerror}") from None
    return None


def timeout_seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise InvokeError(f"--timeout: {exc}") from None
    if seconds <= 0:
        raise InvokeError("--timeout must be more than 0")
    return seconds


def runs(target: str) -> tuple[str, str]:
    """(kind, name) of what AGENT names: `team/NAME` is a Team (no Agent has a `/` in its
    name), anything else an Agent."""
    if target.startswith(TEAM_CHAIN_PREFIX):
        return "Team", target.removeprefix(TEAM_CHAIN_PREFIX)
    return "Agent", target


def task_manifest(agent: str, text: str | None, requester: str = "") -> dict[str, Any]:
    """The Task `ordo invoke` creates, of an Agent or (`team/NAME`) a Team; `requester` (the
    caller's user name, if the API server said) goes into the annotation approvals exclude the
    requester by (docs/governance.md)."""
    kind, name = runs(agent)
    spec: dict[str, Any] = {"teamRef" if kind == "Team" else "agentRef": name}
    if text is not None:
        spec["input"] = text
    metadata: dict[str, Any] = {"generateName": f"{name[:MAX_PREFIX]}-"}
    if requester:
        metadata["annotations"] = {REQUESTER_ANNOTATION: requester}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Task",
        "metadata": metadata,
        "spec": spec,
    }
