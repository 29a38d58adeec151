"""`ordo invoke AGENT`: run an Agent on the cluster from a terminal or a pipeline.

Creates a Task (`generateName: <agent>-`) through the Kubernetes API (kubeconfig like kubectl,
or the in-cluster ServiceAccount), follows it with a watch (a GET every 0.5 s when the watch
is forbidden), writes progress to stderr (phase, step, tool decisions: never content) and the
final output to stdout, and exits with a code that says how the Task ended (`EXIT_CODES`).

Also installed as `kubectl-ordo`, so `kubectl ordo invoke ...` runs the same command.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TextIO

import httpx
import kopf
import yaml

from .api import GROUP, VERSION
from .api.base import parse_duration
from .api.task import TERMINAL_PHASES
from .operator.kube import ApiError, KubeClient, path
from .operator.kubeauth import login, ssl_context
from .operator.kubeerrors import response_error, transport_error

EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
"""Bad arguments, no cluster credentials, the API refused or could not be reached."""
EXIT_CANCELLED = 3
EXIT_TIMEOUT = 4
"""`--timeout` reached while waiting: the Task is left running."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT): the Task was cancelled (or left running, if you said so) and waited for."""

EXIT_CODES = f"""\
exit codes:
  {EXIT_SUCCEEDED}    the Task Succeeded (or --no-wait: it was created)
  {EXIT_FAILED}    the Task Failed (its reason and message are printed)
  {EXIT_USAGE}    usage error, no credentials, or the Kubernetes API refused or was unreachable
  {EXIT_CANCELLED}    the Task was Cancelled (spec.cancel) or deleted
  {EXIT_TIMEOUT}    --timeout reached while waiting (the Task keeps running; its name is printed)
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C); without a TTY the Task is cancelled first

Ctrl-C asks "cancel Task X? [y/N]" when stdin is a terminal; without one (CI) it cancels
the Task (sets spec.cancel), waits for it to end and exits {EXIT_INTERRUPTED}. A second Ctrl-C
stops waiting."""

POLL_SECONDS = 0.5
WATCH_SECONDS = 300
"""Server-side timeout of one watch request; the watch is then resumed where it stopped."""
MAX_RECONNECTS = 5
"""Consecutive failed watch connections before giving up (exit 2, the Task keeps running)."""
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


# -- arguments ---------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.description = (
        "Create a Task for AGENT on the cluster (KUBECONFIG or ~/.kube/config, like kubectl;\n"
        "in a pod, its ServiceAccount), print its progress to stderr and its output to stdout."
    )
    parser.epilog = EXIT_CODES
    parser.add_argument("agent", metavar="AGENT", help="name of the Agent to run")
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


def read_input(args: argparse.Namespace, stdin: TextIO) -> str | None:
    """The input text from `--input`, `--input-file` or `-` (at most one), or None."""
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


def task_manifest(agent: str, text: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"agentRef": agent}
    if text is not None:
        spec["input"] = text
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Task",
        "metadata": {"generateName": f"{agent[:MAX_PREFIX]}-"},
        "spec": spec,
    }


# -- credentials -------------------------------------------------------------------------------

_FILE_KEYS = ("certificate-authority", "client-certificate", "client-key")


