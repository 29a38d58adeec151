"""Read manifests from files, folders and stdin, and check them against the models.

Shared by `ordo validate` and `ordo run`. Every problem is reported with the file, the
document index, kind/name and the field path, and says what is expected.

This module parses each document into its kind's model (`parse_document`) and puts it all
together (`load`); reading files and folders is in manifest_reader.py, the checks across the
set in manifest_checks.py. Import from here: it re-exports both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from . import API_VERSION, KINDS, Resource
from .base import DNS1123_SUBDOMAIN
from .manifest_checks import (
    check_credentials,
    check_delegation_cycles,
    check_duplicates,
    check_limits,
    check_references,
    check_skills,
    references,
)
from .manifest_reader import (
    KUSTOMIZATION_FILES,
    MANIFEST_SUFFIXES,
    Document,
    ManifestSet,
    Problem,
    read_documents,
)

__all__ = [
    "KUSTOMIZATION_FILES",
    "MANIFEST_SUFFIXES",
    "OBJECT_META_FIELDS",
    "Document",
    "ManifestSet",
    "Problem",
    "check_credentials",
    "check_delegation_cycles",
    "check_duplicates",
    "check_limits",
    "check_references",
    "check_skills",
    "is_secret",
    "load",
    "parse_document",
    "read_documents",
    "references",
]


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
    result.problems.extend(check_delegation_cycles(result))
    result.problems.extend(check_credentials(result))
    return result
