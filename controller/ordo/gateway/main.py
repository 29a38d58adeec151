"""`ordo gateway`: its flags, and serving the app with uvicorn (docs/a2a.md)."""

from __future__ import annotations

import argparse
import asyncio
import logging

import uvicorn

from ..engine.delegation import DEFAULT_MAX_DEPTH
from ..operator.kube.auth import login
from ..operator.kube.client import KubeClient
from ..runtime import tracing
from .app import Gateway, GatewayConfig, dumps_config

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: all)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default: 8080)")
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="serve the Agents of this namespace (repeat for several; default: all)",
    )
    parser.add_argument(
        "--audience",
        action="append",
        default=[],
        metavar="AUD",
        help="a caller's token must be issued for this audience (TokenReview; repeat for "
        "several; default: the API server's own audience)",
    )
    parser.add_argument(
        "--rate-limit",
        type=float,
        default=5.0,
        help="requests per second per caller, then 429 (0: unlimited; default: 5)",
    )
    parser.add_argument(
        "--rate-burst", type=int, default=20, help="requests a caller may burst (default: 20)"
    )
    parser.add_argument(
        "--public-url",
        default="",
        help="the gateway's URL as callers reach it, for agent cards (default: the request's)",
    )
    parser.add_argument(
        "--max-delegation-depth",
        type=int,
        default=DEFAULT_MAX_DEPTH,
        help="refuse a caller whose delegation chain is this deep already (default: "
        f"{DEFAULT_MAX_DEPTH}, as the operator's)",
    )


def config_from(args: argparse.Namespace) -> GatewayConfig:
    return GatewayConfig(
        namespaces=tuple(args.namespace),
        audiences=tuple(args.audience),
        rate=args.rate_limit,
        burst=args.rate_burst,
        public_url=args.public_url,
        max_depth=args.max_delegation_depth,
    )


async def serve(args: argparse.Namespace) -> None:
    config = config_from(args)
    kube = KubeClient(login(), relogin=login)
    try:
        app = Gateway(kube, config).app()
        server = uvicorn.Server(
            uvicorn.Config(app, host=args.host, port=args.port, log_level="info", access_log=False)
        )
        log.info("ordo gateway: %s", dumps_config(config))
        await server.serve()
    finally:
        await kube.close()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if problem := tracing.configure_or_explain("ordo-gateway"):
        log.error(problem)
        return 2
    try:
        asyncio.run(serve(args))
    finally:
        tracing.shutdown()
    return 0
