"""An earlier ordo's `controller/`, from git: the `from` side of the upgrade tests."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def controller_at(commit: str, target: Path) -> Path:
    """Extract `controller/` of `commit` into `target`; run it with PYTHONPATH=<the result>."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "controller"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target / "controller"
