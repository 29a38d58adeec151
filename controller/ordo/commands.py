"""Subcommands that need the engine or the operator (`run`, `operator`), registered lazily so
`ordo validate` and `ordo crds` stay fast."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:
    """Add the heavier subcommands to the `ordo` parser."""
    _ = (sub, argparse)
