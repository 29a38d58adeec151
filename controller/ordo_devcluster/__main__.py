"""``python -m ordo_devcluster``: run a loopback control plane until Ctrl-C or SIGTERM;
``python -m ordo_devcluster node up|down``: a single-node cluster (see nodecli)."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from ordo_devcluster import BIN_ENV, ControlPlane, ControlPlaneError


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
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()
        # Also interrupt a start that is still in progress; stop() then runs in start().
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    try:
        control_plane = ControlPlane(
            crds=args.crds,
            kubeconfig=args.kubeconfig,
            bin_dir=args.bin,
            start_timeout=args.timeout,
            keep_workdir=args.keep_workdir,
        )
        with control_plane:
            print(f"control plane ready: {control_plane.server}", flush=True)
            print(f"kubeconfig: {control_plane.kubeconfig}", flush=True)
            print(f"kubectl:    {control_plane.binaries / 'kubectl'}", flush=True)
            print(f"pids:       {control_plane.pids}", flush=True)
            print(f"workdir:    {control_plane.workdir}", flush=True)
            print(f"export KUBECONFIG={shlex.quote(str(control_plane.kubeconfig))}", flush=True)
            print("press Ctrl-C to stop", flush=True)
            while not stop.wait(1.0):
                if not control_plane.running:
                    print("a control-plane process exited; stopping", file=sys.stderr)
                    return 1
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 0
    except ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
