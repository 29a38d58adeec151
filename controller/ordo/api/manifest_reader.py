"""Read manifests: expand the paths given (files, folders, a folder's kustomization
`resources:`, stdin) and split them into YAML documents.

Also the types shared by reading, parsing and checking: `Document` (one document and where it
came from), `Problem` (an error or warning about one) and `ManifestSet` (what `load` returns).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import Resource

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Document:
    """One YAML document and where it came from."""

    source: str
    index: int
    body: Any

    @property
    def kind(self) -> str:
        return str(self.body.get("kind", "")) if isinstance(self.body, dict) else ""

    @property
    def name(self) -> str:
        meta = self.body.get("metadata") if isinstance(self.body, dict) else None
        return str(meta.get("name", "")) if isinstance(meta, dict) else ""

    @property
    def where(self) -> str:
        label = f"{self.kind or '?'}/{self.name or '?'}"
        return f"{self.source}[{self.index}] {label}"


@dataclass(frozen=True)
class Problem:
    """An error or warning about one document."""

    document: Document | None
    field: str
    message: str
    severity: str = "error"

    @property
    def text(self) -> str:
        """`file[doc] Kind/name: field.path: message`."""
        where = self.document.where if self.document else "-"
        field = f" {self.field}:" if self.field else ""
        return f"{where}:{field} {self.message}"

    def __str__(self) -> str:
        return f"{self.severity}: {self.text}"


@dataclass
class ManifestSet:
    """Parsed ordo objects plus the other documents (Secrets) and every problem found."""

    objects: list[tuple[Document, Resource]] = field(default_factory=list)
    secrets: list[Document] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]


KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
"""File names kustomize reads as a folder's kustomization."""
_KUSTOMIZE_IGNORED = (
    "patches",
    "patchesStrategicMerge",
    "patchesJson6902",
    "configMapGenerator",
    "secretGenerator",
    "namespace",
    "namePrefix",
    "nameSuffix",
    "commonLabels",
    "labels",
    "commonAnnotations",
    "images",
    "replacements",
    "components",
)


def _kustomization(folder: Path) -> Path | None:
    for name in KUSTOMIZATION_FILES:
        candidate = folder / name
        if candidate.is_file():
            return candidate
    return None


class _Reader:
    """Expands the paths given on the command line into (source, text) pairs: files as they
    are, folders recursively, and a folder with a kustomization by its `resources:` list
    (files and sub-folders, relative to the folder; a kustomization is never an ordo object).
    What cannot be followed (remote resources, transformers) becomes a warning note."""

    def __init__(self) -> None:
        self.notes: list[Problem] = []
        self._seen: set[Path] = set()

    def note(self, source: str, message: str) -> None:
        self.notes.append(Problem(Document(source, 0, None), "", message, severity="warning"))

    def _file(self, path: Path) -> Iterator[tuple[str, str]]:
        resolved = path.resolve()
        if resolved in self._seen:
            return  # the same file reached twice (given twice, or listed by a kustomization)
        self._seen.add(resolved)
        if path.name in KUSTOMIZATION_FILES:
            yield from self._kustomize(path)
            return
        yield str(path), path.read_text()

    def _folder(self, folder: Path) -> Iterator[tuple[str, str]]:
        kustomization = _kustomization(folder)
        if kustomization is not None:
            yield from self._file(kustomization)
            return
        for child in sorted(folder.iterdir()):
            if child.is_dir():
                yield from self._folder(child)
            elif child.suffix in MANIFEST_SUFFIXES:
                yield from self._file(child)

    def _kustomize(self, path: Path) -> Iterator[tuple[str, str]]:
        source = str(path)
        try:
            body = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            self.notes.append(
                Problem(Document(source, 0, None), "", f"invalid YAML in a kustomization: {exc}")
            )
            return
        if not isinstance(body, dict):
            self.note(source, "not a kustomization (expected a mapping); skipped")
            return
        ignored = [key for key in _KUSTOMIZE_IGNORED if body.get(key)]
        if ignored:
            self.note(
                source,
                "kustomization: only `resources` are read; "
                + ", ".join(ignored)
                + " not applied (to check the rendered objects: "
                "`kubectl kustomize DIR | ordo validate -f -`)",
            )
        resources = body.get("resources") or []
        if not isinstance(resources, list):
            self.notes.append(
                Problem(Document(source, 0, body), "resources", "expected a list of paths")
            )
            return
        for entry in resources:
            if not isinstance(entry, str) or not entry:
                self.notes.append(
                    Problem(Document(source, 0, body), "resources", f"not a path: {entry!r}")
                )
                continue
            if "://" in entry or entry.startswith(("github.com/", "git@")):
                self.note(source, f"remote resource {entry!r} not read")
                continue
            target = path.parent / entry
            if target.is_dir():
                yield from self._folder(target)
            elif target.is_file():
                yield from self._file(target)
            else:
                self.notes.append(
                    Problem(
                        Document(source, 0, body),
                        "resources",
                        f"{entry!r}: no such file or folder (relative to {path.parent})",
                    )
                )

    def expand(self, paths: Iterable[str]) -> Iterator[tuple[str, str]]:
        for raw in paths:
            if raw == "-":
                yield "<stdin>", sys.stdin.read()
                continue
            path = Path(raw)
            if path.is_dir():
                yield from self._folder(path)
            elif path.exists():
                yield from self._file(path)
            else:
                raise FileNotFoundError(f"{raw}: no such file or directory")


def read_documents(paths: Iterable[str]) -> tuple[list[Document], list[Problem]]:
    """Split every file into documents; YAML syntax errors become problems."""
    docs: list[Document] = []
    problems: list[Problem] = []
    reader = _Reader()
    for source, text in reader.expand(paths):
        try:
            bodies = list(yaml.safe_load_all(text))
        except yaml.YAMLError as exc:
            problems.append(Problem(Document(source, 0, None), "", f"invalid YAML: {exc}"))
            continue
        index = 0
        for body in bodies:
            if body is None:
                continue
            if isinstance(body, dict) and body.get("kind") == "List":
                items = body.get("items") or []
                if not isinstance(items, list):
                    problems.append(
                        Problem(Document(source, index, body), "items", "expected a list")
                    )
                    continue
                for item in items:
                    docs.append(Document(source, index, item))
                    index += 1
                continue
            where = non_finite(body)
            if where is not None:
                problems.append(
                    Problem(
                        Document(source, index, body),
                        where,
                        "not a JSON number (.inf or .nan; the API server stores JSON): "
                        "write a finite number or a string",
                    )
                )
            else:
                docs.append(Document(source, index, body))
            index += 1
    return docs, reader.notes + problems


def non_finite(value: Any) -> str | None:
    """The path of the first infinite or NaN float in a YAML document, or None. YAML has
    `.inf` and `.nan`; JSON has neither, so such a value would be stored as null: refused.
    Iterative, so a deeply nested document costs no recursion."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return path or "."
        elif isinstance(item, dict):
            for key, child in reversed(list(item.items())):
                stack.append((f"{path}.{key}" if path else str(key), child))
        elif isinstance(item, list):
            for i in range(len(item) - 1, -1, -1):
                stack.append((f"{path}[{i}]", item[i]))
    return None
