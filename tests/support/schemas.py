"""Hypothesis strategies for hostile JSON Schemas and the values validated against them.

`schemas()` draws schema documents built from the constructs whose evaluation cost is not
linear, or that raised before issue 23: branching applicators (`anyOf`, `oneOf`, `allOf`,
`not`, `if`/`then`/`else`, `dependentSchemas`), references (`$ref` to `$defs` and to the root,
so schemas recurse), `unevaluatedProperties` / `unevaluatedItems` over them, `uniqueItems`,
`enum` / `const` with values JSON Schema calls equal (`1`, `1.0`) or not (`true`, `1`),
`multipleOf` with huge and tiny divisors, big numbers in `minimum` / `maximum`, `false`
subschemas and RE2-safe patterns. `instances()` draws values with huge integers, extreme
floats, duplicates (for `uniqueItems`), lone surrogates, and now and then a long array.
"""

from __future__ import annotations

import functools
from typing import Any

from hypothesis import strategies as st

KEYS = ["a", "b", "ab", "x", "\ud800"]
PATTERNS = ["^a", "b$", "a+", "^[0-9]{1,3}$", "."]
BIG = st.sampled_from([320, 400, 30]).map(lambda n: 10**n)  # short reprs in statistics
NUMBERS = st.one_of(
    st.integers(-3, 3),
    BIG,
    BIG.map(lambda n: -n - 1),
    st.sampled_from([2**64 + 1, 0.5, 1.0, -0.0, 1e308, 5e-324, 19.99, 0.3, 1.5]),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
)
STRINGS = st.one_of(
    st.sampled_from(["", "a", "ab", "b", "\ud800", "12"]),
    st.sampled_from([2_000, 20_000]).map(lambda n: "a" * n),
    st.text(max_size=8),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, STRINGS)
SMALL = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3),
    st.dictionaries(st.sampled_from(KEYS), SCALARS, max_size=3),
)
"""Values for `enum` / `const`: cheap to draw."""


def json_values(max_leaves: int = 12) -> st.SearchStrategy[Any]:
    return st.recursive(
        SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=5),
            st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
        ),
        max_leaves=max_leaves,
    )


REFS = st.sampled_from([{"$ref": "#"}, {"$ref": "#/$defs/d0"}, {"$ref": "#/$defs/d1"}])

DICT_LEAVES = st.one_of(
    st.sampled_from(
        [
            {},
            {"type": "integer"},
            {"type": ["string", "null"]},
            {"type": "object"},
            {"type": "array"},
            {"uniqueItems": True},
            {"minItems": 1},
            {"maxItems": 3},
            {"minLength": 1},
            {"required": ["a"]},
            {"minProperties": 1},
        ]
    ),
    st.builds(lambda p: {"pattern": p}, st.sampled_from(PATTERNS)),
    st.builds(
        lambda d: {"multipleOf": d},
        st.one_of(st.sampled_from([0.5, 0.1, 0.01, 2, 3, 7.0, 1e-308]), BIG),
    ),
    st.builds(lambda n: {"minimum": n}, NUMBERS),
    st.builds(lambda n: {"maximum": n}, NUMBERS),
    st.builds(lambda e: {"enum": e}, st.lists(SMALL, min_size=1, max_size=5)),
    st.builds(lambda c: {"const": c}, SMALL),
    REFS,
)
LEAVES = st.one_of(st.booleans(), DICT_LEAVES)


SINGLE = (
    "not",
    "additionalProperties",
    "propertyNames",
    "items",
    "contains",
    "unevaluatedProperties",
    "unevaluatedItems",
)
LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
KINDS = (
    *SINGLE,
    *LISTS,
    "if",
    "properties",
    "patternProperties",
    "dependentSchemas",
    *("repeat", "repeat", "repeat", "anyOf", "oneOf", "unevaluatedProperties", "items"),
)
"""Weighted towards what multiplies: repeated branches, unevaluated*, recursion."""


@functools.cache
def _parts(depth: int) -> tuple[st.SearchStrategy[Any], ...]:
    """The strategies one level below `depth`, built once (Hypothesis validates every new
    strategy object, which would dominate the drawing time)."""
    below = subschemas(depth - 1)
    return (
        below,
        st.lists(below, min_size=1, max_size=3),
        st.dictionaries(st.sampled_from(KEYS), below, max_size=3),
    )


