"""The keyword-aware walk of a user JSON Schema (see `ordo.api.jsonschemas`): `Walk` finds
the subschema positions, ids, anchors, references and patterns, resolves every `$ref` /
`$dynamicRef` inside the schema itself (remote references are refused, nothing is fetched),
refuses patterns RE2 cannot compile, and refuses a chain of references and in-place
applicators that loops back on itself without consuming input or is longer than
`MAX_REF_CHAIN`. It also refuses `$schema` below the root: jsonschema would evaluate that
subschema with its stock validator class (Python's backtracking `re`, no work budget).
`json_path` names a position in a schema (`$.properties.name`).

After `problems()`, `ref_targets` maps each reference keyword to the subschemas it may reach
(its static target, plus every `$dynamicAnchor` of the same name or `$recursiveAnchor`
resource it may rebind to), which `ordo.api.jsonschema_cost` follows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from .jsonschema_re2 import compile_pattern

MAX_REF_CHAIN = 32
"""Longest chain of `$ref`s and in-place applicators (`allOf`, `not`, ...) that does not
consume input: each link is a level of recursion when the schema is evaluated."""

_LEGACY_IDS = {"http://json-schema.org/draft-04/schema"}  # `id`, not `$id`

# Keywords whose values are subschemas, by shape.
_SINGLE = (
    "additionalProperties",
    "additionalItems",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
    "items",  # a schema, or (drafts <= 2019-09) an array of schemas
)
_ARRAY = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAP = (
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
)
# Applicators that apply their subschemas to the same instance (no input consumed).
_IN_PLACE = frozenset({"allOf", "anyOf", "oneOf", "not", "if", "then", "else"})
_IN_PLACE_MAPS = frozenset({"dependentSchemas", "dependencies"})
_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")

Path = tuple[str | int, ...]


def json_path(path: Path) -> str:
    """`$.properties.name.pattern`, `$.allOf[0]`, `$.properties["a b"]`."""
    out = "$"
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part and all(c.isalnum() or c in "_$-" for c in part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part)}]"
    return out


class Walk:
    """One keyword-aware pass over the schema: subschema positions, ids, anchors, refs and
    patterns, then reference resolution and the in-place cycle check."""

    def __init__(self, schema: dict[str, Any], dialect: str) -> None:
        self.root = schema
        self.id_key = "id" if dialect in _LEGACY_IDS else "$id"
        self.nodes: dict[Path, Any] = {}
        self.resources: dict[str, Path] = {}
        self.anchors: dict[tuple[str, str], Path] = {}
        self.refs: list[tuple[Path, str, str, str]] = []  # (path, keyword, value, base)
        self.problems_: list[str] = []
        self.has_unevaluated_properties = False
        self.has_pattern_properties = False
        self.ref_targets: dict[tuple[Path, str], list[Path]] = {}
        self.dynamic_anchors: dict[str, list[Path]] = {}
        self.recursive_anchors: list[Path] = []

    def problems(self) -> list[str]:
        self._walk()
        edges = self._resolve()
        if not self._cycles(edges):
            self._longest_chain(edges)
        if self.has_unevaluated_properties and self.has_pattern_properties:
            self.problems_.append(
                "$: unevaluatedProperties cannot be combined with patternProperties "
                "(ordo matches patterns with RE2 and this combination would use a backtracking "
                "engine); use additionalProperties instead"
            )
        return self.problems_

    def _walk(self) -> None:
        base0 = ""
        root_id = self.root.get(self.id_key)
        if isinstance(root_id, str):
            base0 = urldefrag(urljoin("", root_id))[0]
        self.resources[base0] = ()
        stack: list[tuple[Any, Path, str]] = [(self.root, (), base0)]
        while stack:
            node, path, base = stack.pop()
            if not isinstance(node, (dict, bool)):
                continue
            self.nodes[path] = node
            if isinstance(node, bool):
                continue
            ident = node.get(self.id_key)
            if isinstance(ident, str) and path:
                uri, fragment = urldefrag(urljoin(base, ident))
                if uri and not ident.startswith("#"):
                    base = uri
                    self.resources.setdefault(uri, path)
                if fragment and not fragment.startswith("/"):
                    self.anchors.setdefault((base, fragment), path)
            for key in ("$anchor", "$dynamicAnchor"):
                anchor = node.get(key)
                if isinstance(anchor, str):
                    self.anchors.setdefault((base, anchor), path)
            dynamic = node.get("$dynamicAnchor")
            if isinstance(dynamic, str):
                self.dynamic_anchors.setdefault(dynamic, []).append(path)
            if node.get("$recursiveAnchor") is True:
                self.recursive_anchors.append(path)
            if path and "$schema" in node:
                self.problems_.append(
                    f"{json_path((*path, '$schema'))}: $schema is honoured only at the root "
                    "(ordo evaluates the whole schema with the root's draft); remove it here"
                )
            for key in _REF_KEYWORDS:
                value = node.get(key)
                if isinstance(value, str):
                    self.refs.append((path, key, value, base))
            pattern = node.get("pattern")
            if isinstance(pattern, str):
                self._check_pattern((*path, "pattern"), pattern)
            patterns = node.get("patternProperties")
            if isinstance(patterns, dict):
                self.has_pattern_properties = self.has_pattern_properties or bool(patterns)
                for key in patterns:
                    self._check_pattern((*path, "patternProperties", key), key)
            if "unevaluatedProperties" in node:
                self.has_unevaluated_properties = True
            for child_path, child in _children(node, path):
                stack.append((child, child_path, base))

    def _check_pattern(self, path: Path, pattern: str) -> None:
        _, problem = compile_pattern(pattern)
        if problem:
            self.problems_.append(
                f"{json_path(path)}: {problem}; ordo matches patterns with RE2 "
                "(no backreferences or lookaround), rewrite it without them"
            )

    def _resolve(self) -> dict[Path, list[Path]]:
        """Resolve every reference; returns the in-place edges (from applicators and refs)."""
        edges: dict[Path, list[Path]] = {}
        for path, node in self.nodes.items():
            if isinstance(node, dict):
                edges[path] = [c for c, _ in _children(node, path, in_place_only=True)]
        for path, keyword, value, base in self.refs:
            where = json_path((*path, keyword))
            if keyword == "$recursiveRef" and value != "#":
                self.problems_.append(f"{where}: $recursiveRef must be '#'")
                continue
            target = base + value if value.startswith("#") else urljoin(base, value)
            uri, fragment = urldefrag(target)
            if uri not in self.resources:
                self.problems_.append(
                    f"{where}: {value[:200]!r} refers to another document; remote references "
                    "are refused (nothing is fetched): copy the definition under $defs and "
                    "refer to it as '#/$defs/<name>'"
                )
                continue
            resolved = self._fragment(self.resources[uri], uri, fragment)
            if resolved is None:
                self.problems_.append(
                    f"{where}: {value[:200]!r} does not resolve inside the schema; check the "
                    "spelling, or define it under $defs"
                )
                continue
            if resolved not in self.nodes:
                self.problems_.append(
                    f"{where}: {value[:200]!r} points at {json_path(resolved)}, which is not a "
                    "subschema; point it at a schema (e.g. under $defs)"
                )
                continue
            targets = self._rebinds(keyword, fragment, resolved)
            self.ref_targets[(path, keyword)] = targets
            edges.setdefault(path, []).extend(targets)
        return edges

    def _rebinds(self, keyword: str, fragment: str, resolved: Path) -> list[Path]:
        """What a reference may evaluate at run time: its static target and, for
        `$dynamicRef` / `$recursiveRef`, every subschema the dynamic scope may pick instead."""
        targets = [resolved]
        if keyword == "$dynamicRef":
            targets += self.dynamic_anchors.get(fragment, [])
        elif keyword == "$recursiveRef":
            targets += self.recursive_anchors
        return list(dict.fromkeys(targets))

    def _fragment(self, resource: Path, uri: str, fragment: str) -> Path | None:
        if not fragment:
            return resource
        if not fragment.startswith("/"):
            return self.anchors.get((uri, fragment))
        node: Any = self.root
        for part in resource:
            node = node[part]
        path: list[str | int] = list(resource)
        for raw in fragment[1:].split("/"):
            token = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
                path.append(token)
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
                path.append(int(token))
            else:
                return None
        return tuple(path)

    def _cycles(self, edges: dict[Path, list[Path]]) -> bool:
        """A loop of refs and in-place applicators recurses forever on any input."""
        state: dict[Path, int] = {}  # 1 = on the stack, 2 = done
        for start in edges:
            if state.get(start):
                continue
            stack: list[tuple[Path, Iterator[Path]]] = [(start, iter(edges.get(start, ())))]
            state[start] = 1
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    state[node] = 2
                    stack.pop()
                elif state.get(nxt) == 1:
                    self.problems_.append(
                        f"{json_path(nxt)}: a $ref loop that consumes no input (through "
                        f"{json_path(node)}) would recurse forever; break the loop"
                    )
                    return True
                elif not state.get(nxt):
                    state[nxt] = 1
                    stack.append((nxt, iter(edges.get(nxt, ()))))
        return False

    def _longest_chain(self, edges: dict[Path, list[Path]]) -> None:
        """The longest in-place chain (the graph has no cycle here), without recursion."""
        longest: dict[Path, int] = {}
        for start in edges:
            stack: list[tuple[Path, bool]] = [(start, False)]
            while stack:
                node, children_done = stack.pop()
                if children_done:
                    longest[node] = 1 + max((longest[c] for c in edges.get(node, ())), default=0)
                elif node not in longest:
                    stack.append((node, True))
                    stack.extend((c, False) for c in edges.get(node, ()) if c not in longest)
        if not longest:
            return
        start, length = max(longest.items(), key=lambda item: item[1])
        if length > MAX_REF_CHAIN:
            self.problems_.append(
                f"{json_path(start)}: a chain of {length} subschemas linked by $ref and in-place "
                f"applicators (more than {MAX_REF_CHAIN}) would recurse too deeply; shorten it"
            )


def _children(
    node: dict[str, Any], path: Path, *, in_place_only: bool = False
) -> Iterator[tuple[Path, Any]]:
    """The subschemas of a schema object, with their paths."""
    for key, value in node.items():
        if in_place_only and key not in _IN_PLACE and key not in _IN_PLACE_MAPS:
            continue
        if key in _MAP and isinstance(value, dict):
            for name, sub in value.items():
                if isinstance(sub, (dict, bool)):
                    yield (*path, key, name), sub
        elif key in _ARRAY and isinstance(value, list):
            for i, sub in enumerate(value):
                if isinstance(sub, (dict, bool)):
                    yield (*path, key, i), sub
        elif key in _SINGLE and isinstance(value, (dict, bool)):
            yield (*path, key), value


def replace_false(schema: dict[str, Any], replacement: Any, keep: frozenset[str]) -> None:
    """Put a copy of `replacement` wherever a subschema of `schema` is `false`, except as the
    value of a keyword in `keep`; in place, without recursion."""
    stack: list[dict[str, Any]] = [schema]
    while stack:
        node = stack.pop()
        for key, value in node.items():
            holders: list[tuple[Any, Any]] = []
            if key in _MAP and isinstance(value, dict):
                holders = list(value.items())
                container: Any = value
            elif key in _ARRAY and isinstance(value, list):
                holders = list(enumerate(value))
                container = value
            elif key in _SINGLE and isinstance(value, (dict, bool)):
                holders = [(key, value)]
                container = node
            for slot, sub in holders:
                if sub is False and key not in keep:
                    container[slot] = dict(replacement)
                elif isinstance(sub, dict):
                    stack.append(sub)


__all__ = ["MAX_REF_CHAIN", "Path", "Walk", "json_path", "replace_false"]
