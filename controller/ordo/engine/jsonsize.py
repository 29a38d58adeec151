"""The size of a JSON value as a Task status carries it, measured at a bounded cost.

`json_size` is an upper bound of both forms a status value takes: the request ordo sends
(`json.dumps`: ASCII, `\\uXXXX` for each non-ASCII character, 12 bytes for one outside the
BMP, `", "` and `": "` separators) and the object kube-apiserver stores in etcd (compact UTF-8
JSON that escapes `<`, `>` and `&` as `\\u003c`: 6 bytes each). The walk stops as soon as the
size passes its limit, so it costs at most what `limit` bytes of the cheapest leaves cost,
whatever the value holds (a 1 MB answer of floats costs what 128 KiB of it does).
"""

from __future__ import annotations

from json.encoder import encode_basestring_ascii
from typing import Any

MAX_STRUCTURED_OUTPUT_BYTES = 131_072
"""Cap of `status.structuredOutput`, by `json_size`: a valid answer over it fails the run
`InvalidOutput` (a JSON value cannot be cut meaningfully)."""

_DIGITS_PER_BIT = 0.30103  # log10(2): an int of n bits has at most n * this + 1 digits


def _str_size(text: str) -> int:
    quoted = encode_basestring_ascii(text)
    return len(quoted) + 5 * (quoted.count("<") + quoted.count(">") + quoted.count("&"))


def _leaf_size(value: Any) -> int:
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if isinstance(value, int):  # no str(): a huge int would cost (or refuse) a conversion
        return int(value.bit_length() * _DIGITS_PER_BIT) + 2
    if isinstance(value, float):
        return len(float.__repr__(value))  # what json.dumps writes
    return _str_size(str(value))  # not JSON: counted as its text (pydantic dumps it so)


def json_size(value: Any, limit: int) -> int:
    """The size of `value` in bytes (see the module docstring), or `limit + 1` as soon as it
    is known to be larger than `limit`."""
    total = 0
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if total + len(item) + 2 > limit:  # every character costs at least a byte
                return limit + 1
            total += _str_size(item)
        elif isinstance(item, dict):
            total += 2 + 4 * len(item)  # braces, ": " and ", " per member
            if total > limit:
                return limit + 1
            for key, member in item.items():
                stack.append(key if isinstance(key, str) else str(key))
                stack.append(member)
        elif isinstance(item, list | tuple):
            total += 2 + 2 * len(item)  # brackets and ", " per element
            if total > limit:
                return limit + 1
            stack.extend(item)
        else:
            total += _leaf_size(item)
        if total > limit:
            return limit + 1
    return total
