"""``python -m ordo_devcluster node up|down``: a single-node cluster for humans.

``up`` starts a :class:`NodeCluster` (root needed), prints how to reach it and runs until
Ctrl-C or SIGTERM, then removes everything it created. ``down`` cleans up nodes whose owning
process died (a ``kill -9``, a crashed pytest); ``down --all`` also tears down nodes whose
owner still runs.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from ordo_devcluster.node import NodeCluster
from ordo_devcluster.nodestate import sweep_stale_nodes
from ordo_devcluster.serving import serve_until_stopped

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ordo_devcluster node",
        description="A single-node cluster: etcd, kube-apiserver, kube-controller-manager, "
        "kube-scheduler, containerd and a kubelet (needs root, scripts/build-controlplane "
        "and scripts/node-deps).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a node and run until Ctrl-C or SIGTERM")
    up.add_argument("--crds", type=Path, help="directory of CRD manifests to apply, e.g. crds/")
    up.add_argument("--kubeconfig", type=Path, help="write the admin kubeconfig here")
    up.add_argument("--image", type=Path, action="append", default=[], help="OCI archive to import")
    up.add_argument("--timeout", type=float, default=120.0, help="start timeout (default 120 s)")
    up.add_argument("--keep-workdir", action="store_true", help="keep logs after stopping")
    down = sub.add_parser("down", help="clean up nodes left behind by dead processes")
    down.add_argument("--all", action="store_true", help="also nodes whose owner still runs")
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.command == "down":
        cleaned = sweep_stale_nodes(all_nodes=args.all)
        print(f"cleaned {len(cleaned)} node(s)" + (f": {', '.join(cleaned)}" if cleaned else ""))
        return 0
    return serve_until_stopped(
        lambda: NodeCluster(
            crds=args.crds,
            kubeconfig=args.kubeconfig,
            images=args.image,
            start_timeout=args.timeout,
            keep_workdir=args.keep_workdir,
        ),
        lambda node: [
            f"node {node.node_name} ready: {node.server}",
            f"kubeconfig: {node.kubeconfig}",
            f"kubectl:    {node.binaries / 'kubectl'}",
            f"images:     {node.busybox_image} (and any --image)",
            f"workdir:    {node.workdir}",
            f"export KUBECONFIG={shlex.quote(str(node.kubeconfig))}",
        ],
        "node",
    )
