"""The layout holds (issue 24 §5): no module of the package is over 400 lines, and the code map
in docs/development.md ("Map of the code") names every module by its path below
controller/ordo (`operator/lifecycle/scheduler.py`; `__init__.py` files excepted), and no module
that is not there any more."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "controller" / "ordo"
DEVELOPMENT = ROOT / "docs" / "development.md"
MAX_LINES = 400
MAP_HEADING = "## Map of the code"

PATH = re.compile(r"(?<![\w/.])((?:[a-z_][a-z0-9_]*/)*[a-z_][a-z0-9_]*\.py)\b")
"""A module path as the map writes it: `operator/lifecycle/scheduler.py`, `errors.py`."""


def modules() -> list[str]:
    """Every module of the package, as its path below controller/ordo."""
    return sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts
    )


def code_map() -> str:
    """The text of the section "Map of the code", up to the next section."""
    text = DEVELOPMENT.read_text()
    start = text.index(MAP_HEADING)
    end = text.find("\n## ", start + len(MAP_HEADING))
    return text[start : end if end >= 0 else len(text)]


def named(text: str) -> set[str]:
    return set(PATH.findall(text))


def test_the_path_pattern_reads_module_paths_as_the_map_writes_them() -> None:
    text = "`operator/lifecycle/scheduler.py` and errors.py, not controller/ordo/x.py or a.pyc"
    assert named(text) == {"operator/lifecycle/scheduler.py", "errors.py", "controller/ordo/x.py"}


def test_no_module_is_over_400_lines() -> None:
    over = {
        module: length
        for module in modules()
        if (length := len((PACKAGE / module).read_text().splitlines())) > MAX_LINES
    }
    assert over == {}, f"split these by responsibility (at most {MAX_LINES} lines each)"


def test_the_code_map_names_every_module() -> None:
    mentioned = named(code_map())
    missing = [m for m in modules() if not m.endswith("__init__.py") and m not in mentioned]
    assert missing == [], "name each in docs/development.md, 'Map of the code', with its purpose"


def test_the_code_map_names_no_module_that_is_gone() -> None:
    """A path below a package of ordo that names no module is stale (an old flat name)."""
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    existing = set(modules())
    stale = sorted(
        path
        for path in named(code_map())
        if "/" in path and path.split("/")[0] in rooms and path not in existing
    )
    assert stale == []
