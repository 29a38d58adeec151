"""Configuration files of the single-node cluster: containerd, the kubelet and the CNI conflist.

The settings are the ones found to work on a cgroup-v1, no-systemd, no-CAP_SYS_RESOURCE machine
(see ``docs/development.md``): ``restrict_oom_score_adj`` (runc may not lower oom_score_adj),
``failCgroupV1: false``, the cgroupfs driver, runc instead of crun, a locally built pause image.
Everything containerd and the kubelet write goes under the cluster's working directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ordo_devcluster.nodestate import NodeResources

__all__ = [
    "CNI_BIN_DIR",
    "NODE_NAME",
    "RUNC",
    "cni_conflist",
    "containerd_config",
    "kubelet_config",
]

NODE_NAME = "ordo-node"
RUNC = "/usr/sbin/runc"
CNI_BIN_DIR = "/usr/lib/cni"


def _q(value: str) -> str:
    """A TOML basic string (JSON's escaping is valid TOML for these values)."""
    return json.dumps(value)


def containerd_config(res: NodeResources, *, sandbox_image: str) -> str:
    """containerd 1.6 config (version 2): own root/state/socket, CRI with runc + cgroupfs."""
    base = Path(res.workdir) / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = {_q(str(base / "root"))}
state = {_q(str(base / "state"))}
disabled_plugins = [
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.devmapper",
]

[grpc]
  address = {_q(res.containerd_socket)}

[ttrpc]
  address = {_q(res.containerd_socket + ".ttrpc")}

[plugins."io.containerd.internal.v1.opt"]
  path = {_q(str(base / "opt"))}

[{cri}]
  sandbox_image = {_q(sandbox_image)}
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = {_q(RUNC)}
  Root = {_q(str(base / "runc"))}

[{cri}.cni]
  bin_dir = {_q(CNI_BIN_DIR)}
  conf_dir = {_q(str(Path(res.workdir) / "cni" / "net.d"))}
  max_conf_num = 1
"""


def cni_conflist(res: NodeResources) -> str:
    """``bridge`` on our own bridge (created with the gateway address, so the plugin never has
    to turn on IP forwarding) + ``host-local`` with its own data directory."""
    return json.dumps(
        {
            "cniVersion": "0.4.0",
            "name": res.network,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": res.bridge,
                    "isGateway": False,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": res.pod_subnet, "gateway": res.pod_gateway}]],
                        "routes": [{"dst": "0.0.0.0/0", "gw": res.pod_gateway}],
                        "dataDir": str(Path(res.workdir) / "cni" / "ipam"),
                    },
                }
            ],
        },
        indent=2,
    )


def kubelet_config(
    res: NodeResources, *, ca_cert: Path, port: int, healthz_port: int, pod_logs: Path
) -> str:
    """The KubeletConfiguration: cgroupfs under our own cgroup root, x509 client auth only,
    no read-only port, eviction and image GC effectively off (a test node, not a server)."""
    config = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": res.node_ip,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": res.cgroup_root,
        "failSwapOn": False,
        "failCgroupV1": False,
        "containerRuntimeEndpoint": f"unix://{res.containerd_socket}",
        "podLogsDir": str(pod_logs),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca_cert)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1Mi",
            "imagefs.available": "1Mi",
            "nodefs.inodesFree": "1",
        },
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "nodeStatusReportFrequency": "10s",
    }
    return yaml.safe_dump(config, sort_keys=False)
