"""Read manifests from files, folders and stdin, and check them against the models.

Shared by `ordo validate` and `ordo run`. Every problem is reported with the file, the
document index, kind/name and the field path, and says what is expected.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from . import API_VERSION, KINDS, Resource
from .base import DNS1123_SUBDOMAIN, parse_duration

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
            docs.append(Document(source, index, body))
            index += 1
    return docs, reader.notes + problems


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def _message(err: Any) -> str:
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if err["type"] == "extra_forbidden":
        msg = "unknown field (check the spelling and the API reference in docs/api.md)"
    elif err["type"] == "missing":
        msg = "required field is missing"
    elif err["type"] == "string_pattern_mismatch":
        pattern = err.get("ctx", {}).get("pattern", "")
        if "ms|s|m|h" in pattern:
            msg = "expected a duration such as '30s', '5m' or '1h30m'"
            if str(err.get("input", "")).lstrip().startswith("-"):
                msg = "a duration cannot be negative: " + msg
        elif pattern.startswith("^[a-z0-9]("):
            msg = "expected a lowercase DNS-1123 name (a-z, 0-9, '-', '.')"
        else:
            msg = f"expected a string matching {pattern}"
    elif err["type"] == "literal_error":
        msg = msg.replace("Input should be", "expected")
    if err["type"] not in ("missing", "extra_forbidden") and "input" in err:
        shown = repr(err["input"])
        if len(shown) <= 60:
            msg += f" (got {shown})"
    return msg


OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)
"""The fields of metav1.ObjectMeta; the API server rejects any other under metadata."""

_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_PREFIX = re.compile(DNS1123_SUBDOMAIN)
_LABEL_RULE = "at most 63 characters of a-z, A-Z, 0-9, '-', '_', '.', alphanumeric at both ends"


def _qualified_name(key: str) -> bool:
    """A label or annotation key, `[prefix/]name`, as the API server checks it."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _LABEL_PREFIX.match(prefix)):
        return False
    return len(name) <= 63 and bool(_LABEL_NAME.match(name))


def _metadata_problems(doc: Document) -> list[Problem]:
    """What the API server checks in metadata beyond the name: known fields, label syntax."""
    meta = doc.body.get("metadata")
    if not isinstance(meta, dict):
        return []
    problems = [
        Problem(doc, f"metadata.{key}", "unknown field (not a field of ObjectMeta)")
        for key in meta
        if key not in OBJECT_META_FIELDS
    ]
    for name in ("labels", "annotations"):
        entries = meta.get(name)
        if not isinstance(entries, dict):
            continue  # the model reports the type
        for key, value in entries.items():
            if isinstance(key, str) and not _qualified_name(key):
                problems.append(
                    Problem(
                        doc,
                        f"metadata.{name}",
                        f"invalid key {key!r}: [prefix/]name, {_LABEL_RULE}",
                    )
                )
            bad_value = isinstance(value, str) and (len(value) > 63 or not _LABEL_NAME.match(value))
            if name == "labels" and value and bad_value:
                problems.append(
                    Problem(
                        doc, "metadata.labels", f"invalid value of label {key!r}: {_LABEL_RULE}"
                    )
                )
    return problems


def parse_document(doc: Document) -> tuple[Resource | None, list[Problem]]:
    """Validate one document against its kind's model."""
    body = doc.body
    if not isinstance(body, dict):
        return None, [Problem(doc, "", "expected a mapping with apiVersion, kind, metadata, spec")]
    kind = body.get("kind")
    info = KINDS.get(str(kind))
    if info is None:
        known = ", ".join(KINDS)
        return None, [Problem(doc, "kind", f"unknown kind {kind!r}; expected one of {known}")]
    if body.get("apiVersion") != API_VERSION:
        return None, [
            Problem(doc, "apiVersion", f"expected {API_VERSION!r} (got {body.get('apiVersion')!r})")
        ]
    problems = _metadata_problems(doc)
    try:
        # As the API server reads it: no "5" -> 5 or "yes" -> True coercion (strict), and
        # only the camelCase wire names (by_name=False: `model_ref` is an unknown field).
        obj = info.model.model_validate(body, strict=True, by_alias=True, by_name=False)
        return (None, problems) if problems else (obj, [])
    except ValidationError as exc:
        for err in exc.errors():
            loc = _loc(err["loc"])
            message = _message(err)
            # A model-level rule names its own field path in the message ("spec.x: ...").
            head, sep, rest = message.partition(": ")
            if sep and head.startswith(("spec.", "metadata.")) and " " not in head:
                loc, message = head, rest
            problems.append(Problem(doc, loc, message))
        return None, problems


def is_secret(body: Any) -> bool:
    return (
        isinstance(body, dict) and body.get("apiVersion") == "v1" and body.get("kind") == "Secret"
    )


def load(paths: Iterable[str]) -> ManifestSet:
    """Read and validate manifests; Secrets are kept aside, other foreign kinds are warnings."""
    docs, problems = read_documents(paths)
    result = ManifestSet(problems=list(problems))
    for doc in docs:
        if is_secret(doc.body):
            result.secrets.append(doc)
            continue
        if isinstance(doc.body, dict) and str(doc.body.get("apiVersion", "")).split("/")[0] not in (
            "ordo.dev",
            "",
        ):
            result.problems.append(
                Problem(doc, "", "not an ordo.dev object; skipped", severity="warning")
            )
            continue
        obj, doc_problems = parse_document(doc)
        result.problems.extend(doc_problems)
        if obj is not None:
            result.objects.append((doc, obj))
    result.problems.extend(check_duplicates(result))
    result.problems.extend(check_references(result))
    result.problems.extend(check_limits(result))
    result.problems.extend(check_skills(result))
    return result


