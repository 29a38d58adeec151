"""What a single-node cluster creates outside its processes, and how to remove all of it.

A :class:`NodeResources` record (``node.json`` in the working directory, written *before*
anything is created) names every host-level object the node owns: the veth pair carrying the
node IP, the CNI bridge, the cgroup root of the kubelet's ``kubepods`` tree, the containerd
socket and the CNI network name. :func:`cleanup` removes them in order — container processes,
containerd shims, mounts under the working directory, cgroups, interfaces, libcni cache entries,
``/var/log/containers`` links — and is used both by ``NodeCluster.stop()`` and by
:func:`sweep_stale_nodes` for nodes whose owning process died (e.g. a SIGKILLed pytest).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import ipaddress
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from ordo_devcluster.errors import ControlPlaneError
from ordo_devcluster.processes import OWNER_FILE, WORKDIR_PREFIX, pid_alive

__all__ = [
    "NODE_STATE_FILE",
    "NodeResources",
    "allocate",
    "cleanup",
    "create_interfaces",
    "leftovers",
    "sweep_stale_nodes",
]

NODE_STATE_FILE = "node.json"
CGROUP_FS = Path("/sys/fs/cgroup")
CNI_CACHE = Path("/var/lib/cni")
CONTAINER_LOG_LINKS = Path("/var/log/containers")
RUN_CONTAINERD = Path("/run/containerd")
# Picked at random from 10.128.0.0/9, a /23 each: pods in the first /24, the node IP in the second.
_POOL = ipaddress.IPv4Network("10.128.0.0/9")


@dataclasses.dataclass(frozen=True)
class NodeResources:
    id: str
    workdir: str
    node_ip: str
    pod_subnet: str
    pod_gateway: str
    bridge: str
    veth: str
    veth_peer: str
    network: str
    cgroup_root: str
    containerd_socket: str

    def save(self) -> None:
        path = Path(self.workdir) / NODE_STATE_FILE
        path.write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, workdir: Path) -> NodeResources:
        return cls(**json.loads((workdir / NODE_STATE_FILE).read_text()))


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise ControlPlaneError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")
    return result


def _used_networks() -> list[ipaddress.IPv4Network]:
    used: list[ipaddress.IPv4Network] = []
    for line in _ip("-4", "-o", "addr", "show").stdout.splitlines():
        fields = line.split()
        if "inet" in fields:
            used.append(ipaddress.IPv4Interface(fields[fields.index("inet") + 1]).network)
    for line in _ip("-4", "route", "show", "table", "all").stdout.splitlines():
        dst = line.split()[0] if line.split() else ""
        if dst in ("default", "broadcast", "local", "unreachable", "multicast"):
            dst = line.split()[1] if len(line.split()) > 1 else ""
        with contextlib.suppress(ValueError):
            network = ipaddress.IPv4Network(dst, strict=False)
            if network.prefixlen > 0:
                used.append(network)
    return used


def allocate(workdir: Path) -> NodeResources:
    """Names and addresses for a new node: random, and clear of this machine's own networks."""
    used = _used_networks()
    rng = random.SystemRandom()
    for _ in range(100):
        block = ipaddress.IPv4Network(
            (int(_POOL.network_address) + rng.randrange(_POOL.num_addresses // 512) * 512, 23)
        )
        if not any(block.overlaps(net) for net in used):
            break
    else:  # pragma: no cover - 65,536 blocks
        raise ControlPlaneError("no free /23 in 10.128.0.0/9 for the node's networks")
    pods, node = block.subnets(new_prefix=24)
    suffix = secrets.token_hex(3)
    return NodeResources(
        id=suffix,
        workdir=str(workdir),
        node_ip=str(node.network_address + 1),
        pod_subnet=str(pods),
        pod_gateway=str(pods.network_address + 1),
        bridge=f"ordob{suffix}",
        veth=f"ordon{suffix}",
        veth_peer=f"ordop{suffix}",
        network=f"ordo-{suffix}",
        cgroup_root=f"/ordo-node-{suffix}",
        containerd_socket=str(workdir / "containerd" / "containerd.sock"),
    )


def create_interfaces(res: NodeResources) -> None:
    """The veth pair holding the node IP (never loopback: the kubelet refuses it) and the CNI
    bridge, holding the pods' gateway address."""
    _ip("link", "add", res.veth, "type", "veth", "peer", "name", res.veth_peer)
    _ip("addr", "add", f"{res.node_ip}/32", "dev", res.veth)
    _ip("link", "set", res.veth, "up")
    _ip("link", "set", res.veth_peer, "up")
    _ip("link", "add", res.bridge, "type", "bridge")
    prefix = ipaddress.IPv4Network(res.pod_subnet).prefixlen
    _ip("addr", "add", f"{res.pod_gateway}/{prefix}", "dev", res.bridge)
    _ip("link", "set", res.bridge, "up")


def create_cgroup_root(res: NodeResources) -> None:
    """The kubelet's ``cgroupRoot`` in every v1 hierarchy (it must exist before the kubelet
    starts); cpuset needs its cpus/mems filled in before a child can hold processes."""
    for directory in _cgroup_dirs(res):
        directory.mkdir(exist_ok=True)
        if directory.parent.name == "cpuset":
            for name in ("cpuset.cpus", "cpuset.mems"):
                (directory / name).write_text((directory.parent / name).read_text())


def _cgroup_dirs(res: NodeResources) -> list[Path]:
    if not CGROUP_FS.is_dir():
        return []
    return [
        hierarchy / res.cgroup_root.lstrip("/")
        for hierarchy in sorted(CGROUP_FS.iterdir())
        if hierarchy.is_dir() and not hierarchy.is_symlink()
    ]


def _cgroup_pids(res: NodeResources) -> set[int]:
    pids: set[int] = set()
    for directory in _cgroup_dirs(res):
        if directory.is_dir():
            for procs in directory.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(p) for p in procs.read_text().split())
    return pids


def _owned_pids(res: NodeResources) -> set[int]:
    """Processes of this node outside its children's process groups: containers (by cgroup)
    and containerd shims (by the socket or working directory on their command line)."""
    pids = _cgroup_pids(res)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes()
            if res.containerd_socket.encode() in cmdline or res.workdir.encode() in cmdline:
                pids.add(int(proc.name))
    pids.discard(os.getpid())
    return pids


def _kill_owned(res: NodeResources, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while pids := _owned_pids(res):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"processes of node {res.id} survive SIGKILL: {sorted(pids)}")
        time.sleep(0.05)


def _mounts_under(root: str) -> list[str]:
    prefix = root.rstrip("/") + "/"
    found: list[str] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            target = line.split()[4].replace("\\040", " ")
            if target == root or target.startswith(prefix):
                found.append(target)
    return found


def _unmount_all(root: str) -> None:
    for _ in range(5):
        targets = _mounts_under(root)
        if not targets:
            return
        for target in sorted(targets, key=len, reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True, check=False)


def _remove_cgroups(res: NodeResources) -> None:
    for top in _cgroup_dirs(res):
        if not top.is_dir():
            continue
        for directory in sorted(
            (p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def _shim_sockets(res: NodeResources) -> list[Path]:
    tasks = Path(res.workdir) / "containerd" / "state" / "io.containerd.runtime.v2.task"
    found: list[Path] = []
    with contextlib.suppress(OSError):
        for bundle in tasks.glob("*/*"):
            key = os.path.join(res.containerd_socket, bundle.parent.name, bundle.name)
            found.append(RUN_CONTAINERD / "s" / hashlib.sha256(key.encode()).hexdigest())
    return [path for path in found if path.exists()]


def _remove_host_files(res: NodeResources) -> None:
    # libcni caches results per network and container (names start with the network name).
    for cache in (CNI_CACHE / "results", CNI_CACHE / "cache" / "results"):
        for entry in cache.glob(f"{res.network}-*"):
            entry.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        for link in CONTAINER_LOG_LINKS.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(res.workdir):
                link.unlink(missing_ok=True)
    # containerd 1.6 keeps shim sockets in /run/containerd/s, named by the sha256 of
    # "<containerd address>/<namespace>/<shim id>"; a shim removes its own on a clean exit, a
    # killed one does not. The shim ids are the task bundles under our state directory.
    sockets = RUN_CONTAINERD / "s"
    for socket in _shim_sockets(res):
        socket.unlink(missing_ok=True)
    for directory in (
        sockets,
        RUN_CONTAINERD,
        CNI_CACHE / "results",
        CNI_CACHE,
        CONTAINER_LOG_LINKS,
    ):
        with contextlib.suppress(OSError):
            directory.rmdir()  # only when empty: another node may be using it


KUBELET_CHAINS = ("KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT")


def _kubelet_running() -> bool:
    return (
        subprocess.run(["pgrep", "-x", "kubelet"], capture_output=True, check=False).returncode == 0
    )


def _remove_kubelet_chains() -> None:
    """The kubelet installs iptables chains (KUBE-FIREWALL drops non-loopback traffic to
    127/8) that outlive it. They are shared by every kubelet on the machine, so they go only
    when no kubelet runs any more."""
    if _kubelet_running():
        return
    for tool in ("iptables", "ip6tables"):
        if shutil.which(tool) is None:
            continue
        for table in ("filter", "nat", "mangle"):

            def run(*args: str, tool: str = tool, table: str = table) -> int:
                return subprocess.run(
                    [tool, "-w", "-t", table, *args], capture_output=True, check=False
                ).returncode

            for hook in ("INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"):
                for chain in KUBELET_CHAINS:
                    while run("-D", hook, "-j", chain) == 0:
                        pass
            for chain in KUBELET_CHAINS:
                run("-F", chain)
                run("-X", chain)


def cleanup(res: NodeResources) -> None:
    """Remove everything ``res`` names; idempotent, safe for a half-started node."""
    _kill_owned(res)
    _unmount_all(res.workdir)
    _remove_cgroups(res)
    for link in (res.bridge, res.veth):
        if _ip("link", "show", link, check=False).returncode == 0:
            _ip("link", "del", link, check=False)
    _remove_host_files(res)
    _remove_kubelet_chains()


def leftovers(res: NodeResources) -> list[str]:
    """What of ``res`` still exists (empty after a complete cleanup): for tests and ``down``."""
    found = [f"process {pid}" for pid in sorted(_owned_pids(res))]
    found += [f"mount {target}" for target in _mounts_under(res.workdir)]
    found += [f"cgroup {d}" for d in _cgroup_dirs(res) if d.exists()]
    found += [
        f"interface {link}"
        for link in (res.bridge, res.veth, res.veth_peer)
        if _ip("link", "show", link, check=False).returncode == 0
    ]
    found += [f"cni cache {p}" for p in (CNI_CACHE / "results").glob(f"{res.network}-*")]
    found += [f"shim socket {p}" for p in _shim_sockets(res)]
    return found


def sweep_stale_nodes(*, all_nodes: bool = False) -> list[str]:
    """Clean up and delete node working directories whose owner died; ``all_nodes`` also
    tears down nodes whose owner still runs (``python -m ordo_devcluster node down --all``).
    Returns the ids cleaned."""
    cleaned: list[str] = []
    for directory in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        if not (directory / NODE_STATE_FILE).is_file():
            continue
        try:
            owner = int((directory / OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            owner = 0
        if not all_nodes and owner and pid_alive(owner):
            continue
        res = NodeResources.load(directory)
        cleanup(res)
        shutil.rmtree(directory, ignore_errors=True)
        cleaned.append(res.id)
    return cleaned
