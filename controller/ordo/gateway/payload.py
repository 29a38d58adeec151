"""A delivery's body as a Task's `spec.input` (docs/triggers.md#webhooks): read with a size
cap, parsed as JSON with a depth cap, then the whole document or the chosen JSON Pointers
(RFC 6901). The body is untrusted: a failure names only what kind of failure it is."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

Refusal = Literal["too_large", "invalid"]


class PayloadRefused(Exception):
    """The body is over a cap (`too_large`, 413) or does not map (`invalid`, 400)."""

    def __init__(self, outcome: Refusal) -> None:
        super().__init__(outcome)
        self.outcome: Refusal = outcome


async def read_capped(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """The body, or PayloadRefused("too_large") as soon as more than `limit` bytes arrived
    (nothing more is read)."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise PayloadRefused("too_large")
    return bytes(body)


def depth(document: Any) -> int:
    """How deeply objects and arrays nest in `document` (a scalar: 0), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        deepest = max(deepest, level + 1)
        stack.extend((child, level + 1) for child in children)
    return deepest


def parse(body: bytes, max_depth: int) -> Any:
    """The JSON document of `body`; PayloadRefused: not JSON (`invalid`), nested deeper than
    `max_depth` (`too_large`)."""
    try:
        document = json.loads(body)
    except RecursionError:  # deeper than the interpreter's own limit
        raise PayloadRefused("too_large") from None
    except ValueError:  # includes UnicodeDecodeError
        raise PayloadRefused("invalid") from None
    if depth(document) > max_depth:
        raise PayloadRefused("too_large")
    return document


def resolve(document: Any, pointer: str) -> Any:
    """The value `pointer` (RFC 6901) names in `document`; PayloadRefused("invalid") when it
    names nothing."""
    if pointer == "":
        return document
    value = document
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and token in value:
            value = value[token]
        elif (
            isinstance(value, list)
            and token.isascii()
            and token.isdigit()
            and (token == "0" or not token.startswith("0"))
            and int(token) < len(value)
        ):
            value = value[int(token)]
        else:
            raise PayloadRefused("invalid")
    return value


def task_input(document: Any, fields: Mapping[str, str] | None) -> str | dict[str, Any]:
    """The Task's input: an object of the chosen fields, else the whole document (a document
    that is not an object becomes its JSON text: a Task's input is a string or an object)."""
    if fields is not None:
        return {name: resolve(document, pointer) for name, pointer in fields.items()}
    if isinstance(document, dict):
        return document
    return json.dumps(document)
