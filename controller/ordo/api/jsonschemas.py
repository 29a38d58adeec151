"""JSON Schemas that users write (Tool `spec.inputSchema`, Task and Agent `spec.outputSchema`)
and that MCP servers list at run time: checked before use, and validated with a linear-time
regex engine.

A schema is accepted when it is
- a JSON object of at most `MAX_SCHEMA_CHARS` characters (canonical JSON),
  `MAX_SCHEMA_OBJECTS` objects and `MAX_SCHEMA_DEPTH` levels of nesting;
- valid against the metaschema of its declared draft (`$schema`; default 2020-12; drafts 4, 6,
  7, 2019-09 and 2020-12 are supported);
- self-contained: every `$ref` / `$dynamicRef` resolves inside the schema itself to a subschema
  (remote references are refused, nothing is ever fetched), and no chain of references and
  in-place applicators (`allOf`, `anyOf`, `oneOf`, `not`, `if`/`then`/`else`,
  `dependentSchemas`) loops back on itself without consuming input or is longer than
  `MAX_REF_CHAIN`;
- made of patterns (`pattern`, `patternProperties` keys) of at most `MAX_PATTERN_CHARS`
  characters that RE2 compiles. RE2 matches in time linear in the input; it has no
  backreferences or lookaround, so a pattern that needs them is refused.
- not combining `unevaluatedProperties` with `patternProperties` (jsonschema evaluates that
  combination with Python's backtracking `re`, so it is refused).

`format` is an annotation: it is not asserted, so `format: regex` never compiles input with a
backtracking engine.

`check_schema` lists the problems; `validator_for` returns a memoised validator that matches
patterns with RE2 and raises only `ordo.errors.InvalidSchema`; `user_schema` is the pydantic
field check of the api models (`ordo validate` reports its problems under the field).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urldefrag, urljoin

import jsonschema
import re2  # type: ignore[import-untyped]
import referencing
import referencing.jsonschema
from jsonschema.exceptions import ValidationError

if TYPE_CHECKING:
    from ..errors import InvalidSchema

MAX_SCHEMA_CHARS = 100_000
"""Largest schema, in characters of its canonical (sorted, compact) JSON."""

MAX_SCHEMA_OBJECTS = 1_000
"""Most JSON objects in one schema document. The metaschema check costs about 0.3 ms per
subschema, so this bounds the first (memoised) check of a schema to a fraction of a second."""

MAX_REF_CHAIN = 32
"""Longest chain of `$ref`s and in-place applicators (`allOf`, `not`, ...) that does not
consume input: each link is a level of recursion when the schema is evaluated."""

MAX_SCHEMA_DEPTH = 64
"""Deepest nesting of objects/arrays in a schema document."""

MAX_PATTERN_CHARS = 1_000
"""Longest `pattern` / `patternProperties` regex."""

MAX_PROBLEMS = 10
"""At most this many problems are listed for one schema."""

DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_DIALECTS: dict[str, type[Any]] = {
    "https://json-schema.org/draft/2020-12/schema": jsonschema.Draft202012Validator,
    "https://json-schema.org/draft/2019-09/schema": jsonschema.Draft201909Validator,
    "http://json-schema.org/draft-07/schema": jsonschema.Draft7Validator,
    "http://json-schema.org/draft-06/schema": jsonschema.Draft6Validator,
    "http://json-schema.org/draft-04/schema": jsonschema.Draft4Validator,
}
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


# --- RE2 -------------------------------------------------------------------------------------

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # RE2 would print the pattern on stderr


def _invalid_schema(message: str) -> InvalidSchema:
    # Imported here: ordo.errors imports ordo.api.task, so a module-level import would cycle.
    from ..errors import InvalidSchema

    return InvalidSchema(message)


@functools.lru_cache(maxsize=4096)
def _compile(pattern: str) -> tuple[Any, str | None]:
    """(the RE2 program, None), or (None, why RE2 cannot use the pattern)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return None, f"the pattern is longer than {MAX_PATTERN_CHARS} characters"
    try:
        return re2.compile(pattern, _RE2_OPTIONS), None
    except re2.error as exc:
        detail = exc.args[0] if exc.args else ""
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        return None, f"RE2 cannot compile the pattern ({str(detail)[:200]})"


