"""No module-level import cycle in the ordo package (issue 24 §5).

An import that runs when its module is loaded (at the top level, in a class body, under a
`try` or a plain `if`) is an edge; an import inside a function, or under `if TYPE_CHECKING:`,
is not (it cannot make a partially initialised module visible). `from a import b` where `a.b`
is a module is an edge to `a.b`, not to `a`; the implicit import of a parent package is not
an edge (every `__init__` that re-exports its modules would otherwise be a cycle).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "controller"
PACKAGE = "ordo"


def module_names() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in (ROOT / PACKAGE).rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements that run when the module is loaded."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                pending.extend(node.body)
            pending.extend(node.orelse)
        elif isinstance(node, ast.Try):
            pending.extend([*node.body, *node.orelse, *node.finalbody])
            for handler in node.handlers:
                pending.extend(handler.body)
        elif isinstance(node, ast.ClassDef | ast.With):
            pending.extend(node.body)


def edges(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules `name` imports at load time."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in module_level_imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in modules)
            continue
        if node.level:
            base = name.split(".")
            base = base[: len(base) - node.level + (1 if is_package else 0)]
            target = ".".join([*base, *([node.module] if node.module else [])])
        else:
            target = node.module or ""
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            if sub in modules:
                out.add(sub)
            elif target in modules:
                out.add(target)
    out.discard(name)
    return out


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def package_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: edges(name, path, modules) for name, path in modules.items()}


def test_the_package_has_no_module_level_import_cycle() -> None:
    found = [sorted(c) for c in cycles(package_graph())]
    assert not found, f"module-level import cycles: {found}"


def test_api_and_errors_do_not_import_each_other() -> None:
    graph = package_graph()
    assert "ordo.reasons" in graph["ordo.errors"]
    assert not {m for m in graph["ordo.errors"] if m.startswith("ordo.api")}
    assert not graph["ordo.reasons"]


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [frozenset({"a", "b"})]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}, [frozenset({"a", "b", "c"})]),
    ],
)
def test_the_cycle_finder_finds_cycles(
    graph: dict[str, set[str]], expected: list[frozenset[str]]
) -> None:
    assert cycles(graph) == expected


def test_type_checking_and_function_imports_are_not_edges() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "if TYPE_CHECKING:\n    import os\n"
        "try:\n    import re\nexcept ImportError:\n    import sre\n"
        "def f():\n    import sys\n"
    )
    names = {a.name for n in module_level_imports(tree) for a in n.names}
    assert names == {"TYPE_CHECKING", "json", "re", "sre"}
