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
import http.client
import os
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import yaml

from ordo_devcluster.binaries import find_binaries
from ordo_devcluster.errors import ControlPlaneError, KubectlError, PortTakenError
from ordo_devcluster.kubeconfig import admin_credentials, write_kubeconfig
from ordo_devcluster.pki import SERVICE_CLUSTER_IP_RANGE, Pki, generate_pki
from ordo_devcluster.processes import (
    OWNER_FILE,
    WORKDIR_PREFIX,
    Child,
    free_ports,
    spawn,
    stop_child,
    sweep_stale_workdirs,
    wait_ready,
)

__all__ = ["ControlPlane"]


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
        self._pki: Pki | None = None
        self._children: list[Child] = []
        self._started = False
        #: Address kube-apiserver binds to and ``server`` names (the node mode uses the node IP).
        self.bind_address = "127.0.0.1"
        #: How many children ``running`` expects (subclasses start more).
        self._expected_children = 2

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
            and len(self._children) == self._expected_children
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
            sweep_stale_workdirs()
            self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
            (self.workdir / OWNER_FILE).write_text(f"{os.getpid()}\n")
            self._prepare_workdir()
            self._pki = self._generate_pki()
            self.ca_cert = self._pki.ca_cert
            attempts = 3
            for attempt in range(1, attempts + 1):
                try:
                    self._start_processes()
                    break
                except PortTakenError:
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

    def _prepare_workdir(self) -> None:
        """Hook run once the working directory exists, before the PKI (node mode: networks)."""

    def _generate_pki(self) -> Pki:
        assert self.workdir is not None
        return generate_pki(self.workdir / "pki")

    def _apiserver_args(self, port: int, cert_dir: Path) -> list[str]:
        """kube-apiserver's flags; the node mode adjusts authorization and admission."""
        assert self._pki is not None
        pki = self._pki
        return [
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={self.bind_address}",
            f"--secure-port={port}",
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
        ]

    def _spawn(self, name: str, args: list[str]) -> Child:
        assert self.workdir is not None
        child = spawn(
            self.binaries / name,
            args,
            name=name,
            workdir=self.workdir,
            die_with_parent=self.die_with_parent,
        )
        self._children.append(child)
        return child

    def _start_processes(self) -> None:
        assert self.workdir is not None and self._pki is not None
        etcd_client, etcd_peer, apiserver_port = free_ports(3)
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

        self.server = f"https://{self.bind_address}:{apiserver_port}"
        cert_dir = self.workdir / "apiserver-certs"
        cert_dir.mkdir(exist_ok=True)
        apiserver = self._spawn("kube-apiserver", self._apiserver_args(apiserver_port, cert_dir))
        self._wait(
            apiserver,
            deadline,
            lambda: self._get(self.bind_address, apiserver_port, "/readyz", timeout=2)[0] == 200,
            "kube-apiserver /readyz",
        )
        self._wait(
            apiserver,
            deadline,
            lambda: (
                self._get(
                    self.bind_address, apiserver_port, "/api/v1/namespaces/default", timeout=2
                )[0]
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

    def _wait(self, child: Child, deadline: float, ready: Callable[[], bool], what: str) -> None:
        wait_ready(child, deadline, ready, what, timeout=self.start_timeout)

    def _stop_children(self, grace: float = 10.0) -> None:
        # kube-apiserver first, then etcd.
        while self._children:
            stop_child(self._children.pop(), grace)

    def _write_kubeconfig(self) -> None:
        assert self.workdir is not None and self._pki is not None
        path = self._kubeconfig_arg or (self.workdir / "kubeconfig")
        self._write_kubeconfig_file(path, user="admin", credentials=admin_credentials(self._pki))
        self.kubeconfig = path.resolve()

    def _write_kubeconfig_file(self, path: Path, *, user: str, credentials: dict[str, str]) -> None:
        assert self._pki is not None
        write_kubeconfig(
            path, server=self.server, ca_cert=self._pki.ca_cert, user=user, credentials=credentials
        )