def check_duplicates(mset: ManifestSet) -> list[Problem]:
    """Two documents that define the same kind/namespace/name differently: an error naming
    both (which one would win depends on file order). The same object twice, identical, is
    harmless (example folders share objects) and not reported."""
    first: dict[tuple[str, str, str], tuple[Document, Any]] = {}
    entries: list[tuple[tuple[str, str, str], Document, Any]] = [
        ((obj.kind, obj.namespace, obj.name), doc, obj.to_dict()) for doc, obj in mset.objects
    ]
    for doc in mset.secrets:
        meta = doc.body.get("metadata") or {}
        ns = (meta.get("namespace") if isinstance(meta, dict) else None) or "default"
        entries.append((("Secret", str(ns), doc.name), doc, doc.body))
    problems = []
    for key, doc, body in entries:
        seen = first.setdefault(key, (doc, body))
        other, other_body = seen
        if other is doc or body == other_body:
            continue
        kind, ns, name = key
        problems.append(
            Problem(
                doc,
                "metadata.name",
                f"{kind} {ns}/{name} is defined twice, differently: here and in "
                f"{other.source}[{other.index}]; keep one",
            )
        )
    return problems


def check_skills(mset: ManifestSet) -> list[Problem]:
    """A Task's `skill` must be one of its Agent's `skills` when that Agent is in the set
    (the run would fail with InvalidSpec before any model call)."""
    from .agent import Agent
    from .task import Task

    agents = {(obj.namespace, obj.name): obj for _, obj in mset.objects if isinstance(obj, Agent)}
    problems = []
    for doc, obj in mset.objects:
        if not isinstance(obj, Task) or obj.spec.skill is None:
            continue
        agent = agents.get((obj.namespace, obj.spec.agent_ref))
        if agent is None:
            continue
        names = [s.name for s in agent.spec.skills or []]
        if obj.spec.skill not in names:
            has = ", ".join(names) if names else "none"
            problems.append(
                Problem(
                    doc,
                    "spec.skill",
                    f"Agent {agent.name!r} has no skill {obj.spec.skill!r} (its skills: {has})",
                )
            )
    return problems


def check_references(mset: ManifestSet) -> list[Problem]:
    """Warn about references to objects that are not in the set (they may exist in the cluster)."""
    present: set[tuple[str, str, str]] = set()
    for _, obj in mset.objects:
        present.add((obj.kind, obj.namespace, obj.name))

    problems = []
    for doc, obj in mset.objects:
        for field_path, kind, name in references(obj):
            if (kind, obj.namespace, name) not in present:
                problems.append(
                    Problem(
                        doc,
                        field_path,
                        f"{kind} {name!r} is not in the given manifests "
                        f"(fine if it already exists in namespace {obj.namespace!r})",
                        severity="warning",
                    )
                )
    return problems


def check_limits(mset: ManifestSet) -> list[Problem]:
    """Warn where a Task's limits are wider than its Agent's in the same set: limits only
    narrow, so the run takes the smaller value and the Task's wider one has no effect."""
    from .agent import Agent
    from .task import Task

    agents = {(obj.namespace, obj.name): obj for _, obj in mset.objects if isinstance(obj, Agent)}
    problems = []
    for doc, obj in mset.objects:
        if not isinstance(obj, Task) or obj.spec.limits is None:
            continue
        agent = agents.get((obj.namespace, obj.spec.agent_ref))
        if agent is None:
            continue
        wanted, bound = obj.spec.limits, agent.spec.limits
        wider: list[tuple[str, str]] = []
        if wanted.max_steps is not None and wanted.max_steps > bound.max_steps:
            wider.append(("maxSteps", str(bound.max_steps)))
        if wanted.timeout is not None and parse_duration(wanted.timeout) > parse_duration(
            bound.timeout
        ):
            wider.append(("timeout", bound.timeout))
        if (
            wanted.max_tokens is not None
            and bound.max_tokens is not None
            and wanted.max_tokens > bound.max_tokens
        ):
            wider.append(("maxTokens", str(bound.max_tokens)))
        for name, value in wider:
            problems.append(
                Problem(
                    doc,
                    f"spec.limits.{name}",
                    f"limits only narrow: the Agent's {name} {value} applies "
                    f"(Agent {agent.name!r})",
                    severity="warning",
                )
            )
    return problems


def references(obj: Resource) -> list[tuple[str, str, str]]:
    """(field path, kind, name) of every reference an object makes to another ordo object."""
    from .agent import Agent
    from .rbac import ToolPermission
    from .task import Task

    refs: list[tuple[str, str, str]] = []
    if isinstance(obj, Agent):
        refs.append(("spec.modelRef", "ModelEndpoint", obj.spec.model_ref))
        for i, tool in enumerate(obj.spec.tools or []):
            refs.append((f"spec.tools[{i}]", "Tool", tool))
        for i, role in enumerate(obj.spec.roles or []):
            refs.append((f"spec.roles[{i}]", "AgentRole", role))
        if obj.spec.memory and obj.spec.memory.ref:
            refs.append(("spec.memory.ref", "Memory", obj.spec.memory.ref))
    elif isinstance(obj, Task):
        refs.append(("spec.agentRef", "Agent", obj.spec.agent_ref))
    elif isinstance(obj, ToolPermission):
        refs.append(("spec.toolRef", "Tool", obj.spec.tool_ref))
    return refs
