"""The flags table of docs/operations.md, generated from the settings table
(operator/settings.py): `python -m ordo.operator.settingsdoc` rewrites it, `--check` fails
when it is stale (tests/unit/test_settings_table.py runs the check)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .flags import Setting
from .settings import SETTINGS

BEGIN = (
    "<!-- ordo operator flags: generated from controller/ordo/operator/settings.py by "
    "`python -m ordo.operator.settingsdoc`; edit the table there, not here -->"
)
END = "<!-- end of the generated ordo operator flags -->"
DEFAULT_FILE = Path("docs") / "operations.md"


def _default(setting: Setting[Any]) -> str:
    if setting.action == "store_true":
        return "off"
    shown = setting.default_text()
    return f"`{shown}`" if shown else "none"


def _chart(setting: Setting[Any]) -> str:
    if setting.chart_renders is not None:
        return setting.chart_renders
    if not setting.chart:
        return "`operator.extraArgs`"
    return ", else ".join(f"`{path}`" for path in setting.chart)


def _flag(setting: Setting[Any]) -> str:
    names = [setting.flag, *setting.aliases]
    value = f" {setting.metavar or setting.name.upper()}" if setting.action != "store_true" else ""
    if setting.choices:
        value = " " + "\\|".join(setting.choices)
    return ", ".join(f"`{name}{value if name == setting.flag else ''}`" for name in names)


def render() -> str:
    """The generated block, markers included."""
    lines = [
        BEGIN,
        "| flag | default | Helm value | what it does |",
        "|---|---|---|---|",
    ]
    for setting in SETTINGS:
        if setting.flag is None:
            continue
        lines.append(
            f"| {_flag(setting)} | {_default(setting)} | {_chart(setting)} | {setting.help} |"
        )
    lines.append(END)
    return "\n".join(lines) + "\n"


def splice(text: str) -> str:
    """`text` with its generated block replaced by `render()` (ValueError: no block)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no generated flags block ({BEGIN!r} ... {END!r})")
    after = text[end + len(END) :]
    return text[:start] + render() + after.removeprefix("\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ordo.operator.settingsdoc")
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    args = parser.parse_args(argv)
    text = args.file.read_text()
    current = splice(text)
    if args.check:
        if current != text:
            print(f"{args.file}: the flags table is stale; run {parser.prog}", file=sys.stderr)
            return 1
        return 0
    if current != text:
        args.file.write_text(current)
    return 0


if __name__ == "__main__":
    sys.exit(main())
