"""`ordo invoke AGENT`: run an Agent on the cluster from a terminal or a pipeline.

Creates a Task (`generateName: <agent>-`) through the Kubernetes API (kubeconfig like kubectl,
or the in-cluster ServiceAccount), follows it with a watch (a GET every 0.5 s when the watch
is forbidden), writes progress to stderr (phase, step, tool decisions, child Tasks' phases:
never content) and the final output to stdout, and exits with a code that says how the Task
ended (`invokeargs.EXIT_CODES`). A Task that delegated lists its children at the end.

Also installed as `kubectl-ordo`, so `kubectl ordo invoke ...` runs the same command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TextIO, TypeVar

import httpx
import kopf
import yaml

from ..api.task import TERMINAL_PHASES
from ..operator.kube.auth import KubeconfigError, connect, kubeconfig_login
from ..operator.kube.client import ApiError, KubeClient
from .invokeargs import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_SUCCEEDED,
    EXIT_TERMINATED,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    InvokeError,
    add_arguments,
    exit_code,
    read_input,
    runs,
    task_manifest,
    timeout_seconds,
)
from .taskwatch import Progress, children_summary, summary, task_updates, watch_client

__all__ = [
    "EXIT_CANCELLED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_SUCCEEDED",
    "EXIT_TERMINATED",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "InvokeError",
    "KubeconfigError",
    "Progress",
    "add_arguments",
    "children_summary",
    "exit_code",
    "kubeconfig_login",
    "read_input",
    "run",
    "summary",
    "task_manifest",
    "timeout_seconds",
]

T = TypeVar("T")


class Stop:
    """SIGINT and SIGTERM as one invocation sees them, from before its first request to its
    end. Neither is ever the default "exit now": that would leave a Task whose create request
    was in flight running with nobody waiting for it (the Task can exist before the answer
    comes). A signal only sets `requested`; each phase decides what it means (`Invocation`)."""

    def __init__(self) -> None:
        self.requested = asyncio.Event()
        self.terminated = False
        """A SIGTERM came (a CI system stopping the job): cancel without asking."""

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self._on, False)
            loop.add_signal_handler(signal.SIGTERM, self._on, True)

    def remove(self, loop: asyncio.AbstractEventLoop) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
            loop.remove_signal_handler(signal.SIGTERM)

    def _on(self, terminated: bool) -> None:
        self.terminated = self.terminated or terminated
        self.requested.set()

    def exit_code(self) -> int:
        return EXIT_TERMINATED if self.terminated else EXIT_INTERRUPTED


class Invocation:
    """One `ordo invoke` run: create, follow, report."""

    def __init__(
        self,
        args: argparse.Namespace,
        *,
        text: str | None,
        timeout: float | None,
        out: TextIO,
        err: TextIO,
        interactive: bool,
        read_line: Callable[[], str] | None = None,
    ) -> None:
        self.args = args
        self.text = text
        self.timeout = timeout
        self.out = out
        self.err = err
        self.interactive = interactive
        self.read_line = read_line or (lambda: sys.stdin.readline() if sys.stdin else "")
        self.stop = Stop()

    def note(self, line: str) -> None:
        print(line, file=self.err, flush=True)

    async def run(self, info: kopf.ConnectionInfo) -> int:
        loop = asyncio.get_running_loop()
        self.stop.install(loop)  # before the first request: see `Stop`
        namespace = self.args.namespace or info.default_namespace or "default"
        kube = KubeClient(info, max_connections=4)
        keep: list[Any] = []
        http = watch_client(info, keep)
        try:
            return await self._run(kube, http, namespace)
        finally:
            await http.aclose()
            await kube.close()
            self.stop.remove(loop)

    async def _unless_stopped(self, work: Awaitable[T]) -> T | None:
        """`work`'s result, or None (`work` cancelled) once a signal came first. Only for what
        is safe to abandon: the reads before the Task is created, never the create."""
        job = asyncio.ensure_future(work)
        stopper = asyncio.ensure_future(self.stop.requested.wait())
        try:
            await asyncio.wait({job, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if job.done():
            return job.result()
        job.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await job
        return None

    async def _run(self, kube: KubeClient, http: httpx.AsyncClient, namespace: str) -> int:
        agent = self.args.agent
        kind, name = runs(agent)
        try:
            found = await self._unless_stopped(kube.get(kind, namespace, name))
            if found is None and not self.stop.requested.is_set():
                self.note(f"error: {kind} {name!r} not found in namespace {namespace!r}")
                return EXIT_USAGE
        except ApiError as exc:
            if exc.status == 0:
                raise
            # No permission to read Agents (RBAC): the operator reports a missing one.
        if self.stop.requested.is_set():
            self.note("stopped before creating a Task: no Task was created")
            return self.stop.exit_code()
        # A signal while the create is in flight only sets `stop.requested`: the create ends,
        # and the Task it made is cancelled below (`_follow`), never left running unwatched.
        manifest = task_manifest(agent, self.text, await _requester(kube))
        created = await kube.create("Task", namespace, manifest)
        name = str(created["metadata"]["name"])
        self.note(f"task/{name} created in namespace {namespace}")
        if not self.args.wait:
            if self.stop.requested.is_set():  # stopped before the command had done its job
                await kube.patch("Task", namespace, name, {"spec": {"cancel": True}})
                self.note(f"task/{name} was asked to cancel: stopped while it was being created")
                return self.stop.exit_code()
            print(name, file=self.out, flush=True)
            return EXIT_SUCCEEDED
        version = str(created["metadata"].get("resourceVersion", ""))
        return await self._follow(kube, http, namespace, name, version)

    async def _follow(
        self, kube: KubeClient, http: httpx.AsyncClient, namespace: str, name: str, version: str
    ) -> int:
        loop = asyncio.get_running_loop()
        interrupted = self.stop.requested  # already set if a signal came during the create
        final: dict[str, Any] | None = None
        progress = Progress()

        async def until_done() -> dict[str, Any] | None:
            async for obj in task_updates(kube, http, namespace, name, version):
                if obj is None:
                    return None
                status = obj.get("status") or {}
                for line in progress.update(status):
                    self.note(line)
                if status.get("phase") in TERMINAL_PHASES:
                    return obj
            return None

        deadline = None if self.timeout is None else loop.time() + self.timeout
        follower = asyncio.create_task(until_done())
        cancelled = False
        try:
            while True:
                waiter = asyncio.create_task(interrupted.wait())
                remaining = None if deadline is None else max(0.0, deadline - loop.time())
                done, _ = await asyncio.wait(
                    {follower, waiter}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
                )
                waiter.cancel()
                if follower in done:
                    final = follower.result()
                    break
                if not done:
                    self.note(
                        f"timed out after {self.args.timeout} waiting for task/{name}; "
                        f"it keeps running (kubectl get task {name} -n {namespace})"
                    )
                    return EXIT_TIMEOUT
                interrupted.clear()
                if cancelled:
                    self.note(f"stopped waiting; task/{name} was asked to cancel")
                    return self.stop.exit_code()
                # SIGTERM (a stopped CI job) cancels without asking: nobody is there to answer.
                confirmed = (
                    self.stop.terminated or not self.interactive or await self._confirm(name)
                )
                interrupted.clear()
                if not confirmed:
                    self.note(f"task/{name} keeps running; waiting (Ctrl-C again to ask)")
                    continue
                await kube.patch("Task", namespace, name, {"spec": {"cancel": True}})
                cancelled = True
                self.note(f"cancelling task/{name} (Ctrl-C again to stop waiting)")
        finally:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError, ApiError):
                await follower
        if final is None:
            self.note(f"task/{name} was deleted before it ended")
            return self.stop.exit_code() if cancelled else EXIT_CANCELLED
        status = final.get("status") or {}
        self.note(f"task/{name} {summary(status)}")
        for line in children_summary(status):
            self.note(line)
        self._print(status)
        if cancelled:
            return self.stop.exit_code()
        return exit_code(status.get("phase"))

    async def _confirm(self, name: str) -> bool:
        print(f"\ncancel Task {name}? [y/N] ", end="", file=self.err, flush=True)
        answer = await asyncio.to_thread(self.read_line)
        return answer.strip().lower() in ("y", "yes")

    def _print(self, status: dict[str, Any]) -> None:
        fmt = self.args.output
        if fmt == "json":
            self.out.write(json.dumps(status, indent=2) + "\n")
        elif fmt == "yaml":
            self.out.write(yaml.safe_dump(status, sort_keys=False, allow_unicode=True))
        elif status.get("phase") == "Succeeded":
            text = status.get("output")
            if text is None and status.get("structuredOutput") is not None:
                text = json.dumps(status["structuredOutput"])
            if text:
                self.out.write(text if text.endswith("\n") else text + "\n")
            if status.get("outputTruncated"):
                self.note("note: the output was truncated to the status cap")
        self.out.flush()


def run(args: argparse.Namespace) -> int:
    """Entry point of `ordo invoke` (and `kubectl ordo invoke`)."""
    try:
        text = read_input(args, sys.stdin)
        timeout = timeout_seconds(args.timeout)
        info = connect(args.kubeconfig, args.context)
        invocation = Invocation(
            args,
            text=text,
            timeout=timeout,
            out=sys.stdout,
            err=sys.stderr,
            interactive=args.stdin is None
            and args.input_file != "-"
            and sys.stdin is not None  # fd 0 closed: no terminal
            and sys.stdin.isatty(),
        )
        return asyncio.run(invocation.run(info))
    except (InvokeError, KubeconfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ApiError as exc:
        print(f"error: Kubernetes API: {exc}", file=sys.stderr)
        return EXIT_USAGE


async def _requester(kube: KubeClient) -> str:
    """The caller's user name for the Task's requester annotation; "" when the API server
    does not say (an older server, no permission): the Task is created without it."""
    try:
        return await kube.username()
    except ApiError as exc:
        if exc.status == 0:
            raise
        return ""
