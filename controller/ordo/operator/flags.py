"""A row of the operator's settings table (operator/settings.py) and how it becomes an
argparse flag: its help with the default appended (so `--help` cannot disagree with the
table), the flag's type, metavar and choices, and the `--help` sections."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

T = TypeVar("T")

Section = Literal["scope", "operator", "jobs", "internal"]
"""Where a flag is shown in `--help`: the mutually exclusive namespace scope, the operator's
own flags, the Job-mode group; `internal` settings have no flag."""

Unit = Literal["", "seconds", "duration", "quantities"]
"""`seconds`: a number of seconds; `duration`: a duration string (`30s`, `5m`, `1h30m`) read as
seconds; `quantities`: `cpu=Q,memory=Q`."""


def duration_seconds(value: str) -> float:
    """An argparse type: a duration string as seconds."""
    from ..api import parse_duration

    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def non_negative(value: str) -> int:
    """An argparse type: an integer, 0 or more."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {number}")
    return number


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One row of the table."""

    name: str
    """The argparse dest (`args.<name>`)."""
    flag: str | None
    """The `ordo operator` flag; None: an internal setting that no flag sets."""
    default: T
    help: str
    """What it does, without the default (the generated help and docs append it)."""
    type: Callable[[str], Any] | None = None
    unit: Unit = ""
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    action: Literal["store", "store_true", "append"] = "store"
    section: Section = "operator"
    aliases: tuple[str, ...] = ()
    chart: tuple[str, ...] = ()
    """The chart values that set the flag (dotted paths in values.yaml), in helm `default`
    order: the first non-empty one is passed. Empty: the chart sets no value for it (pass it
    in `operator.extraArgs`)."""
    chart_renders: str | None = None
    """When the chart does not pass the table's default by default, what it passes instead
    (documented; the chart test then checks only that the flag is passed)."""

    def default_text(self) -> str:
        """The default as a user writes it, or "" when there is nothing to show."""
        value: Any = self.default
        if self.action != "store" or value is None or value == "":
            return ""
        if self.unit == "duration":
            seconds = float(value)
            return f"{seconds / 3600:g}h" if seconds and seconds % 3600 == 0 else f"{seconds:g}s"
        if isinstance(value, float):
            return f"{value:g}"
        return str(value)

    def help_text(self) -> str:
        shown = self.default_text()
        return f"{self.help} (default {shown})" if shown else self.help

    def add_to(self, parser: argparse._ActionsContainer) -> None:
        """Add the flag to `parser` (an ArgumentParser, group or exclusive group)."""
        if self.flag is None:
            raise ValueError(f"{self.name} has no flag")
        kwargs: dict[str, Any] = {"dest": self.name, "help": self.help_text()}
        if self.action == "store_true":
            kwargs["action"] = "store_true"
        else:
            if self.action == "append":
                kwargs["action"] = "append"
            if self.default is not None:
                default: Any = self.default
                kwargs["default"] = list(default) if isinstance(default, tuple) else default
            for key in ("type", "metavar", "choices"):
                if (value := getattr(self, key)) is not None:
                    kwargs[key] = value
        parser.add_argument(self.flag, *self.aliases, **kwargs)


JOB_GROUP = "Job mode (one batch/v1 Job per Task)"


def add_flags(parser: argparse.ArgumentParser, settings: tuple[Setting[Any], ...]) -> None:
    """Add the flags of `settings` to `parser`, grouped by section."""
    scope: argparse._ActionsContainer | None = None
    jobs: argparse._ActionsContainer | None = None
    for setting in settings:
        if setting.section == "internal":
            continue
        target: argparse._ActionsContainer = parser
        if setting.section == "scope":
            scope = scope or parser.add_mutually_exclusive_group()
            target = scope
        elif setting.section == "jobs":
            jobs = jobs or parser.add_argument_group(JOB_GROUP)
            target = jobs
        setting.add_to(target)


def parse_quantities(value: str) -> dict[str, str]:
    """`cpu=100m,memory=128Mi` (`--job-requests`, `--job-limits`) as a resource map (empty
    string: none)."""
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        key, sep, amount = part.partition("=")
        if not sep or key not in ("cpu", "memory") or not amount:
            raise ValueError(f"expected cpu=QUANTITY or memory=QUANTITY, got {part!r}")
        out[key] = amount
    return out


def parse_workers(value: str) -> int | None:
    """`--workers`: a count (0 or more), or None for `auto` (the cgroup's CPUs,
    operator/workers/cpus.py). Raises argparse.ArgumentTypeError otherwise."""
    if value == "auto":
        return None
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(
            f"expected a number of workers (0 or more) or auto, not {value!r}"
        )
    return count


def workers_flag(value: str) -> str:
    """The argparse type of `--workers`: the value as given, once it parses."""
    parse_workers(value)
    return value
