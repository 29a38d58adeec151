"""RE2 for the regex keywords of user JSON Schemas (see `ordo.api.jsonschemas`).

`compile_pattern` compiles (memoised) a `pattern` / `patternProperties` regex with RE2, which
matches in time linear in the input and has no backreferences or lookaround; `re2_class` extends
a jsonschema validator class so that `pattern`, `patternProperties` and `additionalProperties`
match with RE2 instead of Python's backtracking `re`. A pattern that RE2 cannot use, met at
validation time, raises `ordo.errors.InvalidSchema` (built by `invalid_schema`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import jsonschema
import re2  # type: ignore[import-untyped]
from jsonschema.exceptions import ValidationError

from ..errors import InvalidSchema

MAX_PATTERN_CHARS = 1_000
"""Longest `pattern` / `patternProperties` regex."""

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # RE2 would print the pattern on stderr


def invalid_schema(message: str) -> InvalidSchema:
    return InvalidSchema(message)


@functools.lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> tuple[Any, str | None]:
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


_SURROGATES = {code: "\ufffd" for code in range(0xD800, 0xE000)}


def search(pattern: str, text: str) -> bool:
    """Whether RE2 finds `pattern` in `text`. A lone surrogate (not Unicode text, so RE2
    cannot encode it) is matched as U+FFFD REPLACEMENT CHARACTER."""
    program, problem = compile_pattern(pattern)
    if program is None:
        raise invalid_schema(f"a pattern cannot be used: {problem}")
    try:
        return program.search(text) is not None
    except UnicodeEncodeError:
        return program.search(text.translate(_SURROGATES)) is not None


def _pattern(validator: Any, patrn: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(
    validator: Any, patterns: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [
        k for k in instance if k not in properties and not any(search(p, k) for p in patterns)
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


def re2_class(dialect: str, base: type[Any]) -> type[Any]:
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


__all__ = ["MAX_PATTERN_CHARS", "compile_pattern", "invalid_schema", "re2_class"]