def _search(pattern: str, text: str) -> bool:
    program, problem = _compile(pattern)
    if program is None:
        raise _invalid_schema(f"a pattern cannot be used: {problem}")
    return program.search(text) is not None


def _pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [
        k for k in instance if k not in properties and not any(_search(p, k) for p in patterns)
    ]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(e) for e in sorted(extras))
            listed = ", ".join(repr(p) for p in sorted(patterns))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {listed}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            joined = ", ".join(repr(e) for e in sorted(extras, key=str))
            yield ValidationError(
                f"Additional properties are not allowed ({joined} {verb} unexpected)"
            )


_RE2_CLASSES: dict[str, type[Any]] = {}


def _re2_class(dialect: str, base: type[Any]) -> type[Any]:
    """`base` with every keyword that matches a regex against input evaluated by RE2."""
    cls = _RE2_CLASSES.get(dialect)
    if cls is None:
        cls = jsonschema.validators.extend(
            base,
            {
                "pattern": _pattern,
                "patternProperties": _pattern_properties,
                "additionalProperties": _additional_properties,
            },
        )
        _RE2_CLASSES[dialect] = cls
    return cls


# --- checking --------------------------------------------------------------------------------


def _shape_problems(schema: Any) -> list[str]:
    """Type, depth and size, without recursion (a hostile document may nest 100,000 deep)."""
    if not isinstance(schema, dict):
        return [f"$: expected a JSON Schema object, got a {type(schema).__name__}"]
    problems: list[str] = []
    stack: list[tuple[Any, Path]] = [(schema, ())]
    count = 0
    objects = 0
    while stack:
        node, path = stack.pop()
        count += 1
        if len(path) >= MAX_SCHEMA_DEPTH:
            return [
                f"{json_path(path[:8])}...: the schema nests deeper than {MAX_SCHEMA_DEPTH} "
                "levels; flatten it (use $defs and $ref)"
            ]
        if count > MAX_SCHEMA_CHARS:  # every JSON value takes at least one character
            return [
                f"$: the schema is more than {MAX_SCHEMA_CHARS} characters of JSON; make it smaller"
            ]
        if isinstance(node, dict):
            objects += 1
            if objects > MAX_SCHEMA_OBJECTS:
                return [
                    f"$: the schema has more than {MAX_SCHEMA_OBJECTS} objects; make it smaller "
                    "(share repeated parts with $defs and $ref)"
                ]
            for key, value in node.items():
                if not isinstance(key, str):
                    problems.append(f"{json_path(path)}: keys must be strings (got {key!r})")
                    continue
                stack.append((value, (*path, key)))
        elif isinstance(node, list):
            stack.extend((v, (*path, i)) for i, v in enumerate(node))
        elif isinstance(node, float) and not math.isfinite(node):
            problems.append(f"{json_path(path)}: {node} is not a JSON number")
        elif node is not None and not isinstance(node, (str, int, float)):
            problems.append(
                f"{json_path(path)}: a {type(node).__name__} is not a JSON value (quote it)"
            )
        if len(problems) >= MAX_PROBLEMS:
            break
    return problems


