"""Declared means used: every runtime dependency in pyproject.toml (``[project] dependencies``
and the optional extras except ``dev``) is imported somewhere under ``controller/ordo``, and
every third-party package imported there is declared. See docs/development.md."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
PACKAGE = ROOT / "controller" / "ordo"

#: Distributions whose import name is not the distribution name with ``-`` as ``_``.
IMPORT_NAMES = {
    "pyyaml": "yaml",
    "prometheus-client": "prometheus_client",
    "google-re2": "re2",
    "cel-python": "celpy",
    "psycopg": "psycopg",
    "httpx2": "httpx2",
    "a2a-sdk": "a2a",
    "protobuf": "google",
    "opentelemetry-api": "opentelemetry",
    "opentelemetry-sdk": "opentelemetry",
    "opentelemetry-exporter-otlp-proto-http": "opentelemetry",
}

#: Extras for tests and tooling, not for the runtime package.
NON_RUNTIME_EXTRAS = {"dev"}

_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def distribution_name(requirement: str) -> str:
    """The normalised (PEP 503) distribution name of a PEP 508 requirement string."""
    match = _REQUIREMENT_NAME.match(requirement)
    assert match, f"not a requirement: {requirement!r}"
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def import_name(distribution: str) -> str:
    return IMPORT_NAMES.get(distribution, distribution.replace("-", "_"))


def runtime_dependencies(pyproject: Path) -> dict[str, str]:
    """Distribution name -> where it is declared, for the runtime dependencies and extras."""
    project = tomllib.loads(pyproject.read_text())["project"]
    declared = {distribution_name(r): "dependencies" for r in project.get("dependencies", [])}
    for extra, requirements in project.get("optional-dependencies", {}).items():
        if extra in NON_RUNTIME_EXTRAS:
            continue
        for requirement in requirements:
            declared.setdefault(distribution_name(requirement), f"extra {extra!r}")
    return declared


def imported_top_level(package: Path) -> dict[str, set[str]]:
    """Top-level module name -> files importing it (absolute imports, at any nesting depth)."""
    imports: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                imports.setdefault(name.split(".")[0], set()).add(
                    str(path.relative_to(package.parent))
                )
    return imports


def unused_dependencies(pyproject: Path, package: Path) -> list[str]:
    imports = imported_top_level(package)
    return sorted(
        f"{dist} ({where}; import name {import_name(dist)!r})"
        for dist, where in runtime_dependencies(pyproject).items()
        if import_name(dist) not in imports
    )


def undeclared_imports(pyproject: Path, package: Path) -> list[str]:
    declared = {import_name(dist) for dist in runtime_dependencies(pyproject)}
    root = package.name
    return sorted(
        f"{module} (imported by {', '.join(sorted(files))})"
        for module, files in imported_top_level(package).items()
        if module not in sys.stdlib_module_names and module != root and module not in declared
    )


def test_every_runtime_dependency_is_imported() -> None:
    unused = unused_dependencies(PYPROJECT, PACKAGE)
    assert not unused, (
        "declared in pyproject.toml but never imported under controller/ordo (drop it, or map "
        f"its import name in IMPORT_NAMES): {unused}"
    )


def test_every_third_party_import_is_declared() -> None:
    undeclared = undeclared_imports(PYPROJECT, PACKAGE)
    assert not undeclared, (
        "imported under controller/ordo but not a runtime dependency in pyproject.toml "
        f"(a transitive dependency is not a declaration): {undeclared}"
    )


def test_checks_see_nested_imports_extras_and_mapped_names(tmp_path: Path) -> None:
    """The two checks above on a small project: both directions report what they should."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from . import sub\nimport yaml\n")
    (package / "sub" / "__init__.py").write_text(
        "import json\n"
        "from .. import other\n"
        "def f() -> None:\n"
        "    import re2\n"
        "    from prometheus_client.core import REGISTRY\n"
        "    import psycopg.rows\n"
        "    import undeclared_thing.sub\n"
        "    from pkg.sub import f\n"
    )
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        "[project]\n"
        'name = "pkg"\n'
        'dependencies = ["PyYAML>=6", "google-re2 >= 1.1; python_version >= \'3.11\'",'
        ' "prometheus_client>=0.20", "never-imported>=1"]\n'
        "[project.optional-dependencies]\n"
        'postgres = ["psycopg[binary]>=3.1"]\n'
        'missing = ["extra.only.pkg>=2"]\n'
        'dev = ["pytest>=8"]\n'
    )
    assert runtime_dependencies(pyproject) == {
        "pyyaml": "dependencies",
        "google-re2": "dependencies",
        "prometheus-client": "dependencies",
        "never-imported": "dependencies",
        "psycopg": "extra 'postgres'",
        "extra-only-pkg": "extra 'missing'",
    }
    assert unused_dependencies(pyproject, package) == [
        "extra-only-pkg (extra 'missing'; import name 'extra_only_pkg')",
        "never-imported (dependencies; import name 'never_imported')",
    ]
    assert undeclared_imports(pyproject, package) == [
        "undeclared_thing (imported by pkg/sub/__init__.py)"
    ]
