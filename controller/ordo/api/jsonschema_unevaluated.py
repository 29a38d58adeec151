"""`unevaluatedProperties` and `unevaluatedItems` in linear time (see
`ordo.api.jsonschema_keywords`, which installs them). jsonschema collects the evaluated keys or
indexes in a list and tests membership per member (O(n²)); here the same evaluation, a faithful
copy of its `find_evaluated_*_by_schema` per draft, collects them into sets, spending fuel for
each subschema it visits and each member it tests. The validation results are jsonschema's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jsonschema.exceptions import ValidationError
from referencing.jsonschema import lookup_recursive_ref

from .jsonschema_fuel import REF, spend
from .jsonschema_re2 import search

__all__ = ["evaluated_indexes", "evaluated_keys", "unevaluated_items", "unevaluated_properties"]


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


def unevaluated_properties(legacy: bool) -> Any:
    """The `unevaluatedProperties` keyword function of a draft (`legacy`: 2019-09)."""

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


def unevaluated_items(legacy: bool) -> Any:
    """The `unevaluatedItems` keyword function of a draft (`legacy`: 2019-09)."""

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
