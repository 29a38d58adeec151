"""Keyword functions that replace jsonschema's where its own cost more than linear time or
raise (see `ordo.api.jsonschemas`); the validation results are jsonschema's.

- `uniqueItems`, `enum`, `const`: jsonschema compares pairwise with `equal` (O(n²) for
  `uniqueItems` over objects, a scan of the whole `enum` per value). Here each value gets a
  hashable canonical key (`json_key`) with JSON Schema's equality: `1 == 1.0`, `true != 1`,
  object key order irrelevant; one set look-up per value.
- `multipleOf`: jsonschema divides as floats, so a 320-digit integer overflows
  (`OverflowError`). Here the division is exact (`fractions.Fraction` of the decimal value as
  written, so `0.3` is a multiple of `0.1`); NaN and infinities are multiples of nothing.
- `unevaluatedProperties`, `unevaluatedItems`: jsonschema collects the evaluated keys or
  indexes in a list and tests membership per member (O(n²)); ours, in
  `ordo.api.jsonschema_unevaluated`, collect them into sets, spending fuel.
- `$ordoFalse`: the `false` schema, as a keyword. `ordo.api.jsonschemas` puts
  `{"$ordoFalse": true}` where a subschema is `false`, so the error (which quotes the whole
  value) is made by a keyword and paid for with fuel like every other error.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterator
from fractions import Fraction
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from .jsonschema_fuel import (
    INT_BITS_PER_UNIT,
    MESSAGE_CHARS_PER_UNIT,
    MULTIPLE_OF,
    REF,
    REF_KEYWORDS,
    TABLE_KEYWORDS,
    VALUE_KEYWORDS,
    current,
    fueled,
    fueled_evolve,
    spend,
    value_weight,
)
from .jsonschema_re2 import re2_class
from .jsonschema_unevaluated import unevaluated_items, unevaluated_properties

FALSE_KEYWORD = "$ordoFalse"


# --- canonical keys --------------------------------------------------------------------------


class _TooBig(Exception):
    pass


def json_key(value: Any, limit: int | None = None) -> Hashable | None:
    """A hashable key equal for values JSON Schema calls equal; None when `value` has more
    than `limit` JSON values (it cannot equal anything of that size). Spends one unit of fuel
    per value visited. Recursive, but on a value whose depth its parser capped."""
    counter = [0]
    try:
        key = _key(value, counter, limit)
    except _TooBig:
        key = None
    spend(counter[0])
    return key


def _key(value: Any, counter: list[int], limit: int | None) -> Hashable:
    counter[0] += 1
    if limit is not None and counter[0] > limit:
        raise _TooBig
    kind = type(value)
    if kind is str:
        return str(value)
    if kind is bool:
        return ("b", value)
    if kind is int or kind is float:
        if kind is int:
            counter[0] += value.bit_length() // INT_BITS_PER_UNIT  # hashing is linear in bits
        return ("n", value)  # 1 == 1.0 and hash(1) == hash(1.0): one key
    if value is None:
        return ("z",)
    if kind is list:
        return ("a", tuple(_key(v, counter, limit) for v in value))
    if kind is dict:
        return ("o", frozenset((k, _key(v, counter, limit)) for k, v in value.items()))
    return ("x", id(value))  # not JSON: equal only to itself


def _is_container(value: Any) -> bool:
    return type(value) is list or type(value) is dict


class Table:
    """An `enum` as sets of keys: scalars looked up directly, arrays and objects only when the
    value is no larger than the largest of them."""

    __slots__ = ("containers", "largest", "scalars")

    def __init__(self, values: Any) -> None:
        self.scalars: set[Hashable] = set()
        self.containers: set[Hashable] = set()
        self.largest = 0
        for value in values if isinstance(values, list) else ():
            if _is_container(value):
                counter = [0]
                self.containers.add(_key(value, counter, None))
                self.largest = max(self.largest, counter[0])
            else:
                self.scalars.add(_key(value, [0], None))

    def __contains__(self, instance: Any) -> bool:
        """Paid for up front: the keyword's weight is 1 + `largest` (`weight`)."""
        if not _is_container(instance):
            return _key(instance, [0], None) in self.scalars
        if not self.containers:
            return False
        try:
            key = _key(instance, [0], self.largest)
        except _TooBig:
            return False
        return key in self.containers

    @property
    def weight(self) -> int:
        """Units one look-up costs: 1, plus the size of the largest array or object entry."""
        return 1 + self.largest


def table(values: Any, *, single: bool = False) -> Table:
    """The Table of an `enum` list, or (`single`) of a `const` value, memoised in the running
    validator's budget (so it lives exactly as long as that validator; keyed by identity:
    schema documents are never mutated once a validator holds them)."""
    budget = current()
    key = ("const" if single else "enum", id(values))
    if budget is not None:
        entry = budget.tables.get(key)
        if entry is not None and entry[0] is values:
            return entry[1]  # type: ignore[no-any-return]
    built = Table([values] if single else values)
    if budget is not None:
        budget.tables[key] = (values, built)
    return built


