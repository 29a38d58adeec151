"""Keep a started cluster (control plane or node) up in the foreground until a signal, for
`python -m ordo_devcluster` and `python -m ordo_devcluster node up`."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from .errors import ControlPlaneError


def serve_until_stopped(
    make: Callable[[], Any], describe: Callable[[Any], list[str]], what: str
) -> int:
    """Start `make()` (a context manager with `running`), print `describe(cluster)`, and wait
    for SIGTERM, SIGHUP or Ctrl-C; exit 1 if one of its processes exits first."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()
        # Also interrupt a start that is still in progress; stop() then runs in start().
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        with make() as cluster:
            for line in describe(cluster):
                print(line, flush=True)
            print("press Ctrl-C to stop", flush=True)
            while not stop.wait(1.0):
                if not cluster.running:
                    print(f"a {what} process exited; stopping", file=sys.stderr)
                    return 1
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
        return 0
    except ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
