"""A seeded, fault-injecting HTTPS proxy in front of kube-apiserver.

The operator under test gets a kubeconfig whose `server` is this proxy (`proxy.kubeconfig`,
trusting the proxy's own throw-away CA); the proxy forwards to the real apiserver as the
control plane's admin (client certificate, or token, from the control plane's kubeconfig).
While armed, each non-watch request is, with probability `rate`, given one fault:

    http-409       answered 409 Conflict without forwarding (only requests that could meet a
                   conflict: creates, updates, patches and deletes with a resourceVersion)
    http-429       answered 429 TooManyRequests (Retry-After: 1) without forwarding
    http-500       answered 500 InternalError without forwarding
    reset-before   connection reset before the request is forwarded (nothing applied)
    reset-after    the request IS forwarded and applied, then the connection is reset
                   instead of answering: "write applied, response lost"
    delay          forwarded, answered after a delay of `delay_range` seconds

Watch requests (`?watch=true`) are streamed through; with probability `watch_drop_rate` a
stream is cut (connection reset) after a few seconds (`watch-drop`).

Deterministic per seed: the decision for a request depends only on the seed, the request's
method and path (namespace and uids masked, volatile query parameters dropped) and how many
requests with that same key came before it, not on how concurrent requests interleave.
`faults` counts injected faults by kind, `requests` counts requests seen; `summary()` gives
both as a dict.

    with FaultProxy(control_plane.kubeconfig, tmp_path, seed=7, rate=0.08) as proxy:
        op = OperatorProcess(cp, ns, tmp_path, kubeconfig=proxy.kubeconfig).start()
        proxy.arm()
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import hashlib
import ipaddress
import json
import os
import re
import socket
import ssl
import struct
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from .threaded_server import Cleanup, ServerThread, serve_aiohttp

FAULT_KINDS = ("http-409", "http-429", "http-500", "reset-before", "reset-after", "delay")
WATCH_DROP = "watch-drop"
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_REQUEST_DROP = _HOP_BY_HOP | {"authorization", "accept-encoding"}
_RESPONSE_DROP = _HOP_BY_HOP | {"content-encoding"}
_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_NAMESPACE = re.compile(r"/namespaces/[^/]+")
_VOLATILE_QUERY = frozenset({"resourceVersion", "timeoutSeconds", "allowWatchBookmarks"})
_STATUS = {
    "http-409": (409, "Conflict"),
    "http-429": (429, "TooManyRequests"),
    "http-500": (500, "InternalError"),
}


def request_key(method: str, path: str, query: Mapping[str, str]) -> str:
    """The identity of a request for fault decisions: namespace names and uids masked,
    volatile query parameters dropped (so a run in another namespace draws the same)."""
    masked = _NAMESPACE.sub("/namespaces/{ns}", _UID.sub("{uid}", path))
    params = "&".join(
        f"{k}={_UID.sub('{uid}', v)}" for k, v in sorted(query.items()) if k not in _VOLATILE_QUERY
    )
    return f"{method} {masked}?{params}"


def _draw(seed: int, key: str, n: int, salt: str) -> float:
    """A uniform number in [0, 1) that depends only on its arguments."""
    digest = hashlib.blake2b(f"{seed}|{salt}|{key}|{n}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass(frozen=True)
class InjectedFault:
    kind: str
    method: str
    key: str
    """`request_key` of the request (namespace and uids masked)."""
    path: str
    """The real path (for a create, with the new object's name appended), so a failure
    message can name the object."""
    at: float
    """When (`time.time()`)."""


class FaultProxy:
    """See the module docstring. `start()`/`stop()` or use it as a context manager."""

    def __init__(
        self,
        upstream_kubeconfig: str | os.PathLike[str],
        workdir: str | os.PathLike[str],
        *,
        seed: int = 0,
        rate: float = 0.08,
        kinds: Sequence[str] = FAULT_KINDS,
        delay_range: tuple[float, float] = (0.2, 2.0),
        watch_drop_rate: float = 0.25,
        watch_drop_after: tuple[float, float] = (2.0, 20.0),
    ) -> None:
        unknown = set(kinds) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {FAULT_KINDS}")
        self.seed = seed
        self.rate = rate
        self.kinds = tuple(kinds)
        self.delay_range = delay_range
        self.watch_drop_rate = watch_drop_rate
        self.watch_drop_after = watch_drop_after
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._upstream = self._read_upstream(Path(upstream_kubeconfig))
        self._lock = threading.Lock()
        self._seen: Counter[str] = Counter()
        self._armed = False
        self.faults: Counter[str] = Counter()
        """Injected faults by kind."""
        self.requests: Counter[str] = Counter()
        """Requests seen, by method ("WATCH" for watch streams)."""
        self.injected: list[InjectedFault] = []
        self._thread = ServerThread("fault-proxy")
        self._session: aiohttp.ClientSession | None = None
        self.port = 0
        self.kubeconfig = self.workdir / "faultproxy.kubeconfig"
        """A kubeconfig for clients that should go through the proxy."""

    # -- configuration --------------------------------------------------------------------

    def _read_upstream(self, path: Path) -> dict[str, Any]:
        config = yaml.safe_load(path.read_text())
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        context = contexts.get(config.get("current-context", ""), {})
        clusters = {c["name"]: c["cluster"] for c in config["clusters"]}
        users = {u["name"]: u.get("user") or {} for u in config.get("users") or []}
        cluster = clusters.get(context.get("cluster", ""), config["clusters"][0]["cluster"])
        user = users.get(context.get("user", ""), {})
        ctx = ssl.create_default_context()
        if cluster.get("certificate-authority-data"):
            ctx.load_verify_locations(
                cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
            )
        elif cluster.get("certificate-authority"):
            ctx.load_verify_locations(cafile=cluster["certificate-authority"])
        cert, key = user.get("client-certificate"), user.get("client-key")
        if user.get("client-certificate-data") and user.get("client-key-data"):
            cert = str(self._private("upstream-client.crt", user["client-certificate-data"]))
            key = str(self._private("upstream-client.key", user["client-key-data"]))
        if cert and key:
            ctx.load_cert_chain(cert, key)
        headers = {"Authorization": f"Bearer {user['token']}"} if user.get("token") else {}
        return {"server": cluster["server"].rstrip("/"), "ssl": ctx, "headers": headers}

    def _private(self, name: str, b64: str) -> Path:
        path = self.workdir / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(base64.b64decode(b64))
        return path

    def _serving_context(self) -> tuple[ssl.SSLContext, bytes]:
        """A throw-away CA and a serving certificate for 127.0.0.1; returns the server
        context and the CA certificate (PEM) for the clients' kubeconfig."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = dt.datetime.now(dt.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ordo-faultproxy-ca")])
        ca_cert = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "faultproxy")]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
                        x509.DNSName("localhost"),
                    ]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        pem = serialization.Encoding.PEM
        cert_path = self.workdir / "faultproxy.crt"
        cert_path.write_bytes(cert.public_bytes(pem))
        key_path = self.workdir / "faultproxy.key"
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(
                key.private_bytes(
                    pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                )
            )
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(cert_path), str(key_path))
        return context, ca_cert.public_bytes(pem)

    def _write_kubeconfig(self, ca_pem: bytes) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "faultproxy",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                    },
                }
            ],
            # The proxy authenticates upstream itself; this token is dropped, never forwarded.
            "users": [{"name": "faultproxy", "user": {"token": "via-faultproxy"}}],
            "contexts": [
                {"name": "faultproxy", "context": {"cluster": "faultproxy", "user": "faultproxy"}}
            ],
            "current-context": "faultproxy",
        }
        fd = os.open(self.kubeconfig, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            yaml.safe_dump(config, handle, sort_keys=False)

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> FaultProxy:
        context, ca_pem = self._serving_context()

        async def setup() -> tuple[int, Cleanup]:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._upstream["ssl"], limit=0),
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, connect=10),
            )
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_route("*", "/{tail:.*}", self._handle)
            port, cleanup = await serve_aiohttp(app, ssl_context=context)

            async def close() -> None:
                await cleanup()
                if self._session is not None:
                    await self._session.close()

            return port, close

        self.port = self._thread.start(setup)
        self._write_kubeconfig(ca_pem)
        return self

    def stop(self) -> None:
        self._thread.stop()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def arm(self) -> None:
        """Start injecting faults (requests before this pass through untouched)."""
        with self._lock:
            self._armed = True

    def disarm(self) -> None:
        with self._lock:
            self._armed = False

    def summary(self) -> dict[str, Any]:
        with self._lock:
            return {
                "seed": self.seed,
                "rate": self.rate,
                "requests": dict(sorted(self.requests.items())),
                "faults": dict(sorted(self.faults.items())),
                "faultsTotal": sum(self.faults.values()),
            }

    def faults_on(self, fragment: str) -> list[InjectedFault]:
        """The faults injected into requests whose path contains `fragment` (e.g. a Task
        name or uid), for failure messages."""
        with self._lock:
            return [f for f in self.injected if fragment in f.path]

    # -- decisions ------------------------------------------------------------------------

    def _decide(
        self, method: str, key: str, watch: bool, conditional: bool = False
    ) -> tuple[str | None, float]:
        """(fault kind or None, a parameter: the delay, or the seconds before a watch drop).
        `conditional`: the request can meet a conflict (see `_can_conflict`), so a 409 is
        one of the faults it may get."""
        with self._lock:
            self.requests["WATCH" if watch else method] += 1
            if not self._armed:
                return None, 0.0
            n = self._seen[key]
            self._seen[key] = n + 1
        if watch:
            if _draw(self.seed, key, n, "fault") >= self.watch_drop_rate:
                return None, 0.0
            low, high = self.watch_drop_after
            return WATCH_DROP, low + (high - low) * _draw(self.seed, key, n, "param")
        if _draw(self.seed, key, n, "fault") >= self.rate:
            return None, 0.0
        kinds = [k for k in self.kinds if k != "http-409" or conditional]
        if not kinds:
            return None, 0.0
        kind = kinds[int(_draw(self.seed, key, n, "kind") * len(kinds))]
        low, high = self.delay_range
        return kind, low + (high - low) * _draw(self.seed, key, n, "param")

    def _record(self, kind: str, method: str, key: str, path: str) -> None:
        with self._lock:
            self.faults[kind] += 1
            self.injected.append(InjectedFault(kind, method, key, path, time.time()))

    # -- HTTP -----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        watch = request.query.get("watch", "").lower() in ("true", "1")
        key = request_key(request.method, request.path, request.query)
        kind, param = self._decide(request.method, key, watch, _can_conflict(request.method, body))
        where = request.path
        if request.method == "POST" and body:
            where = f"{where}/{_created_name(body)}"  # name the object a create makes
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _REQUEST_DROP}
        headers.update(self._upstream["headers"])
        if watch:
            return await self._watch(request, headers, body, kind, param, key)
        if kind in _STATUS:
            self._record(kind, request.method, key, where)
            code, reason = _STATUS[kind]
            return web.json_response(
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"injected by the fault proxy ({kind})",
                    "reason": reason,
                    "code": code,
                },
                status=code,
                headers={"Retry-After": "1"} if code == 429 else None,
            )
        if kind == "reset-before":
            self._record(kind, request.method, key, where)
            return _reset(request)
        assert self._session is not None
        async with self._session.request(
            request.method,
            self._upstream["server"] + request.path_qs,
            headers=headers,
            data=body if body else None,
            timeout=aiohttp.ClientTimeout(total=60),
        ) as upstream:
            payload = await upstream.read()
            status = upstream.status
            reply_headers = {
                k: v for k, v in upstream.headers.items() if k.lower() not in _RESPONSE_DROP
            }
        if kind == "reset-after":
            self._record(kind, request.method, key, where)
            return _reset(request)
        if kind == "delay":
            self._record(kind, request.method, key, where)
            await asyncio.sleep(param)
        return web.Response(status=status, body=payload, headers=reply_headers)

    async def _watch(
        self,
        request: web.Request,
        headers: dict[str, str],
        body: bytes,
        kind: str | None,
        drop_after: float,
        key: str,
    ) -> web.StreamResponse:
        assert self._session is not None
        loop = asyncio.get_running_loop()
        drop_at = loop.time() + drop_after if kind == WATCH_DROP else None
        try:
            async with self._session.request(
                request.method,
                self._upstream["server"] + request.path_qs,
                headers=headers,
                data=body if body else None,
            ) as upstream:
                reply_headers = {
                    k: v for k, v in upstream.headers.items() if k.lower() not in _RESPONSE_DROP
                }
                response = web.StreamResponse(status=upstream.status, headers=reply_headers)
                await response.prepare(request)
                while True:
                    timeout = None if drop_at is None else max(0.0, drop_at - loop.time())
                    try:
                        chunk = await asyncio.wait_for(upstream.content.readany(), timeout)
                    except TimeoutError:
                        self._record(WATCH_DROP, request.method, key, request.path)
                        return _reset(request)
                    if not chunk:
                        break
                    await response.write(chunk)
        except (aiohttp.ClientError, ConnectionError, RuntimeError):
            # The apiserver ended the stream badly, or the client went away: pass it on.
            return _reset(request)
        await response.write_eof()
        return response

    def fault_log(self) -> str:
        """One line per injected fault (kind, method, path), as JSON lines."""
        with self._lock:
            return "\n".join(
                json.dumps(
                    {
                        "at": round(f.at, 3),
                        "kind": f.kind,
                        "method": f.method,
                        "path": f.path,
                    }
                )
                for f in self.injected
            )


def _can_conflict(method: str, body: bytes) -> bool:
    """Whether the real apiserver could answer this request 409: a create (AlreadyExists,
    e.g. racing another holder), an update, or a patch or delete with a resourceVersion
    precondition. A patch without one is retried on conflicts inside the apiserver, and a
    failed JSON Patch `test` is a 422, not a 409, so neither gets an injected 409."""
    if method in ("POST", "PUT"):
        return True
    if method in ("PATCH", "DELETE"):
        return b'"resourceVersion"' in body
    return False


def _created_name(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    meta = data.get("metadata") if isinstance(data, dict) else None
    return str(meta.get("name") or meta.get("generateName") or "") if isinstance(meta, dict) else ""


def _reset(request: web.Request) -> web.Response:
    """Abort the client connection with a TCP RST (SO_LINGER 0): the client sees a reset."""
    transport = request.transport
    if transport is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    return web.Response(status=204)
