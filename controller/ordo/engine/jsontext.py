"""Bounded, linear-time JSON parsing for untrusted text (model answers, tool-call arguments,
tool results).

`json.loads` is linear in the size of its input but recursive in its nesting: a 100,000-deep
`[[[[...` raises `RecursionError` (or worse, exhausts the C stack in other parsers). So before
`json.loads` sees a byte, `bounded_json_loads` checks the size cap and then pre-scans the text
once, counting bracket depth outside string literals, and refuses anything deeper than the cap.
After parsing it refuses strings that hold lone surrogates (`"\\ud800"`), which are not Unicode
text and break every encoder downstream.

Errors, and nothing else:
- `UntrustedInputTooLarge` (ordo.errors) when the text exceeds `max_chars` or nests deeper than
  `max_depth`;
- `json.JSONDecodeError` (a ValueError) when the text is not strict JSON: syntax errors,
  `NaN`/`Infinity`, integers too long to convert, lone surrogates, undecodable bytes.
Messages carry positions and caps, never the text itself.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import UntrustedInputTooLarge

MAX_JSON_CHARS = 1_000_000
"""Default cap on the length (in characters) of one JSON document from a model or a tool."""

MAX_JSON_DEPTH = 64
"""Default cap on the nesting depth of arrays/objects in one JSON document (`{}` is depth 1)."""

_OPEN = frozenset("[{")
_CLOSE = frozenset("]}")


def json_depth(text: str, *, limit: int | None = None) -> int:
    """The deepest array/object nesting in `text`, counting brackets outside string literals.

    One pass; string literals are skipped with `str.find`, so the cost is linear in
    `len(text)` whatever the content. Unbalanced text is fine (the parser reports it later).
    With `limit`, stops and returns `limit + 1` as soon as the depth exceeds it.
    """
    depth = 0
    deepest = 0
    i = 0
    n = len(text)
    find = text.find
    while i < n:
        ch = text[i]
        if ch == '"':
            # Skip to the closing quote: a quote preceded by an even number of backslashes.
            j = i + 1
            while True:
                q = find('"', j)
                if q < 0:
                    return deepest  # unterminated string: the parser will say so
                k = q - 1
                while k > i and text[k] == "\\":
                    k -= 1
                if (q - 1 - k) % 2 == 0:
                    break
                j = q + 1
            i = q + 1
            continue
        if ch in _OPEN:
            depth += 1
            if depth > deepest:
                deepest = depth
                if limit is not None and deepest > limit:
                    return deepest
        elif ch in _CLOSE:
            depth -= 1
        i += 1
    return deepest


def value_depth(value: Any, *, limit: int | None = None) -> int:
    """The nesting depth of an already-parsed JSON value (`{}` and `[]` are depth 1), without
    recursion. With `limit`, stops as soon as the depth exceeds it and returns `limit + 1`.
    For values that did not come through `bounded_json_loads` (e.g. an SDK's parsed object)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if limit is not None and deepest > limit:
                return limit + 1
        stack.extend((child, depth) for child in children)
    return deepest


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _has_lone_surrogate(value: Any) -> bool:
    """True if any string (key or value) in the parsed document is not encodable Unicode."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def bounded_json_loads(
    text: str | bytes,
    *,
    max_chars: int = MAX_JSON_CHARS,
    max_depth: int = MAX_JSON_DEPTH,
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
    # the cap, the scan cannot find more (counting is one pass in C; the scan is Python).
    shallow = text.count("[") + text.count("{") <= max_depth
    if not shallow and json_depth(text, limit=max_depth) > max_depth:
        raise UntrustedInputTooLarge(f"the JSON text nests deeper than {max_depth} levels")
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
    if _has_lone_surrogate(value):
        raise json.JSONDecodeError("the JSON text contains a lone surrogate escape", text, 0)
    return value
