"""A real single-node Kubernetes cluster for tests: the control plane of :class:`ControlPlane`
plus containerd, kube-controller-manager, kube-scheduler and a kubelet.

Pods really run (runc, cgroup v1 through the cgroupfs driver), the garbage collector and the
namespace controller work, Jobs complete. Needs root, the binaries of
``scripts/build-controlplane`` and what ``scripts/node-deps`` installs and builds (containerd,
runc, the CNI plugins, the pause image). Only one node per process; several on one machine
keep apart (own cgroup root, bridge, addresses, sockets), but each costs about 1 GB of memory.

Networking: the node IP lives on a veth pair of its own (the kubelet refuses loopback);
kube-apiserver binds to that address, so pods reach it at :meth:`NodeCluster.apiserver_env`
without kube-proxy. Pods get addresses from a private /24 on the node's own bridge, whose
address is their default gateway; no IP forwarding, NAT or iptables rules are set up, so pod
traffic stays on this machine. Images come from OCI archives (:meth:`import_image`); there is
no registry, so pods use ``imagePullPolicy: Never`` or ``IfNotPresent``.

``stop()`` leaves nothing behind: see :func:`ordo_devcluster.nodestate.cleanup`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ordo_devcluster.binaries import default_bin_dir
from ordo_devcluster.controlplane import ControlPlane
from ordo_devcluster.errors import ControlPlaneError, NodeDependenciesError
from ordo_devcluster.kubeconfig import write_kubeconfig
from ordo_devcluster.nodeconfig import (
    CNI_BIN_DIR,
    NODE_NAME,
    RUNC,
    cni_conflist,
    containerd_config,
    kubelet_config,
)
from ordo_devcluster.nodestate import (
    NodeResources,
    allocate,
    cleanup,
    create_cgroup_root,
    create_interfaces,
    leftovers,
    sweep_stale_nodes,
)
from ordo_devcluster.ociimage import BUSYBOX_IMAGE, PAUSE_IMAGE
from ordo_devcluster.pki import SERVICE_CLUSTER_IP_RANGE, Pki, generate_pki, issue_client_cert
from ordo_devcluster.processes import Child, free_ports, spawn, stop_child

__all__ = ["NODE_BINARIES", "NodeCluster", "default_node_cache"]

NODE_BINARIES = ("kubelet", "kube-controller-manager", "kube-scheduler")
_HOST_TOOLS = {"containerd": "containerd", "ctr": "containerd", "ip": "iproute2"}


def default_node_cache() -> Path | None:
    """``.cache/node`` of this checkout, where ``scripts/node-deps`` writes the images."""
    bin_dir = default_bin_dir()
    return None if bin_dir is None else bin_dir.parents[2] / "node"


class NodeCluster(ControlPlane):
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd and a kubelet.

    Everything :class:`ControlPlane` offers, plus ``import_image(archive)``, ``node_name``,
    ``node_ip``, ``busybox_image`` (the test shell image, imported at start),
    ``apiserver_env()`` and ``leftovers()``. ``create_namespace`` waits for the namespace's
    ``default`` ServiceAccount, so pods can be created right away.
    """

    def __init__(
        self,
        *,
        crds: str | os.PathLike[str] | None = None,
        kubeconfig: str | os.PathLike[str] | None = None,
        bin_dir: str | os.PathLike[str] | None = None,
        image_cache: str | os.PathLike[str] | None = None,
        images: Sequence[str | os.PathLike[str]] = (),
        start_timeout: float = 120.0,
        keep_workdir: bool = False,
        die_with_parent: bool = True,
    ) -> None:
        super().__init__(
            crds=crds,
            kubeconfig=kubeconfig,
            bin_dir=bin_dir,
            start_timeout=start_timeout,
            keep_workdir=keep_workdir,
            die_with_parent=die_with_parent,
        )
        cache = Path(image_cache) if image_cache is not None else default_node_cache()
        self.pause_archive = cache / "pause.oci.tar" if cache else Path("pause.oci.tar")
        self.busybox_archive = cache / "busybox.oci.tar" if cache else Path("busybox.oci.tar")
        self.images = [Path(image) for image in images]
        self._check_dependencies()
        self._expected_children = 6
        self.node_name = NODE_NAME
        self.busybox_image = BUSYBOX_IMAGE
        self.resources: NodeResources | None = None

    @property
    def node_ip(self) -> str:
        return self.resources.node_ip if self.resources else ""

    def _check_dependencies(self) -> None:
        problems = [
            f"{name} (scripts/build-controlplane)"
            for name in NODE_BINARIES
            if not os.access(self.binaries / name, os.X_OK)
        ]
        problems += [
            f"{tool} ({pkg})" for tool, pkg in _HOST_TOOLS.items() if not shutil.which(tool)
        ]
        if not os.access(RUNC, os.X_OK):
            problems.append(f"{RUNC} (runc)")
        if not os.access(Path(CNI_BIN_DIR) / "bridge", os.X_OK):
            problems.append(f"{CNI_BIN_DIR}/bridge (containernetworking-plugins)")
        for archive in (self.pause_archive, self.busybox_archive):
            if not archive.is_file():
                problems.append(f"{archive} (scripts/node-deps)")
        if os.geteuid() != 0:
            problems.append("root (the kubelet, containerd and the network set-up need it)")
        if problems:
            raise NodeDependenciesError(
                "the single-node cluster is missing: " + ", ".join(problems) + ". Run "
                "scripts/build-controlplane and scripts/node-deps (as root)."
            )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> NodeCluster:
        sweep_stale_nodes()
        super().start()
        return self

    def stop(self) -> None:
        """Stop the node components, every container and containerd; remove mounts, cgroups,
        interfaces and host files (see :mod:`ordo_devcluster.nodestate`); then the control
        plane. Idempotent."""
        try:
            self._stop_node_children()
            if self.resources is not None:
                cleanup(self.resources)
        finally:
            super().stop()

    def leftovers(self) -> list[str]:
        """What this node created that still exists: empty after ``stop()``."""
        return leftovers(self.resources) if self.resources else []

    def _stop_node_children(self) -> None:
        for name in ("kubelet", "kube-scheduler", "kube-controller-manager"):
            self._stop_named(name)
        if any(child.name == "containerd" for child in self._children):
            self._delete_tasks()
        self._stop_named("containerd")

    def _stop_named(self, name: str, grace: float = 10.0) -> None:
        for child in [c for c in self._children if c.name == name]:
            self._children.remove(child)
            stop_child(child, grace)

    def _delete_tasks(self) -> None:
        """Kill and delete every task, so that each shim exits cleanly and removes its socket."""
        listed = self._ctr("tasks", "ls", "-q", check=False, timeout=10)
        for task in listed.stdout.split():
            self._ctr("tasks", "kill", "-s", "SIGKILL", "--all", task, check=False, timeout=10)
        for task in listed.stdout.split():
            for _ in range(50):
                if self._ctr("tasks", "delete", task, check=False, timeout=10).returncode == 0:
                    break
                time.sleep(0.1)

    # ------------------------------------------------------------------ helpers for users

    def import_image(self, archive: str | os.PathLike[str]) -> list[str]:
        """``ctr images import`` an OCI (or docker) archive into containerd's ``k8s.io``
        namespace, where the kubelet sees it; returns the image names imported."""
        self._require_started()
        result = self._ctr("images", "import", str(archive), timeout=300)
        names = [
            line.split()[1] for line in result.stdout.splitlines() if line.startswith("unpacking")
        ]
        return names

    def create_namespace(
        self,
        name: str | None = None,
        *,
        prefix: str = "test",
        labels: Mapping[str, str] | None = None,
    ) -> str:
        """A new namespace, returned once its ``default`` ServiceAccount exists (created by
        kube-controller-manager; pods cannot be created before)."""
        namespace = super().create_namespace(name, prefix=prefix, labels=labels)
        self.kubectl(
            "wait",
            "--for=create",
            "serviceaccount/default",
            "-n",
            namespace,
            f"--timeout={int(self.start_timeout)}s",
        )
        return namespace

    def apiserver_env(self) -> dict[str, str]:
        """``KUBERNETES_SERVICE_HOST``/``_PORT`` for a pod's ``env`` so that in-cluster clients
        reach kube-apiserver at the node IP (there is no kube-proxy for the Service IP)."""
        self._require_started()
        host, port = self._apiserver_address()
        return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": str(port)}

    # ------------------------------------------------------------------ start internals

    def _prepare_workdir(self) -> None:
        assert self.workdir is not None
        self.resources = allocate(self.workdir)
        self.resources.save()  # first, so a crash from here on is swept by the next start
        self.bind_address = self.resources.node_ip
        create_interfaces(self.resources)
        create_cgroup_root(self.resources)

    def _generate_pki(self) -> Pki:
        assert self.workdir is not None and self.resources is not None
        return generate_pki(self.workdir / "pki", extra_ips=[self.resources.node_ip])

    def _apiserver_args(self, port: int, cert_dir: Path) -> list[str]:
        assert self._pki is not None
        kubelet_cert, kubelet_key = issue_client_cert(
            self._pki,
            "apiserver-kubelet-client",
            common_name="kube-apiserver-kubelet-client",
            organizations=["system:masters"],
        )
        replaced = ("--authorization-mode=", "--disable-admission-plugins=")
        return [
            arg for arg in super()._apiserver_args(port, cert_dir) if not arg.startswith(replaced)
        ] + [
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--kubelet-client-certificate={kubelet_cert}",
            f"--kubelet-client-key={kubelet_key}",
            "--kubelet-preferred-address-types=InternalIP",
        ]

    def _start_processes(self) -> None:
        super()._start_processes()
        assert self.workdir is not None and self._pki is not None and self.resources is not None
        deadline = time.monotonic() + self.start_timeout
        workdir, res = self.workdir, self.resources
        (workdir / "containerd").mkdir(exist_ok=True)
        config = workdir / "containerd" / "config.toml"
        config.write_text(containerd_config(res, sandbox_image=PAUSE_IMAGE))
        net_d = workdir / "cni" / "net.d"
        net_d.mkdir(parents=True, exist_ok=True)
        (net_d / "10-ordo.conflist").write_text(cni_conflist(res))
        containerd = self._spawn_host("containerd", ["--config", str(config)])
        self._wait(
            containerd,
            deadline,
            lambda: self._ctr("version", check=False, timeout=5).returncode == 0,
            "containerd",
        )
        for archive in (self.pause_archive, self.busybox_archive, *self.images):
            self._ctr("images", "import", str(archive), timeout=300)

        kcm = self._component_kubeconfig(
            "kube-controller-manager", "system:kube-controller-manager"
        )
        sched = self._component_kubeconfig("kube-scheduler", "system:kube-scheduler")
        kubelet = self._component_kubeconfig("kubelet", f"system:node:{NODE_NAME}", "system:nodes")
        common = ["--bind-address=127.0.0.1", "--secure-port=0", "--leader-elect=false"]
        self._spawn(
            "kube-controller-manager",
            [
                *self._kubeconfig_flags(kcm),
                *common,
                f"--service-account-private-key-file={self._pki.sa_private_key}",
                f"--root-ca-file={self._pki.ca_cert}",
                "--use-service-account-credentials=true",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            ],
        )
        self._spawn("kube-scheduler", [*self._kubeconfig_flags(sched), *common])
        kubelet_port, healthz_port = free_ports(2)
        kubelet_yaml = workdir / "kubelet.yaml"
        kubelet_yaml.write_text(
            kubelet_config(
                res,
                ca_cert=self._pki.ca_cert,
                port=kubelet_port,
                healthz_port=healthz_port,
                pod_logs=workdir / "pod-logs",
            )
        )
        node = self._spawn(
            "kubelet",
            [
                f"--config={kubelet_yaml}",
                f"--kubeconfig={kubelet}",
                f"--root-dir={workdir / 'kubelet'}",
                f"--cert-dir={workdir / 'kubelet-pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={res.node_ip}",
            ],
        )
        self._wait(node, deadline, self._node_schedulable, f"node {NODE_NAME} Ready")

    def _spawn_host(self, name: str, args: list[str]) -> Child:
        """Start a Debian binary (containerd) the way :meth:`_spawn` starts ours."""
        assert self.workdir is not None
        path = shutil.which(name)
        if path is None:
            raise NodeDependenciesError(f"{name} not found: run scripts/node-deps")
        child = spawn(
            Path(path), args, name=name, workdir=self.workdir, die_with_parent=self.die_with_parent
        )
        self._children.append(child)
        return child

    def _component_kubeconfig(self, name: str, user: str, *groups: str) -> Path:
        assert self.workdir is not None and self._pki is not None
        cert, key = issue_client_cert(self._pki, name, common_name=user, organizations=groups)
        path = self.workdir / "kubeconfigs" / f"{name}.yaml"
        return write_kubeconfig(
            path,
            server=self.server,
            ca_cert=self._pki.ca_cert,
            user=user,
            credentials={"client-certificate": str(cert), "client-key": str(key)},
        )

    @staticmethod
    def _kubeconfig_flags(path: Path) -> list[str]:
        return [f"--{kind}kubeconfig={path}" for kind in ("", "authentication-", "authorization-")]

    def _node_schedulable(self) -> bool:
        status, body = self.request(f"/api/v1/nodes/{NODE_NAME}", timeout=5)
        if status != 200:
            return False
        node = json.loads(body)
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in node.get("status", {}).get("conditions", [])
        )
        blocking = [
            t
            for t in node.get("spec", {}).get("taints", [])
            if t.get("effect") != "PreferNoSchedule"
        ]
        return ready and not blocking

    def _ctr(
        self, *args: str, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        assert self.resources is not None
        cmd = ["ctr", "--address", self.resources.containerd_socket, "--namespace", "k8s.io", *args]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise ControlPlaneError(f"`{' '.join(cmd)}` failed: {result.stderr.strip()}")
        return result