def _canonical(schema: dict[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def check_schema(schema: Any) -> list[str]:
    """The problems of a user's JSON Schema, each naming the JSON path inside the schema and
    what to do; empty when it is fine. Pure, no network; memoised by canonical JSON."""
    problems = _shape_problems(schema)
    if problems:
        return problems
    text = _canonical(schema)
    if len(text) > MAX_SCHEMA_CHARS:
        return [
            f"$: the schema is {len(text)} characters of JSON, more than {MAX_SCHEMA_CHARS}; "
            "make it smaller"
        ]
    return list(_check_text(text))


def _dialect(schema: dict[str, Any]) -> tuple[str | None, type[Any] | None]:
    declared = schema.get("$schema", DEFAULT_DIALECT)
    if not isinstance(declared, str):
        return None, None
    key = declared.rstrip("#")
    return key, _DIALECTS.get(key)


@functools.lru_cache(maxsize=512)
def _check_text(text: str) -> tuple[str, ...]:
    schema = json.loads(text)
    dialect, cls = _dialect(schema)
    if cls is None or dialect is None:
        known = ", ".join(sorted(_DIALECTS))
        return (
            f"$.$schema: unknown or unsupported draft {schema.get('$schema')!r}; "
            f"use one of {known} (or omit it for 2020-12)",
        )
    meta = cls(cls.META_SCHEMA)  # no format checker: formats are annotations
    errors = sorted(meta.iter_errors(schema), key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        out = []
        for err in errors[:MAX_PROBLEMS]:
            best = jsonschema.exceptions.best_match([err]) or err
            out.append(
                f"{json_path(tuple(best.absolute_path))}: {best.message[:300]} "
                f"(not valid under {dialect}; see https://json-schema.org)"
            )
        return tuple(out)
    return tuple(_Walk(schema, dialect).problems()[:MAX_PROBLEMS])


class _Walk:
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
        _, problem = _compile(pattern)
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
            edges.setdefault(path, []).append(resolved)
        return edges

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


# --- validators ------------------------------------------------------------------------------


class SchemaValidator:
    """A checked schema's validator. `errors(instance)` lists the validation errors and raises
    only `InvalidSchema` (a schema fault surfacing at validation time)."""

    def __init__(self, schema: dict[str, Any], dialect: str, cls: type[Any]) -> None:
        self.schema = schema
        self.validator: Any = _re2_class(dialect, cls)(schema, registry=referencing.Registry())

    def errors(self, instance: Any) -> list[ValidationError]:
        from ..errors import InvalidSchema

        try:
            return list(self.validator.iter_errors(instance))
        except InvalidSchema:
            raise
        except (
            jsonschema.exceptions.SchemaError,
            jsonschema.exceptions.UnknownType,
            referencing.exceptions.Unresolvable,
            RecursionError,
            re2.error,
            TypeError,
            AttributeError,
        ) as exc:
            raise _invalid_schema(
                f"the schema cannot be evaluated ({type(exc).__name__})"
            ) from None

    def is_valid(self, instance: Any) -> bool:
        return not self.errors(instance)


def validator_for(schema: Any) -> SchemaValidator:
    """A memoised validator for `schema` (keyed by its canonical JSON) that matches patterns
    with RE2. Raises InvalidSchema, naming the first problems, when `check_schema` finds any."""
    problems = check_schema(schema)
    if problems:
        raise _invalid_schema("; ".join(problems))
    return _validator(_canonical(schema))


def user_schema(value: Any) -> Any:
    """Pydantic field check for a schema a user writes: ValueError naming the problems."""
    if value is not None:
        problems = check_schema(value)
        if problems:
            raise ValueError("not a usable JSON Schema: " + "; ".join(problems))
    return value


@functools.lru_cache(maxsize=256)
def _validator(text: str) -> SchemaValidator:
    schema = json.loads(text)
    dialect, cls = _dialect(schema)
    assert dialect is not None and cls is not None  # checked
    return SchemaValidator(schema, dialect, cls)


__all__ = [
    "DEFAULT_DIALECT",
    "MAX_PATTERN_CHARS",
    "MAX_REF_CHAIN",
    "MAX_SCHEMA_CHARS",
    "MAX_SCHEMA_DEPTH",
    "MAX_SCHEMA_OBJECTS",
    "SchemaValidator",
    "check_schema",
    "json_path",
    "user_schema",
    "validator_for",
]
