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
from .tokencache import MAX_TTL

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
        "--client-rate-limit",
        type=float,
        default=20.0,
        help="JSON-RPC requests per second per client address, checked before the token is "
        "reviewed, then 429 (0: unlimited; default: 20)",
    )
    parser.add_argument(
        "--client-rate-burst",
        type=int,
        default=50,
        help="requests a client address may burst (default: 50)",
    )
    parser.add_argument(
        "--token-cache-ttl",
        type=float,
        default=30.0,
        help="seconds a successful TokenReview is reused for the same token, never past the "
        "token's expiry (0: review every request; at most 60; default: 30)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=9090,
        help="serve Prometheus /metrics on this port (0: off; default: 9090)",
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
    """The configuration the flags give; ValueError names a flag out of range."""
    if not 0 <= args.token_cache_ttl <= MAX_TTL:
        raise ValueError(
            f"--token-cache-ttl must be 0-{MAX_TTL:g} seconds, not {args.token_cache_ttl:g}"
        )
    return GatewayConfig(
        namespaces=tuple(args.namespace),
        audiences=tuple(args.audience),
        rate=args.rate_limit,
        burst=args.rate_burst,
        client_rate=args.client_rate_limit,
        client_burst=args.client_rate_burst,
        token_cache_ttl=args.token_cache_ttl,
        public_url=args.public_url,
        max_depth=args.max_delegation_depth,
    )


async def serve(args: argparse.Namespace, config: GatewayConfig) -> int:
    kube = KubeClient(login(), relogin=login)
    try:
        gateway = Gateway(kube, config)
        if args.metrics_port:
            try:
                gateway.metrics.serve(args.host, args.metrics_port)
            except OSError as exc:
                log.error(
                    "ordo gateway: --metrics-port %s: cannot listen on %s (%s); choose a free "
                    "port (0 disables metrics)",
                    args.metrics_port,
                    args.host,
                    exc.strerror or exc,
                )
                return 2
        server = uvicorn.Server(
            uvicorn.Config(
                gateway.app(), host=args.host, port=args.port, log_level="info", access_log=False
            )
        )
        log.info("ordo gateway: %s", dumps_config(config))
        await server.serve()
        return 0
    finally:
        await kube.close()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        config = config_from(args)
    except ValueError as exc:
        log.error("ordo gateway: %s", exc)
        return 2
    if problem := tracing.configure_or_explain("ordo-gateway"):
        log.error(problem)
        return 2
    try:
        return asyncio.run(serve(args, config))
    finally:
        tracing.shutdown()
