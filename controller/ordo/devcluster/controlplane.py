"""Start etcd and kube-apiserver on loopback, write a kubeconfig, install CRDs, stop cleanly.

This is the same recipe as controller-runtime's envtest: no kubelet, no scheduler and no
kube-controller-manager, so nothing garbage-collects ownerReferences and namespaces never finish
deleting (see ``docs/development.md``). Authentication is a client certificate for ``admin`` in
``system:masters``; authorization is RBAC; service-account tokens (TokenRequest) work.

Cleanup: every child runs in its own process group and is stopped (SIGTERM, then SIGKILL) by
:meth:`ControlPlane.stop`, which also runs on ``with``-block exit, on exceptions and at
interpreter exit. On Linux each child also gets ``PR_SET_PDEATHSIG`` = SIGKILL, so a parent
that is SIGKILLed does not leave etcd or kube-apiserver behind; working directories left by
such a parent are removed the next time a control plane starts.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import datetime as dt
import http.client
import ipaddress
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import yaml

__all__ = [
    "BIN_ENV",
    "REQUIRED_BINARIES",
    "BinariesNotFoundError",
    "ControlPlane",
    "ControlPlaneError",
    "KubectlError",
    "default_bin_dir",
    "find_binaries",
]

#: Environment variable naming a directory that holds etcd, kube-apiserver and kubectl.
BIN_ENV = "ORDO_CONTROLPLANE_BIN"
REQUIRED_BINARIES = ("etcd", "kube-apiserver", "kubectl")

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
_WORKDIR_PREFIX = "ordo-devcluster-"
_OWNER_FILE = "owner.pid"
_KUBE_PIN = re.compile(r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)", re.MULTILINE)


class ControlPlaneError(RuntimeError):
    """The control plane could not be started or used."""


class BinariesNotFoundError(ControlPlaneError):
    """etcd, kube-apiserver or kubectl is missing: run ``scripts/build-controlplane``."""


class KubectlError(subprocess.CalledProcessError):
    """A kubectl command failed; ``str()`` includes its stderr."""

    def __str__(self) -> str:
        stderr = (self.stderr or "").strip()
        return f"{super().__str__()}\n{stderr}" if stderr else super().__str__()


# --------------------------------------------------------------------------- binaries


def _repo_root() -> Path | None:
    """The checkout holding ``tools/controlplane``, searched upwards from cwd and this file."""
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for candidate in (start, *start.parents):
            if (candidate / "tools" / "controlplane" / "kube" / "go.mod").is_file():
                return candidate
    return None


def default_bin_dir() -> Path | None:
    """Where ``scripts/build-controlplane`` puts the binaries of the pinned release."""
    root = _repo_root()
    if root is None:
        return None
    go_mod = (root / "tools" / "controlplane" / "kube" / "go.mod").read_text()
    match = _KUBE_PIN.search(go_mod)
    if match is None:
        return None
    return root / ".cache" / "controlplane" / match.group(1) / "bin"


def find_binaries(bin_dir: str | os.PathLike[str] | None = None) -> Path:
    """The directory holding etcd, kube-apiserver and kubectl.

    Looks at ``bin_dir``, then ``$ORDO_CONTROLPLANE_BIN``, then the build cache of this
    checkout. Raises :class:`BinariesNotFoundError` with instructions when they are missing.
    """
    if bin_dir is not None:
        directory: Path | None = Path(bin_dir)
        source = "the bin_dir argument"
    elif os.environ.get(BIN_ENV):
        directory = Path(os.environ[BIN_ENV])
        source = f"${BIN_ENV}"
    else:
        directory = default_bin_dir()
        source = "the build cache of this checkout"
    if directory is None:
        raise BinariesNotFoundError(
            "cannot locate the control-plane binaries: not inside an ordo checkout and "
            f"${BIN_ENV} is not set. Set {BIN_ENV} to a directory holding "
            f"{', '.join(REQUIRED_BINARIES)}."
        )
    missing = [name for name in REQUIRED_BINARIES if not os.access(directory / name, os.X_OK)]
    if missing:
        raise BinariesNotFoundError(
            f"{', '.join(missing)} not found in {directory} ({source}). Build the pinned "
            "control plane with `scripts/build-controlplane` (Go >= 1.26; the first build "
            f"takes several minutes), or set {BIN_ENV} to a directory holding "
            f"{', '.join(REQUIRED_BINARIES)}."
        )
    return directory.resolve()


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class _Pki:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    admin_cert: Path
    admin_key: Path
    sa_public_key: Path
    sa_private_key: Path


def _generate_pki(directory: Path) -> _Pki:
    """A throw-away CA, a serving cert for 127.0.0.1, an admin client cert, SA signing keys."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ControlPlaneError(
            "the `cryptography` package is needed to generate the control plane's "
            "certificates: pip install cryptography"
        ) from exc

    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    not_before = now - dt.timedelta(hours=1)
    not_after = now + dt.timedelta(days=365)

    def write(name: str, data: bytes) -> Path:
        path = directory / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ordo-devcluster-ca")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
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
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    def leaf(
        subject: x509.Name, usage: x509.ObjectIdentifier, sans: Sequence[x509.GeneralName]
    ) -> tuple[bytes, bytes]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_after)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False,
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), key_pem(key)

    serving_sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
        x509.IPAddress(next(ipaddress.IPv4Network(SERVICE_CLUSTER_IP_RANGE).hosts())),
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
    ]
    serving_cert, serving_key = leaf(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]),
        ExtendedKeyUsageOID.SERVER_AUTH,
        serving_sans,
    )
    admin_cert, admin_key = leaf(
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                x509.NameAttribute(NameOID.COMMON_NAME, "admin"),
            ]
        ),
        ExtendedKeyUsageOID.CLIENT_AUTH,
        [],
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return _Pki(
        ca_cert=write("ca.crt", ca_cert.public_bytes(serialization.Encoding.PEM)),
        serving_cert=write("apiserver.crt", serving_cert),
        serving_key=write("apiserver.key", serving_key),
        admin_cert=write("admin.crt", admin_cert),
        admin_key=write("admin.key", admin_key),
        sa_public_key=write(
            "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        ),
        sa_private_key=write("sa.key", key_pem(sa_key)),
    )


# --------------------------------------------------------------------------- processes


def _free_ports(count: int) -> list[int]:
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


_PR_SET_PDEATHSIG = 1


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGKILL when this process dies (Linux only).

    The kernel sends the signal when the *thread* that forked the child exits, so start the
    control plane from a thread that outlives it (the main thread, normally).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return hook


@dataclass
class _Child:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale_workdirs() -> None:
    """Remove working directories whose owning process is gone (e.g. a SIGKILLed pytest)."""
    base = Path(tempfile.gettempdir())
    for directory in base.glob(f"{_WORKDIR_PREFIX}*"):
        try:
            owner = int((directory / _OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            continue
        if not _pid_alive(owner):
            shutil.rmtree(directory, ignore_errors=True)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# --------------------------------------------------------------------------- control plane


class ControlPlane:
    """etcd + kube-apiserver on free loopback ports, with an admin kubeconfig.

    Use as a context manager (``with ControlPlane() as cp:``) or call :meth:`start` and
    :meth:`stop`. After start:

    * ``kubeconfig``: path of a self-contained admin kubeconfig (context ``ordo-devcluster``)
    * ``server``: ``https://127.0.0.1:<port>``
    * ``binaries``: directory holding ``etcd``, ``kube-apiserver`` and ``kubectl``
    * ``kubectl(*args)``: run our kubectl against this cluster
    * ``create_namespace()``: a fresh, uniquely named namespace
    * ``apply_crds(directory)``: server-side apply and wait until Established
    * ``env()``: ``os.environ`` plus ``KUBECONFIG`` and ``binaries`` first on ``PATH``
    * ``service_account_kubeconfig(namespace, name)``: a kubeconfig with a TokenRequest token
    * ``request(path)``: ``(status, body)`` of a GET as admin, e.g. ``/readyz``
    * ``pids``, ``running``, ``workdir`` (logs: ``etcd.log``, ``kube-apiserver.log``)
    """

    def __init__(
        self,
        *,
        crds: str | os.PathLike[str] | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        bin_dir: str | os.PathLike[str] | None = None,
        start_timeout: float = 60.0,
        keep_workdir: bool = False,
        die_with_parent: bool = True,
        extra_apiserver_args: Sequence[str] = (),
    ) -> None:
        self.binaries: Path = find_binaries(bin_dir)
        self.crds: Path | None = Path(crds) if crds is not None else None
        self.start_timeout = start_timeout
        self.keep_workdir = keep_workdir
        self.die_with_parent = die_with_parent
        self.extra_apiserver_args = tuple(extra_apiserver_args)
        self._kubeconfig_arg = Path(kubeconfig) if kubeconfig is not None else None

        self.workdir: Path | None = None
        self.kubeconfig: Path = Path()
        self.server: str = ""
        self.etcd_url: str = ""
        self.ca_cert: Path = Path()
        self._pki: _Pki | None = None
        self._children: list[_Child] = []
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """True while etcd and kube-apiserver are both up (false before start, after stop)."""
        return (
            self._started
            and len(self._children) == 2
            and all(child.popen.poll() is None for child in self._children)
        )

    @property
    def pids(self) -> dict[str, int]:
        """Process ids of the children (``etcd``, ``kube-apiserver``); each leads its group."""
        return {child.name: child.popen.pid for child in self._children}

    def start(self) -> ControlPlane:
        if self._started:
            raise ControlPlaneError("control plane already started")
        self._started = True
        atexit.register(self.stop)
        try:
            _sweep_stale_workdirs()
            self.workdir = Path(tempfile.mkdtemp(prefix=_WORKDIR_PREFIX))
            (self.workdir / _OWNER_FILE).write_text(f"{os.getpid()}\n")
            self._pki = _generate_pki(self.workdir / "pki")
            self.ca_cert = self._pki.ca_cert
            attempts = 3
            for attempt in range(1, attempts + 1):
                try:
                    self._start_processes()
                    break
                except _PortTakenError:
                    self._stop_children()
                    if attempt == attempts:
                        raise
            self._write_kubeconfig()
            if self.crds is not None:
                self.apply_crds(self.crds)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop kube-apiserver and etcd (whole process groups); remove the working directory.

        Idempotent; safe to call from ``finally``, signal handlers and ``atexit``.
        """
        atexit.unregister(self.stop)
        self._stop_children()
        if self.workdir is not None and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ helpers for users

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Environment for subprocesses talking to this cluster (kopf, kubectl, ordo)."""
        env = dict(os.environ if base is None else base)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = os.pathsep.join([str(self.binaries), env.get("PATH", os.defpath)])
        return env

    def kubectl(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        timeout: float = 120.0,
        kubeconfig: str | os.PathLike[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the pinned kubectl against this cluster; raise :class:`KubectlError` on failure
        when ``check`` (the default). Output is text in ``.stdout`` / ``.stderr``.

        ``kubeconfig`` overrides the admin one, e.g. with :meth:`service_account_kubeconfig`.
        """
        self._require_started()
        assert self.workdir is not None
        cmd = [
            str(self.binaries / "kubectl"),
            f"--kubeconfig={kubeconfig or self.kubeconfig}",
            f"--cache-dir={self.workdir / 'kubectl-cache'}",
            *args,
        ]
        result = subprocess.run(
            cmd,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
            check=False,
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, cmd, result.stdout, result.stderr)
        return result

    def create_namespace(
        self,
        name: str | None = None,
        *,
        prefix: str = "test",
        labels: Mapping[str, str] | None = None,
    ) -> str:
        """Create a namespace (default: ``<prefix>-<random>``) and return its name.

        Namespaces never finish deleting without kube-controller-manager, so use fresh names.
        """
        name = name or f"{prefix}-{secrets.token_hex(4)}"
        manifest = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": dict(labels or {})},
        }
        self.kubectl("create", "-f", "-", input=yaml.safe_dump(manifest))
        return name

    def service_account_kubeconfig(
        self,
        namespace: str,
        name: str,
        *,
        create: bool = True,
        duration: str = "1h",
        path: str | os.PathLike[str] | None = None,
    ) -> Path:
        """A kubeconfig that authenticates as ServiceAccount ``namespace/name`` with a bound
        token from the TokenRequest API (``kubectl create token``); RBAC applies to it.

        Creates the ServiceAccount first unless ``create`` is false or it already exists.
        """
        self._require_started()
        assert self.workdir is not None
        if create:
            exists = self.kubectl("get", "serviceaccount", name, "-n", namespace, check=False)
            if exists.returncode != 0:
                self.kubectl("create", "serviceaccount", name, "-n", namespace)
        token = self.kubectl(
            "create", "token", name, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()
        target = (
            Path(path)
            if path is not None
            else self.workdir / "kubeconfigs" / f"sa-{namespace}-{name}.yaml"
        )
        self._write_kubeconfig_file(
            target, user=f"system:serviceaccount:{namespace}:{name}", credentials={"token": token}
        )
        return target.resolve()

    def apply_crds(self, directory: str | os.PathLike[str]) -> list[str]:
        """``kubectl apply --server-side -f DIR`` and wait until every CRD is Established.

        Returns the applied object names (``customresourcedefinition.apiextensions.k8s.io/x``);
        an empty or missing directory (no ``*.yaml``/``*.yml``/``*.json``) is a no-op.
        """
        path = Path(directory)
        manifests = (
            [p for p in path.iterdir() if p.is_file() and p.suffix in {".yaml", ".yml", ".json"}]
            if path.is_dir()
            else []
        )
        if not manifests:
            return []
        applied = self.kubectl(
            "apply", "--server-side", "--force-conflicts", "-o", "name", "-f", str(path)
        )
        names = applied.stdout.split()
        crds = [n for n in names if n.startswith("customresourcedefinition")]
        if crds:
            self.kubectl(
                "wait",
                "--for=condition=Established",
                f"--timeout={int(self.start_timeout)}s",
                *crds,
            )
        return names

    def request(self, path: str, *, timeout: float = 10.0) -> tuple[int, bytes]:
        """GET ``path`` from the apiserver as admin; returns (status, body)."""
        self._require_started()
        host, port = self._apiserver_address()
        return self._get(host, port, path, timeout=timeout)

    # ------------------------------------------------------------------ internals

    def _require_started(self) -> None:
        if not self._started or not self.server:
            raise ControlPlaneError("control plane is not running; call start() first")

    def _apiserver_address(self) -> tuple[str, int]:
        host, _, port = self.server.removeprefix("https://").rpartition(":")
        return host, int(port)

    def _ssl_context(self) -> ssl.SSLContext:
        assert self._pki is not None
        context = ssl.create_default_context(cafile=str(self._pki.ca_cert))
        context.load_cert_chain(str(self._pki.admin_cert), str(self._pki.admin_key))
        return context

    def _get(self, host: str, port: int, path: str, *, timeout: float) -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection(host, port, context=self._ssl_context(), timeout=timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def _spawn(self, name: str, args: list[str]) -> _Child:
        assert self.workdir is not None
        log_path = self.workdir / f"{name}.log"
        log_file = log_path.open("ab")
        try:
            popen = subprocess.Popen(
                [str(self.binaries / name), *args],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,
                preexec_fn=_die_with_parent_hook() if self.die_with_parent else None,
            )
        except BaseException:
            log_file.close()
            raise
        child = _Child(name=name, popen=popen, log_path=log_path, log_file=log_file)
        self._children.append(child)
        return child

    def _start_processes(self) -> None:
        assert self.workdir is not None and self._pki is not None
        pki = self._pki
        etcd_client, etcd_peer, apiserver_port = _free_ports(3)
        self.etcd_url = f"http://127.0.0.1:{etcd_client}"
        peer_url = f"http://127.0.0.1:{etcd_peer}"
        data_dir = self.workdir / "etcd"
        shutil.rmtree(data_dir, ignore_errors=True)
        deadline = time.monotonic() + self.start_timeout

        etcd = self._spawn(
            "etcd",
            [
                "--name=ordo-devcluster",
                f"--data-dir={data_dir}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=ordo-devcluster={peer_url}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait(etcd, deadline, lambda: self._etcd_healthy(etcd_client), "etcd /health")

        self.server = f"https://127.0.0.1:{apiserver_port}"
        cert_dir = self.workdir / "apiserver-certs"
        cert_dir.mkdir(exist_ok=True)
        apiserver = self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                f"--secure-port={apiserver_port}",
                f"--cert-dir={cert_dir}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                "--authorization-mode=RBAC",
                f"--service-account-issuer={self.server}",
                f"--service-account-key-file={pki.sa_public_key}",
                f"--service-account-signing-key-file={pki.sa_private_key}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--disable-admission-plugins=ServiceAccount",
                "--allow-privileged=true",
                "--profiling=false",
                *self.extra_apiserver_args,
            ],
        )
        self._wait(
            apiserver,
            deadline,
            lambda: self._get("127.0.0.1", apiserver_port, "/readyz", timeout=2)[0] == 200,
            "kube-apiserver /readyz",
        )
        self._wait(
            apiserver,
            deadline,
            lambda: (
                self._get("127.0.0.1", apiserver_port, "/api/v1/namespaces/default", timeout=2)[0]
                == 200
            ),
            "the default namespace",
        )

    def _etcd_healthy(self, port: int) -> bool:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("GET", "/health")
            return conn.getresponse().status == 200
        finally:
            conn.close()

    def _wait(self, child: _Child, deadline: float, ready: Callable[[], bool], what: str) -> None:
        last_error: BaseException | None = None
        while True:
            code = child.popen.poll()
            if code is not None:
                log = _tail(child.log_path)
                if "address already in use" in log:
                    raise _PortTakenError(log)
                raise ControlPlaneError(
                    f"{child.name} exited with code {code} while waiting for {what}; "
                    f"last lines of {child.log_path}:\n{log}"
                )
            try:
                if ready():
                    return
                last_error = None
            except (OSError, http.client.HTTPException) as exc:
                last_error = exc
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"timed out after {self.start_timeout:.0f}s waiting for {what}"
                    + (f" (last error: {last_error})" if last_error else "")
                    + f"; last lines of {child.log_path}:\n{_tail(child.log_path)}"
                )
            time.sleep(0.1)

    def _stop_children(self, grace: float = 10.0) -> None:
        # kube-apiserver first, then etcd.
        while self._children:
            child = self._children.pop()
            try:
                _terminate_group(child.popen, grace)
            finally:
                child.log_file.close()

    def _write_kubeconfig(self) -> None:
        assert self.workdir is not None and self._pki is not None
        path = self._kubeconfig_arg or (self.workdir / "kubeconfig")
        self._write_kubeconfig_file(
            path,
            user="admin",
            credentials={
                "client-certificate-data": _b64(self._pki.admin_cert),
                "client-key-data": _b64(self._pki.admin_key),
            },
        )
        self.kubeconfig = path.resolve()

    def _write_kubeconfig_file(self, path: Path, *, user: str, credentials: dict[str, str]) -> None:
        assert self._pki is not None
        config: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "ordo-devcluster",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": _b64(self._pki.ca_cert),
                    },
                }
            ],
            "users": [{"name": user, "user": credentials}],
            "contexts": [
                {
                    "name": "ordo-devcluster",
                    "context": {"cluster": "ordo-devcluster", "user": user},
                }
            ],
            "current-context": "ordo-devcluster",
            "preferences": {},
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        with _private_file(path) as handle:
            yaml.safe_dump(config, handle, sort_keys=False)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


class _PortTakenError(ControlPlaneError):
    """A port picked as free was taken before the child bound it; retried."""


@contextlib.contextmanager
def _private_file(path: Path) -> Iterator[IO[str]]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yield handle


def _terminate_group(popen: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM the child's process group, SIGKILL it after ``grace`` seconds, reap the child."""
    pgid = popen.pid  # start_new_session=True: the child leads its own group
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        try:
            popen.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    # Anything else left in the group (nothing, normally) goes too.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
