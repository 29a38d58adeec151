"""Parsed referenced objects, kept while they do not change (the Agent, its Tools, the
ModelEndpoint... that every Task of an Agent reads).

An object is identified by its kind and `metadata.uid` and changes exactly when its
`metadata.resourceVersion` does (the API server bumps it on every write), so a body with the
same kind, uid and resourceVersion as a cached one is the cached model: not parsed again, and
its post-parse `check` (e.g. a Tool's input schema) not run again. A new resourceVersion is
parsed and replaces the entry; an object that is no longer read falls out of the LRU.
Bodies without a uid or resourceVersion (`ordo run` manifests) are parsed every time.

Only successes are kept: a body that fails to parse or check raises every time it is read.
The cached models are shared by every Task that reads them (snapshots of different runs hold
the same object), so nothing may mutate them: code that needs a variant copies it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar, cast

from pydantic import ValidationError

from ..api import Resource
from ..errors import ResolutionError, validation_problem

R = TypeVar("R", bound=Resource)
Key = tuple[type[Resource], object, str]

MAX_ENTRIES = 4096
"""Most objects kept (one entry per object and check): bounded memory with many objects."""


def _version(body: dict[str, Any]) -> tuple[str, str] | None:
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        return None
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    if isinstance(uid, str) and uid and isinstance(version, str) and version:
        return uid, version
    return None


def parse_body(model: type[R], body: dict[str, Any], what: str) -> R:
    """`body` as `model`, or InvalidSpec naming the object and the field."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise ResolutionError(
            "InvalidSpec", f"{what} is invalid at {validation_problem(exc)}"
        ) from None


class ParseCache:
    """Bounded LRU of parsed objects keyed by (model, check, uid), valid for one
    resourceVersion. The check is part of the key: a model cached unchecked is never handed to
    a caller that asked for a check."""

    def __init__(self, maxsize: int = MAX_ENTRIES) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self._entries: OrderedDict[Key, tuple[str, Resource]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def parse(
        self,
        model: type[R],
        body: dict[str, Any],
        what: str,
        check: Callable[[R], None] | None = None,
    ) -> R:
        """`body` as `model` (InvalidSpec when it is not), after `check(parsed)` passed (it
        raises ResolutionError otherwise); from the cache when this version was seen."""
        version = _version(body)
        if version is None:
            return self._parse(model, body, what, check)
        uid, resource_version = version
        key: Key = (model, check, uid)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] == resource_version:
                self._entries.move_to_end(key)
                return cast(R, entry[1])
        fresh = self._parse(model, body, what, check)
        with self._lock:
            self._entries[key] = (resource_version, fresh)
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)
        return fresh

    @staticmethod
    def _parse(
        model: type[R], body: dict[str, Any], what: str, check: Callable[[R], None] | None
    ) -> R:
        parsed = parse_body(model, body, what)
        if check is not None:
            check(parsed)
        return parsed


CACHE = ParseCache()
"""The process's cache of referenced objects (fetch.get and the governance reads of
runtime/policies.py go through it)."""

__all__ = ["CACHE", "MAX_ENTRIES", "ParseCache", "parse_body"]