def kubeconfig_login(files: list[Path], context: str | None) -> kopf.ConnectionInfo:
    """Connection info of `context` (default: current-context) merged from kubeconfig `files`
    as kubectl merges them (the first file that sets a name wins); relative certificate paths
    are relative to the file that names them. Tokens, client certificates and basic auth only
    (no exec or auth-provider plugins)."""
    current: str | None = None
    sections: dict[str, dict[str, dict[str, Any]]] = {"contexts": {}, "clusters": {}, "users": {}}
    for file in files:
        try:
            config = yaml.safe_load(file.read_text()) or {}
        except OSError as exc:
            raise InvokeError(f"cannot read kubeconfig {file}: {exc.strerror}") from None
        except yaml.YAMLError:
            raise InvokeError(f"kubeconfig {file} is not valid YAML") from None
        if not isinstance(config, dict):
            raise InvokeError(f"kubeconfig {file} is not a mapping")
        current = current or config.get("current-context") or None
        for section, inner in (("contexts", "context"), ("clusters", "cluster"), ("users", "user")):
            for item in config.get(section) or []:
                if not isinstance(item, dict) or item.get("name") in sections[section]:
                    continue
                body = dict(item.get(inner) or {})
                for key in _FILE_KEYS:
                    if isinstance(body.get(key), str):
                        body[key] = str(file.parent / os.path.expanduser(body[key]))
                sections[section][str(item.get("name"))] = body
    name = context or current
    if not name:
        raise InvokeError("no current-context in the kubeconfig: pass --context")
    ctx = sections["contexts"].get(name)
    if ctx is None:
        raise InvokeError(f"context {name!r} not found in the kubeconfig")
    cluster = sections["clusters"].get(str(ctx.get("cluster")))
    if cluster is None or not cluster.get("server"):
        raise InvokeError(f"context {name!r}: cluster {ctx.get('cluster')!r} has no server")
    user = sections["users"].get(str(ctx.get("user")), {})
    token = user.get("token") or (user.get("auth-provider") or {}).get("config", {}).get(
        "access-token"
    )
    if not token and user.get("tokenFile"):
        try:
            token = Path(user["tokenFile"]).read_text().strip()
        except OSError as exc:
            raise InvokeError(f"cannot read tokenFile: {exc.strerror}") from None
    if user.get("exec") and not token:
        raise InvokeError(
            f"context {name!r} uses an exec credential plugin, which ordo does not run: "
            "use a kubeconfig with a token or a client certificate"
        )
    return kopf.ConnectionInfo(
        server=str(cluster["server"]),
        ca_path=cluster.get("certificate-authority"),
        ca_data=cluster.get("certificate-authority-data"),
        insecure=cluster.get("insecure-skip-tls-verify"),
        certificate_path=user.get("client-certificate"),
        certificate_data=user.get("client-certificate-data"),
        private_key_path=user.get("client-key"),
        private_key_data=user.get("client-key-data"),
        username=user.get("username"),
        password=user.get("password"),
        token=token,
        default_namespace=ctx.get("namespace"),
    )


def connect(kubeconfig: str | None, context: str | None) -> kopf.ConnectionInfo:
    """--kubeconfig, else $KUBECONFIG, else ~/.kube/config, else the in-cluster account."""
    spec = kubeconfig or os.environ.get("KUBECONFIG", "")
    files = [Path(os.path.expanduser(p)) for p in spec.split(os.pathsep) if p.strip()]
    if not files and Path("~/.kube/config").expanduser().exists():
        files = [Path("~/.kube/config").expanduser()]
    if files:
        return kubeconfig_login(files, context)
    if context:
        raise InvokeError("--context needs a kubeconfig (--kubeconfig or $KUBECONFIG)")
    try:
        return login()
    except kopf.LoginError:
        raise InvokeError("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not in a pod") from None


def _watch_client(info: kopf.ConnectionInfo, keep: list[Any]) -> httpx.AsyncClient:
    headers = {"Accept": "application/json", "User-Agent": "ordo-invoke"}
    if info.token:
        headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
    auth = (
        httpx.BasicAuth(info.username, info.password) if info.username and info.password else None
    )
    return httpx.AsyncClient(
        base_url=info.server,
        headers=headers,
        auth=auth,
        verify=ssl_context(info, keep),
        timeout=httpx.Timeout(10.0, read=WATCH_SECONDS + 30.0),
    )


# -- following the Task ------------------------------------------------------------------------


