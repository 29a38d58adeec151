"""`ordo console`: its flags, the user's login, and serving the app on 127.0.0.1 with
uvicorn (docs/console.md). The URL with the login token is printed once, on stdout; nothing
logs request URLs (uvicorn's access log is off)."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from typing import Any

import uvicorn

from ..operator.kube.auth import KubeconfigError, connect
from ..operator.kube.client import ApiError, KubeClient
from .access import Access
from .app import build
from .pages import Console
from .security import Guard

HOST = "127.0.0.1"
MAX_CONNECTIONS = 32
"""The user's connection pool: page reads and the live pages' watches share it."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        "-n",
        metavar="NS",
        action="append",
        default=[],
        help="a namespace to show (repeat for more; default: every namespace you may list "
        "Tasks in, else your kubeconfig context's namespace)",
    )
    parser.add_argument(
        "--port", type=int, default=0, help="port on 127.0.0.1 (default 0: a free one)"
    )
    parser.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG)")
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context to use")
    parser.add_argument(
        "--tracing-url",
        metavar="TEMPLATE",
        default="",
        help="link a Task's trace id to your tracing UI: a http(s) URL with {traceId}, "
        "e.g. http://localhost:16686/trace/{traceId}",
    )


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "console",
        help="a web UI on 127.0.0.1 for Tasks, their steps and approvals, as you (docs/console.md)",
        description="Serve a web UI on 127.0.0.1 that shows Tasks, their steps, tool decisions, "
        "children and approvals, and approves or rejects waiting calls, with your kubeconfig's "
        "credentials (Kubernetes RBAC decides what you see and do). Open the printed URL: it "
        "carries a login token; keep it to yourself.",
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def tracing_template(value: str) -> str:
    """The `--tracing-url` template, checked: http(s) with `{traceId}`, or ""."""
    if value and (not value.startswith(("http://", "https://")) or "{traceId}" not in value):
        raise ValueError(
            f"--tracing-url {value!r}: give a http(s) URL containing {{traceId}}, "
            "e.g. http://localhost:16686/trace/{traceId}"
        )
    return value


def bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1 (never another address)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen(64)
    sock.set_inheritable(True)
    return sock


async def serve(args: argparse.Namespace, sock: socket.socket) -> int:
    info = connect(args.kubeconfig, args.context)
    kube = KubeClient(info, max_connections=MAX_CONNECTIONS)
    try:
        access = Access(kube, list(args.namespace), info.default_namespace or "default")
        guard = Guard(port=sock.getsockname()[1])
        console = Console(access, guard, tracing_template(args.tracing_url))
        scope = await access.scope()
        server = uvicorn.Server(
            uvicorn.Config(
                build(console),
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=2,
            )
        )
        shown = "all namespaces" if scope.everywhere else ", ".join(scope.names)
        print(f"ordo console: {shown} ({scope.how}), as {await access.user() or 'you'}")
        print(f"open {guard.login_url()}", flush=True)
        await server.serve(sockets=[sock])
        return 0
    finally:
        await kube.close()


def run(args: argparse.Namespace) -> int:
    try:
        tracing_template(args.tracing_url)
        sock = bind(args.port)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(serve(args, sock))
    except KubeconfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ApiError as exc:
        print(f"error: Kubernetes API: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    finally:
        sock.close()