_WIDTH = st.integers(2, 10)
_COUNT = st.integers(1, 3)
_CHANCE = st.integers(0, 4)
_KIND = st.sampled_from(KINDS)
_PATTERN = st.sampled_from(PATTERNS)


@functools.cache
def subschemas(depth: int = 3) -> st.SearchStrategy[Any]:
    """A subschema: a leaf, or one to three applicator keywords over subschemas one level
    shallower (explicit depth: cheaper to draw than `st.recursive`)."""
    if depth <= 0:
        return LEAVES
    return st.one_of(LEAVES, _applicators(depth))


@st.composite
def _applicators(draw: st.DrawFn, depth: int) -> dict[str, Any]:
    below, lists, named = _parts(depth)
    schema: dict[str, Any] = {}
    for _ in range(draw(_COUNT)):
        kind = draw(_KIND)
        if kind in SINGLE:
            schema[kind] = draw(below)
        elif kind in LISTS:
            schema[kind] = draw(lists)
        elif kind == "if":
            schema.update({"if": draw(below), "then": draw(below), "else": draw(below)})
        elif kind == "properties":
            schema[kind] = draw(named)
        elif kind == "patternProperties":
            schema[kind] = {draw(_PATTERN): draw(below)}
        elif kind == "repeat":  # the same branch many times: nested, it multiplies
            schema["anyOf"] = [draw(below)] * draw(_WIDTH)
        else:
            schema[kind] = {"a": draw(below)}
        if draw(_CHANCE) == 0:
            schema.update(draw(DICT_LEAVES))
    return schema


@st.composite
def random_schemas(draw: st.DrawFn, depth: int = 3) -> dict[str, Any]:
    """A schema document: a root (an object, so it may carry $defs) and two definitions."""
    root = draw(subschemas(depth))
    if not isinstance(root, dict) or "$ref" in root:
        root = {"allOf": [root]}
    defs = {"d0": draw(subschemas(depth - 1)), "d1": draw(LEAVES)}
    return {**root, "$defs": defs}


@st.composite
def multiplying_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """The shapes whose cost multiplies, at sizes on both sides of the bound: nested branches
    (shared through $defs, with or without unevaluatedProperties), and recursion that
    evaluates the same member through several branches."""
    width = draw(st.integers(1, 10))
    depth = draw(st.integers(1, 6))
    keyword = draw(st.sampled_from(["anyOf", "oneOf", "allOf"]))
    leaf = draw(DICT_LEAVES.filter(lambda leaf: "$ref" not in leaf))
    unevaluated = draw(st.booleans())
    if draw(st.booleans()):
        defs: dict[str, Any] = {f"l{depth}": leaf}
        for level in range(depth - 1, -1, -1):
            node: dict[str, Any] = {keyword: [{"$ref": f"#/$defs/l{level + 1}"}] * width}
            if unevaluated:
                node["unevaluatedProperties"] = False
            defs[f"l{level}"] = node
        return {"$defs": defs, "$ref": "#/$defs/l0"}
    through = draw(st.sampled_from(["items", "additionalProperties", "contains"]))
    branches = [{through: {"$ref": "#"}}] * width
    return {keyword: [*branches, leaf], "uniqueItems": draw(st.booleans())}


def schemas(depth: int = 3) -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(random_schemas(depth), random_schemas(depth), multiplying_schemas())


@st.composite
def long_arrays(draw: st.DrawFn) -> list[Any]:
    """A long array of small objects or numbers, with or without a duplicate."""
    count = draw(st.integers(500, 5_000))
    objects = draw(st.booleans())
    items: list[Any] = [{"id": n} for n in range(count)] if objects else list(range(count))
    if draw(st.booleans()):
        items.append(items[draw(st.integers(0, count - 1))])
    return items


def instances() -> st.SearchStrategy[Any]:
    return st.one_of(
        json_values(),
        json_values(),
        json_values(),
        long_arrays(),
        st.builds(lambda items: {"a": items}, long_arrays()),
    )


__all__ = [
    "instances",
    "json_values",
    "long_arrays",
    "multiplying_schemas",
    "random_schemas",
    "schemas",
    "subschemas",
]