class Progress:
    """Progress lines from successive statuses: phase, step, tool decisions and outcomes (never
    arguments, results or output)."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self.step = 0
        self.calls: dict[tuple[Any, ...], tuple[Any, Any]] = {}

    def update(self, status: dict[str, Any]) -> list[str]:
        lines: list[str] = []
        phase = status.get("phase")
        if phase and phase != self.phase and phase not in TERMINAL_PHASES:
            lines.append(f"phase {phase}")
        self.phase = phase or self.phase
        seen: dict[tuple[Any, ...], int] = {}
        for record in status.get("toolCalls") or []:
            if not isinstance(record, dict):
                continue
            base = (record.get("step"), record.get("callId"), record.get("tool"))
            seen[base] = seen.get(base, 0) + 1
            key = (*base, seen[base])
            now = (record.get("decision"), record.get("outcome"))
            before = self.calls.get(key, (None, None))
            if now == before:
                continue
            self.calls[key] = now
            where = f"step {record.get('step')}: tool {record.get('tool')}"
            if now[0] != before[0]:
                why = f" ({record['reason']})" if record.get("reason") else ""
                lines.append(f"{where} {now[0]}{why}")
            if now[1] and now[1] != before[1]:
                error = f" ({record['error']})" if record.get("error") else ""
                lines.append(f"{where} {now[1]}{error}")
        step = status.get("step")
        if isinstance(step, int) and step > self.step:
            self.step = step
            lines.append(f"step {step} done")
        return lines


def summary(status: dict[str, Any]) -> str:
    """One line on how the Task ended: phase, reason, message, steps, tokens."""
    phase = status.get("phase")
    text = str(phase)
    if status.get("reason") and status.get("reason") != phase:
        text += f": {status['reason']}"
    if status.get("message") and phase != "Succeeded":
        text += f": {status['message']}"
    tokens = (status.get("usage") or {}).get("totalTokens")
    extra = [f"{status.get('step') or 0} step(s)"] + ([f"{tokens} tokens"] if tokens else [])
    return f"{text} ({', '.join(extra)})"


async def task_updates(
    kube: KubeClient, http: httpx.AsyncClient, namespace: str, name: str, version: str
) -> AsyncIterator[dict[str, Any] | None]:
    """The Task each time it changes (None once it is deleted): a watch from `version`,
    resumed after the server closes it, re-listed after 410 Gone; a GET every POLL_SECONDS
    when a watch is forbidden."""
    url = path("Task", namespace)
    watch = True
    failures = 0
    rv: str | None = version
    while True:
        if rv is None or not watch:
            obj = await kube.get("Task", namespace, name)
            yield obj
            if obj is None:
                return
            rv = str(obj["metadata"].get("resourceVersion", ""))
            if not watch:
                await asyncio.sleep(POLL_SECONDS)
                continue
        params = {
            "watch": "1",
            "fieldSelector": f"metadata.name={name}",
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
        }
        try:
            async with http.stream("GET", url, params=params) as response:
                if response.status_code in (403, 405):
                    watch = False
                    continue
                if response.status_code == 410:
                    rv = None
                    continue
                if response.status_code >= 400:
                    await response.aread()
                    raise response_error(response)
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    failures = 0
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        if obj.get("code") == 410:
                            rv = None
                            break
                        raise ApiError(
                            int(obj.get("code") or 0),
                            str(obj.get("reason", "")),
                            str(obj.get("message", ""))[:300],
                        )
                    rv = str(obj.get("metadata", {}).get("resourceVersion") or rv)
                    if event.get("type") == "DELETED":
                        yield None
                        return
                    if event.get("type") != "BOOKMARK":
                        yield obj
        except (httpx.TransportError, ValueError) as exc:
            failures += 1
            if failures > MAX_RECONNECTS:
                if isinstance(exc, httpx.TransportError):
                    raise transport_error(exc) from None
                raise ApiError(0, "InvalidResponse", type(exc).__name__) from None
            await asyncio.sleep(min(0.5 * 2**failures, 5.0))


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
        self.read_line = read_line or sys.stdin.readline

    def note(self, line: str) -> None:
        print(line, file=self.err, flush=True)

    async def run(self, info: kopf.ConnectionInfo) -> int:
        namespace = self.args.namespace or info.default_namespace or "default"
        kube = KubeClient(info, max_connections=4)
        keep: list[Any] = []
        http = _watch_client(info, keep)
        try:
            return await self._run(kube, http, namespace)
        finally:
            await http.aclose()
            await kube.close()

    async def _run(self, kube: KubeClient, http: httpx.AsyncClient, namespace: str) -> int:
        agent = self.args.agent
        try:
            if await kube.get("Agent", namespace, agent) is None:
                self.note(f"error: Agent {agent!r} not found in namespace {namespace!r}")
                return EXIT_USAGE
        except ApiError as exc:
            if exc.status == 0:
                raise
            # No permission to read Agents (RBAC): the operator reports a missing one.
        created = await kube.create("Task", namespace, task_manifest(agent, self.text))
        name = str(created["metadata"]["name"])
        self.note(f"task/{name} created in namespace {namespace}")
        if not self.args.wait:
            print(name, file=self.out, flush=True)
            return EXIT_SUCCEEDED
        version = str(created["metadata"].get("resourceVersion", ""))
        return await self._follow(kube, http, namespace, name, version)

    async def _follow(
        self, kube: KubeClient, http: httpx.AsyncClient, namespace: str, name: str, version: str
    ) -> int:
        loop = asyncio.get_running_loop()
        interrupted = asyncio.Event()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, interrupted.set)
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
                    return EXIT_INTERRUPTED
                confirmed = not self.interactive or await self._confirm(name)
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
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)
        if final is None:
            self.note(f"task/{name} was deleted before it ended")
            return EXIT_INTERRUPTED if cancelled else EXIT_CANCELLED
        status = final.get("status") or {}
        self.note(f"task/{name} {summary(status)}")
        self._print(status)
        return EXIT_INTERRUPTED if cancelled else exit_code(status.get("phase"))

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
            interactive=args.stdin is None and args.input_file != "-" and sys.stdin.isatty(),
        )
        return asyncio.run(invocation.run(info))
    except InvokeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ApiError as exc:
        print(f"error: Kubernetes API: {exc}", file=sys.stderr)
        return EXIT_USAGE