def keyword_weight(keyword: str, value: Any) -> int:
    """What one application of `keyword` with `value` spends up front, before its loops over
    the instance (the same rule as `ordo.api.jsonschema_fuel`; `enum`/`const` as Tables)."""
    if keyword == "enum":
        return Table(value).weight
    if keyword == "const":
        return Table([value]).weight
    if keyword in TABLE_KEYWORDS:
        return 1 + value_weight(value)
    if keyword in VALUE_KEYWORDS and isinstance(value, (list, dict)):
        return 1 + len(value)
    if keyword == "multipleOf":
        return MULTIPLE_OF  # plus the bits of a big integer, counted as values (value_count)
    if keyword in REF_KEYWORDS:
        return REF
    return 1


QUOTING_KEYWORDS = frozenset({"enum", "const", "not", "oneOf", "pattern"})
"""Keywords whose error message quotes their own value (a cost the size of the schema)."""


def message_weight(keyword: str, value: Any) -> int:
    """The units the error of `keyword` may spend quoting its value (`repr`, about 5/4 of the
    JSON), beyond the per-error units that the instance's size pays for (`FUEL_FACTOR`)."""
    if keyword not in QUOTING_KEYWORDS:
        return 0
    return len(json.dumps(value)) * 5 // 4 // MESSAGE_CHARS_PER_UNIT


def weights(schema: Any) -> dict[int, int]:
    """id(value) -> `keyword_weight` for every `enum`, `const`, `dependentRequired` and
    `dependencies` in a schema document (the fuel's table for its validator)."""
    out: dict[int, int] = {}
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for keyword, value in node.items():
                if keyword in TABLE_KEYWORDS:
                    out[id(value)] = keyword_weight(keyword, value)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


# --- keywords --------------------------------------------------------------------------------


def unique_items(validator: Any, ui: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if ui and validator.is_type(instance, "array"):
        seen: set[Hashable] = set()
        for item in instance:
            key = json_key(item)
            if key in seen:
                yield ValidationError(f"{instance!r} has non-unique elements")
                return
            seen.add(key)


def enum(validator: Any, enums: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if instance not in table(enums):
        yield ValidationError(f"{instance!r} is not one of {enums!r}")


def const(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if instance not in table(value, single=True):
        yield ValidationError(f"{value!r} was expected")


def _fraction(number: Any) -> Fraction:
    return Fraction(number) if type(number) is int else Fraction(repr(number))


def is_multiple(instance: Any, divisor: Any) -> bool:
    """Exactly whether `instance / divisor` is an integer; never raises."""
    try:
        if type(instance) is int and type(divisor) is int:
            return instance % divisor == 0
        return (_fraction(instance) / _fraction(divisor)).denominator == 1
    except (ArithmeticError, ValueError, TypeError):
        return False  # NaN, an infinity, a zero divisor


def multiple_of(
    validator: Any, divisor: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "number") and not is_multiple(instance, divisor):
        yield ValidationError(f"{instance!r} is not a multiple of {divisor}")


def false_schema(
    validator: Any, value: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if value is True:
        yield ValidationError(
            f"False schema does not allow {instance!r}", validator=None, validator_value=None
        )


def _replacements(legacy_unevaluated: bool) -> dict[str, Any]:
    return {
        "uniqueItems": unique_items,
        "enum": enum,
        "const": const,
        "multipleOf": multiple_of,
        "unevaluatedProperties": unevaluated_properties(legacy_unevaluated),
        "unevaluatedItems": unevaluated_items(legacy_unevaluated),
    }


_CLASSES: dict[str, type[Any]] = {}


def validator_class(dialect: str, base: type[Any]) -> type[Any]:
    """`base` with RE2 for regexes (`re2_class`), the replacements above for the keywords
    `base` has, `$ordoFalse`, and every keyword function `fueled`."""
    cls = _CLASSES.get(dialect)
    if cls is None:
        with_re2 = re2_class(dialect, base)
        replaced = _replacements("2019-09" in dialect)
        functions = dict(with_re2.VALIDATORS)
        functions.update({k: f for k, f in replaced.items() if k in functions})
        functions[FALSE_KEYWORD] = false_schema
        cls = jsonschema.validators.extend(
            with_re2, {k: fueled(k, f) for k, f in functions.items()}
        )
        cls.evolve = fueled_evolve(cls.evolve)  # our own class: every subschema evaluated pays
        _CLASSES[dialect] = cls
    return cls


__all__ = [
    "FALSE_KEYWORD",
    "Table",
    "is_multiple",
    "json_key",
    "keyword_weight",
    "message_weight",
    "table",
    "validator_class",
    "weights",
]
