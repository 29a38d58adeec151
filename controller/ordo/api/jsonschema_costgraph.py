"""The graph the schema cost bound is computed on (`ordo.api.jsonschema_cost`): every subschema
of a checked schema in its three modes (validate; re-walked by `unevaluatedProperties`; by
`unevaluatedItems`), with the fuel its own keywords spend on one value and its edges: the
subschemas it evaluates in place (applicators, references, with multiplicity) and those it
sends members to (by property name, by position, or for all of them)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from .jsonschema_fuel import ARRAY_KEYWORDS, DESCEND, OBJECT_KEYWORDS, REF
from .jsonschema_keywords import keyword_weight, message_weight
from .jsonschema_walk import Path, Walk

__all__ = ["FIND_INDEXES", "FIND_KEYS", "VALIDATE", "Graph", "Node"]

VALIDATE, FIND_KEYS, FIND_INDEXES = range(3)
"""The three modes of a subschema: validating a value, and re-walking it as
`unevaluatedProperties` / `unevaluatedItems` do (jsonschema's `find_evaluated_*_by_schema`)."""
_APPLICATOR_LISTS = ("allOf", "oneOf", "anyOf")


@dataclass
class Node:
    """One subschema in one mode: what evaluating it on one value costs there, and where it
    sends that value (in place) and its members (by name, position or for all of them)."""

    path: Path
    mode: int
    local: int = 0
    in_place: dict[int, int] = field(default_factory=dict)
    props: dict[str, list[int]] = field(default_factory=dict)
    obj_all: list[int] = field(default_factory=list)
    obj_other: list[int] = field(default_factory=list)
    idx: dict[int, list[int]] = field(default_factory=dict)
    arr_all: list[int] = field(default_factory=list)
    arr_other: list[int] = field(default_factory=list)
    names: list[int] = field(default_factory=list)
    obj_loop: int = 0
    arr_loop: int = 0
    name_loop: int = 0
    sticky: int = 0

    @property
    def path_is_true(self) -> bool:
        return self.is_true

    is_true: bool = False
    """A `true` subschema: evaluating it costs nothing."""

    def add(self, target: int) -> None:
        self.in_place[target] = self.in_place.get(target, 0) + 1

    @property
    def consumes(self) -> bool:
        return bool(
            self.props
            or self.obj_all
            or self.obj_other
            or self.idx
            or self.arr_all
            or self.arr_other
            or self.names
            or self.obj_loop
            or self.arr_loop
            or self.name_loop
            or self.sticky
        )


class Graph:
    """The subschemas of one schema in their three modes, with their costs and edges."""

    def __init__(self, walk: Walk, known: frozenset[str], dialect: str) -> None:
        self.walk = walk
        self.known = known
        self.legacy_items = "2020-12" not in dialect
        self.legacy_uneval = "2019-09" in dialect
        self.unevaluated = "unevaluatedProperties" in known
        self.refs = ("$ref", "$recursiveRef" if self.legacy_uneval else "$dynamicRef")
        self.ids: dict[tuple[Path, int], int] = {}
        self.nodes: list[Node] = []
        self.pending: list[int] = []
        for path in walk.nodes:
            self._id(path, VALIDATE)
        for path, schema in walk.nodes.items():
            self._validate(self.nodes[self.ids[(path, VALIDATE)]], schema)
        while self.pending:  # the unevaluated* modes, as the nodes above reach them
            node = self.nodes[self.pending.pop()]
            schema = walk.nodes[node.path]
            if node.mode == FIND_KEYS:
                self._find_keys(node, schema)
            else:
                self._find_indexes(node, schema)

    def _id(self, path: Path, mode: int) -> int:
        key = (path, mode)
        found = self.ids.get(key)
        if found is None:
            found = self.ids[key] = len(self.nodes)
            self.nodes.append(Node(path, mode))
            if mode != VALIDATE:
                self.pending.append(found)
        return found

    def v(self, path: Path) -> int:
        return self.ids[(path, VALIDATE)]

    def _targets(self, path: Path, keyword: str) -> list[Path]:
        return self.walk.ref_targets.get((path, keyword), [])

    def _validate(self, node: Node, schema: Any) -> None:
        path = node.path
        if schema is False:
            node.local = 1  # the $ordoFalse keyword
            return
        if schema is True:
            node.is_true = True
            return
        if not isinstance(schema, dict):
            return
        node.local = DESCEND  # evolve(): jsonschema starts evaluating a subschema object
        for keyword, value in schema.items():
            if keyword in self.known:
                node.local += keyword_weight(keyword, value) + message_weight(keyword, value)
                if keyword in ARRAY_KEYWORDS:
                    node.arr_loop += 1
                elif keyword in OBJECT_KEYWORDS or keyword == "additionalProperties":
                    node.obj_loop += 1
        for keyword in _APPLICATOR_LISTS:
            for i, _ in _subschemas(schema.get(keyword)):
                node.add(self.v((*path, keyword, i)))
        for keyword in ("not", "if", "then", "else"):
            if _is_schema(schema.get(keyword)):
                node.add(self.v((*path, keyword)))
        for keyword in ("dependentSchemas", "dependencies"):
            for name, _ in _named(schema.get(keyword)):
                node.add(self.v((*path, keyword, name)))
        for keyword in ("$ref", "$dynamicRef", "$recursiveRef"):
            for target in self._targets(path, keyword):
                node.add(self.v(target))
        if self.unevaluated and "unevaluatedProperties" in schema:
            node.add(self._id(path, FIND_KEYS))
            if isinstance(schema["unevaluatedProperties"], dict):
                node.obj_all.append(self.v((*path, "unevaluatedProperties")))
        if self.unevaluated and "unevaluatedItems" in schema:
            node.add(self._id(path, FIND_INDEXES))
        self._members(node, schema)

    def _members(self, node: Node, schema: dict[str, Any]) -> None:
        path = node.path
        for name, _ in _named(schema.get("properties")):
            node.props.setdefault(name, []).append(self.v((*path, "properties", name)))
        patterns = schema.get("patternProperties")
        for name, _ in _named(patterns):
            node.obj_all.append(self.v((*path, "patternProperties", name)))
        pattern_count = len(patterns) if isinstance(patterns, dict) else 0
        node.name_loop += pattern_count
        if "additionalProperties" in schema:
            node.name_loop += pattern_count
            if isinstance(schema["additionalProperties"], dict):
                node.obj_other.append(self.v((*path, "additionalProperties")))
        if _is_schema(schema.get("propertyNames")):
            node.names.append(self.v((*path, "propertyNames")))
        items = schema.get("items")
        if self.legacy_items and isinstance(items, list):
            for i, _ in _subschemas(items):
                node.idx.setdefault(i, []).append(self.v((*path, "items", i)))
            if _is_schema(schema.get("additionalItems")):
                node.arr_other.append(self.v((*path, "additionalItems")))
        elif _is_schema(items):
            (node.arr_all if self.legacy_items else node.arr_other).append(self.v((*path, "items")))
        if not self.legacy_items:
            for i, _ in _subschemas(schema.get("prefixItems")):
                node.idx.setdefault(i, []).append(self.v((*path, "prefixItems", i)))
        if _is_schema(schema.get("contains")):
            node.arr_all.append(self.v((*path, "contains")))
        if schema.get("uniqueItems") is True:
            node.sticky += 1

    def _refs_in_mode(self, node: Node, mode: int) -> None:
        for keyword in self.refs:
            targets = self._targets(node.path, keyword)
            if targets:
                node.local += REF
            for target in targets:
                node.add(self._id(target, mode))

    def _branches(self, node: Node, schema: dict[str, Any], mode: int) -> None:
        path = node.path
        for keyword in _APPLICATOR_LISTS:
            for i, _ in _subschemas(schema.get(keyword)):
                node.add(self.v((*path, keyword, i)))
                node.add(self._id((*path, keyword, i), mode))
        if _is_schema(schema.get("if")):
            node.add(self.v((*path, "if")))
            for keyword in ("if", "then", "else"):
                if _is_schema(schema.get(keyword)):
                    node.add(self._id((*path, keyword), mode))

    def _find_keys(self, node: Node, schema: Any) -> None:
        if not isinstance(schema, dict):
            return
        node.local = 1 + DESCEND
        path = node.path
        self._refs_in_mode(node, FIND_KEYS)
        if self.legacy_uneval:
            for keyword in ("properties", "additionalProperties", "unevaluatedProperties"):
                if isinstance(schema.get(keyword), dict):
                    node.local += len(schema[keyword])
        else:
            for keyword in ("additionalProperties", "unevaluatedProperties"):
                if keyword in schema:
                    node.obj_loop += 1
                    if isinstance(schema[keyword], dict):
                        node.obj_all.append(self.v((*path, keyword)))
        patterns = schema.get("patternProperties")
        if isinstance(patterns, dict):
            node.name_loop += len(patterns)
        for name, _ in _named(schema.get("dependentSchemas")):
            node.add(self._id((*path, "dependentSchemas", name), FIND_KEYS))
        self._branches(node, schema, FIND_KEYS)

    def _find_indexes(self, node: Node, schema: Any) -> None:
        if not isinstance(schema, dict):
            return
        node.local = 1 + DESCEND
        path = node.path
        if not self.legacy_uneval and "items" in schema:
            return
        self._refs_in_mode(node, FIND_INDEXES)
        if (
            self.legacy_uneval
            and "items" in schema
            and ("additionalItems" in schema or isinstance(schema["items"], dict))
        ):
            return
        for keyword in ("contains", "unevaluatedItems"):
            if keyword in schema:
                node.arr_loop += 1
                if isinstance(schema[keyword], dict):
                    node.arr_all.append(self.v((*path, keyword)))
        self._branches(node, schema, FIND_INDEXES)

    def order(self, root: int) -> list[int]:
        """The nodes `root` reaches (in place or through members), each after the nodes it
        evaluates in place (the in-place graph is acyclic: `Walk` refused the schema
        otherwise); without recursion."""
        reach = {root}
        todo = [root]
        while todo:
            for v in _edges(self.nodes[todo.pop()]):
                if v not in reach:
                    reach.add(v)
                    todo.append(v)
        done: set[int] = set()
        out: list[int] = []
        for start in sorted(reach):
            if start in done:
                continue
            stack: list[tuple[int, bool]] = [(start, False)]
            while stack:
                u, expanded = stack.pop()
                if expanded:
                    if u not in done:
                        done.add(u)
                        out.append(u)
                    continue
                if u in done:
                    continue
                stack.append((u, True))
                stack.extend((v, False) for v in self.nodes[u].in_place if v not in done)
        return out


def _edges(node: Node) -> Iterator[int]:
    yield from node.in_place
    for targets in (*node.props.values(), *node.idx.values()):
        yield from targets
    yield from node.obj_all
    yield from node.obj_other
    yield from node.arr_all
    yield from node.arr_other
    yield from node.names


def _is_schema(value: Any) -> bool:
    return isinstance(value, (dict, bool))


def _subschemas(value: Any) -> Iterable[tuple[int, Any]]:
    if isinstance(value, list):
        return ((i, v) for i, v in enumerate(value) if _is_schema(v))
    return ()


def _named(value: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(value, dict):
        return ((k, v) for k, v in value.items() if _is_schema(v))
    return ()
