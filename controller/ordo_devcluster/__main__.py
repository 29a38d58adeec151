"""``python -m ordo_devcluster``: run a loopback control plane until Ctrl-C or SIGTERM;
``python -m ordo_devcluster node up|down``: a single-node cluster (see nodecli)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ordo_devcluster import BIN_ENV, ControlPlane
from ordo_devcluster.serving import serve_until_stopped


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ordo_devcluster",
        description=(
            "Start etcd + kube-apiserver on loopback (no kubelet, no controller-manager), "
            "print how to reach them, and stop everything on Ctrl-C or SIGTERM."
        ),
    )
    parser.add_argument(
        "--crds",
        type=Path,
        help="directory of CRD manifests to apply (server-side) and wait for; e.g. crds/",
    )
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        help="write the admin kubeconfig here (default: inside the temporary working dir)",
    )
    parser.add_argument(
        "--bin",
        type=Path,
        help=f"directory holding etcd, kube-apiserver, kubectl (default: ${BIN_ENV} or the "
        "scripts/build-controlplane cache)",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="start timeout in seconds (default 60)"
    )
    parser.add_argument(
        "--keep-workdir",
        action="store_true",
        help="keep the working directory (logs, etcd data, certificates) after stopping",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["node"]:
        from ordo_devcluster.nodecli import main as node_main

        return node_main(argv[1:])
    args = _parser().parse_args(argv)
    return serve_until_stopped(
        lambda: ControlPlane(
            crds=args.crds,
            kubeconfig=args.kubeconfig,
            bin_dir=args.bin,
            start_timeout=args.timeout,
            keep_workdir=args.keep_workdir,
        ),
        lambda cp: [
            f"control plane ready: {cp.server}",
            f"kubeconfig: {cp.kubeconfig}",
            f"kubectl:    {cp.binaries / 'kubectl'}",
            f"pids:       {cp.pids}",
            f"workdir:    {cp.workdir}",
            f"export KUBECONFIG={shlex.quote(str(cp.kubeconfig))}",
        ],
        "control-plane",
    )


if __name__ == "__main__":
    sys.exit(main())
