"""Bounded, linear-time JSON parsing for untrusted text (model answers, tool-call arguments,
tool results).

`json.loads` is linear in the size of its input but recursive in its nesting: a 100,000-deep
`[[[[...` raises `RecursionError` (or worse, exhausts the C stack in other parsers). So before
`json.loads` sees a byte, `bounded_json_loads` checks the size cap and the number of arrays and
objects (what parsing costs most), then pre-scans the text once, counting bracket depth outside
string literals, and refuses anything deeper than the cap. After parsing it refuses strings
that hold lone surrogates (`"\\ud800"`), which are not Unicode text and break every encoder
downstream. Every step is C but for one Python step per bracket: at the caps (1,000,000
characters, 100,000 containers) the worst document found costs ~60 ms (docs/security.md).

Errors, and nothing else:
- `UntrustedInputTooLarge` (ordo.errors) when the text exceeds `max_chars`, holds more than
  `max_containers` arrays and objects, or nests deeper than `max_depth`;
- `json.JSONDecodeError` (a ValueError) when the text is not strict JSON: syntax errors,
  `NaN`/`Infinity`, integers too long to convert, lone surrogates, undecodable bytes.
Messages carry positions and caps, never the text itself.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

from ..errors import UntrustedInputTooLarge

MAX_JSON_CHARS = 1_000_000
"""Default cap on the length (in characters) of one JSON document from a model or a tool."""

MAX_JSON_DEPTH = 64
"""Default cap on the nesting depth of arrays/objects in one JSON document (`{}` is depth 1)."""

MAX_JSON_CONTAINERS = 100_000
"""Default cap on the arrays and objects of one JSON document (its `[` and `{` outside string
literals, counted before parsing)."""

_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+"?', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")
_DELTA = {"[": 1, "{": 1, "]": -1, "}": -1}
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def json_depth(text: str, *, limit: int | None = None) -> int:
    """The deepest array/object nesting in `text`, counting brackets outside string literals.

    Linear in `len(text)` and in C but for one step per bracket: string literals are removed
    by a regex with possessive quantifiers (no backtracking; an unterminated one runs to the
    end), then the running depth is accumulated over the brackets left. Unbalanced text is
    fine (the parser reports it later). `limit` is accepted for compatibility: the result is
    exact either way."""
    del limit
    return _depth(_outside_strings(text))


def _outside_strings(text: str) -> str:
    """`text` without its string literals (one regex pass in C)."""
    return _STRING.sub("", text) if '"' in text else text


def _depth(bare: str) -> int:
    return max(0, max(accumulate(map(_DELTA.__getitem__, _BRACKET.findall(bare))), default=0))


def value_depth(value: Any, *, limit: int | None = None) -> int:
    """The nesting depth of an already-parsed JSON value (`{}` and `[]` are depth 1), without
    recursion. With `limit`, stops as soon as the depth exceeds it and returns `limit + 1`.
    For values that did not come through `bounded_json_loads` (e.g. an SDK's parsed object).
    Only containers are stacked: a leaf costs one type check."""
    if not isinstance(value, dict | list):
        return 0
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > deepest:
            deepest = depth
            if limit is not None and deepest > limit:
                return limit + 1
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _has_lone_surrogate(text: str, value: Any) -> bool:
    """True if any string (key or value) in `value`, parsed from `text`, is not encodable
    Unicode. Only a `\\uD800`-`\\uDFFF` escape can make one (a raw lone surrogate in the
    text was refused before parsing), so without such an escape nothing is walked; with one,
    the value is serialised once (in C) and encoded."""
    if _SURROGATE_ESCAPE.search(text) is None:
        return False
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def bounded_json_loads(
    text: str | bytes,
    *,
    max_chars: int = MAX_JSON_CHARS,
    max_depth: int = MAX_JSON_DEPTH,
    max_containers: int = MAX_JSON_CONTAINERS,
) -> Any:
    """`json.loads` for untrusted text, in time linear in its length and with bounded
    recursion. See the module docstring for the errors it raises (and only those)."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > 4 * max_chars:
            raise UntrustedInputTooLarge(f"the JSON text is longer than {max_chars} characters")
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise json.JSONDecodeError("the JSON text is not valid UTF-8", "", exc.start) from None
    if len(text) > max_chars:
        raise UntrustedInputTooLarge(f"the JSON text is longer than {max_chars} characters")
    # Depth is at most the number of opening brackets (strings included): when that is within
    # the cap, nothing else needs looking at. Otherwise the brackets outside strings give the
    # depth and the number of containers (what parsing costs most, ~350 ns each in C).
    if text.count("[") + text.count("{") > max_depth:
        bare = _outside_strings(text)
        if _depth(bare) > max_depth:
            raise UntrustedInputTooLarge(f"the JSON text nests deeper than {max_depth} levels")
        if bare.count("[") + bare.count("{") > max_containers:
            raise UntrustedInputTooLarge(
                f"the JSON text holds more than {max_containers} arrays and objects"
            )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        # A raw lone surrogate in the text itself: not Unicode, so not JSON.
        raise json.JSONDecodeError(
            "the JSON text contains a lone surrogate", text, exc.start
        ) from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:
        # NaN/Infinity, integers beyond sys.get_int_max_str_digits(); RecursionError cannot
        # happen below the depth cap but is mapped rather than leaked if it ever does.
        reason = str(exc) if isinstance(exc, ValueError) and "is not JSON" in str(exc) else None
        raise json.JSONDecodeError(
            reason or "the JSON text holds a value that cannot be converted", text, 0
        ) from None
    if _has_lone_surrogate(text, value):
        raise json.JSONDecodeError("the JSON text contains a lone surrogate escape", text, 0)
    return value
