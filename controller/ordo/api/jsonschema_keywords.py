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
  indexes in a list and tests membership per member (O(n²)). The same evaluation (a faithful
  copy of its `find_evaluated_*_by_schema`, per draft) into sets, spending fuel for each
  subschema it visits and each member it tests.
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
from referencing.jsonschema import lookup_recursive_ref

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
from .jsonschema_re2 import re2_class, search

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


def _valid(errors: Iterator[ValidationError]) -> bool:
    return next(errors, None) is None


def _extras(extras: list[Any]) -> str:
    verb = "was" if len(extras) == 1 else "were"
    return f"{', '.join(repr(extra) for extra in extras)} {verb}"


def _resolved(validator: Any, keyword: str, ref: Any) -> tuple[Any, Any]:
    """(evolved validator, subschema) for a reference, as jsonschema's own walk resolves it."""
    spend(REF)
    if keyword == "$recursiveRef":
        resolved = lookup_recursive_ref(validator._resolver)
    else:
        resolved = validator._resolver.lookup(ref)
    return (
        validator.evolve(schema=resolved.contents, _resolver=resolved.resolver),
        resolved.contents,
    )


def evaluated_keys(validator: Any, instance: Any, schema: Any, legacy: bool) -> set[Any]:
    """jsonschema's `find_evaluated_property_keys_by_schema` (draft 2020-12; `legacy`: its
    draft 2019-09 variant), into a set."""
    if validator.is_type(schema, "boolean") or not isinstance(schema, dict):
        return set()
    spend(1)
    keys: set[Any] = set()
    for keyword in ("$ref", "$recursiveRef" if legacy else "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None or (legacy and keyword in schema):
            evolved, contents = _resolved(validator, keyword, ref)
            keys |= evaluated_keys(evolved, instance, contents, legacy)
    if legacy:
        for keyword in ("properties", "additionalProperties", "unevaluatedProperties"):
            if keyword in schema:
                value = schema[keyword]
                if validator.is_type(value, "boolean") and value:
                    keys.update(instance)
                elif validator.is_type(value, "object"):
                    spend(len(value))
                    keys.update(p for p in value if p in instance)
    else:
        properties = schema.get("properties")
        if isinstance(properties, dict):
            keys |= properties.keys() & instance.keys()
        for keyword in ("additionalProperties", "unevaluatedProperties"):
            subschema = schema.get(keyword)
            if subschema is None:
                continue
            spend(len(instance))
            if subschema is True:
                keys.update(instance)
            elif subschema is not False:
                keys.update(
                    k for k, v in instance.items() if _valid(validator.descend(v, subschema))
                )
    patterns = schema.get("patternProperties")
    if isinstance(patterns, dict) and patterns:
        spend(len(patterns) * len(instance))
        keys.update(k for k in instance if any(search(p, k) for p in patterns))
    dependent = schema.get("dependentSchemas")
    if isinstance(dependent, dict):
        for name, subschema in dependent.items():
            if name in instance:
                keys |= evaluated_keys(validator, instance, subschema, legacy)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, ()):
            if _valid(validator.descend(instance, subschema)):
                keys |= evaluated_keys(validator, instance, subschema, legacy)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys |= evaluated_keys(validator, instance, schema["if"], legacy)
            if "then" in schema:
                keys |= evaluated_keys(validator, instance, schema["then"], legacy)
        elif "else" in schema:
            keys |= evaluated_keys(validator, instance, schema["else"], legacy)
    return keys


def evaluated_indexes(validator: Any, instance: Any, schema: Any, legacy: bool) -> set[int]:
    """jsonschema's `find_evaluated_item_indexes_by_schema` (draft 2020-12; `legacy`: its
    draft 2019-09 variant), into a set."""
    if validator.is_type(schema, "boolean") or not isinstance(schema, dict):
        return set()
    spend(1)
    if not legacy and "items" in schema:
        return set(range(len(instance)))
    indexes: set[int] = set()
    for keyword in ("$ref", "$recursiveRef" if legacy else "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None or (legacy and keyword in schema):
            evolved, contents = _resolved(validator, keyword, ref)
            indexes |= evaluated_indexes(evolved, instance, contents, legacy)
    if legacy and "items" in schema:
        if "additionalItems" in schema or validator.is_type(schema["items"], "object"):
            return set(range(len(instance)))
        indexes.update(range(len(schema["items"])))
    if not legacy and "prefixItems" in schema:
        indexes.update(range(len(schema["prefixItems"])))
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            indexes |= evaluated_indexes(validator, instance, schema["if"], legacy)
            if "then" in schema:
                indexes |= evaluated_indexes(validator, instance, schema["then"], legacy)
        elif "else" in schema:
            indexes |= evaluated_indexes(validator, instance, schema["else"], legacy)
    for keyword in ("contains", "unevaluatedItems"):
        if keyword in schema:
            spend(len(instance))
            subschema = schema[keyword]
            if subschema is True:
                indexes.update(range(len(instance)))
            elif subschema is not False:
                check = validator.evolve(schema=subschema)
                indexes.update(k for k, v in enumerate(instance) if check.is_valid(v))
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, ()):
            if _valid(validator.descend(instance, subschema)):
                indexes |= evaluated_indexes(validator, instance, subschema, legacy)
    return indexes


def _unevaluated_properties(legacy: bool) -> Any:
    def unevaluated_properties(
        validator: Any, uneval: Any, instance: Any, schema: Any
    ) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "object"):
            return
        evaluated = evaluated_keys(validator, instance, schema, legacy)
        unevaluated = []
        for name in instance:
            if name in evaluated or uneval is True:
                continue
            if uneval is False:  # descend() would make one error quoting the member
                unevaluated.append(name)
                continue
            for _ in validator.descend(instance[name], uneval, path=name, schema_path=name):
                unevaluated.append(name)
        if unevaluated:
            if uneval is False:
                extras = _extras(sorted(unevaluated, key=str))
                yield ValidationError(
                    f"Unevaluated properties are not allowed ({extras} unexpected)"
                )
            else:
                yield ValidationError(
                    "Unevaluated properties are not valid under the given schema "
                    f"({_extras(unevaluated)} unevaluated and invalid)"
                )

    return unevaluated_properties


def _unevaluated_items(legacy: bool) -> Any:
    def unevaluated_items(
        validator: Any, uneval: Any, instance: Any, schema: Any
    ) -> Iterator[ValidationError]:
        if not validator.is_type(instance, "array"):
            return
        evaluated = evaluated_indexes(validator, instance, schema, legacy)
        unevaluated = [item for index, item in enumerate(instance) if index not in evaluated]
        if unevaluated:
            yield ValidationError(
                f"Unevaluated items are not allowed ({_extras(unevaluated)} unexpected)"
            )

    return unevaluated_items


def _replacements(legacy_unevaluated: bool) -> dict[str, Any]:
    return {
        "uniqueItems": unique_items,
        "enum": enum,
        "const": const,
        "multipleOf": multiple_of,
        "unevaluatedProperties": _unevaluated_properties(legacy_unevaluated),
        "unevaluatedItems": _unevaluated_items(legacy_unevaluated),
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
