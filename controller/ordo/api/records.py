"""Records the engine keeps and the status shows, one type each (issue 24 §4).

A run's records (`Usage`, `ToolCallRecord`, `GuardrailRecord`) are frozen dataclasses: the
engine builds and adds them on every step without validation. The same classes are the types
of the TaskStatus fields that show them: `status_record` gives such a class a pydantic schema
taken from an `OrdoModel` of its status fields (the CRD's schema, camelCase or snake_case
keys, unknown keys refused, each constraint checked, also on an instance), and serializes an
instance as that model would: camelCase with `by_alias`, without None under `exclude_none`,
and under `exclude_unset` the keys a record read from a mapping had (its `_given`, a field of every such record; a record the
engine built has every field set, as runtime/status.py always set them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import (
    GetCoreSchemaHandler,
    PlainSerializer,
    SerializationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)

from .base import OrdoModel

R = TypeVar("R")


def status_record(
    handler: GetCoreSchemaHandler,
    record: type[R],
    fields: type[OrdoModel],
    build: Callable[[Any], R],
    shown: Callable[[R], dict[str, Any]],
) -> Any:
    """The pydantic core schema (`__get_pydantic_core_schema__`) of `record`: validated as
    `fields` (then made a record by `build`), serialized as `shown` (its status fields,
    camelCase, None where unset)."""
    aliases = {name: info.alias or name for name, info in fields.model_fields.items()}
    names = {alias: name for name, alias in aliases.items()}

    def validate(value: Any, inner: ValidatorFunctionWrapHandler) -> R:
        if isinstance(value, record):
            inner(shown(value))
            return value
        fields_model = inner(value)
        built = build(fields_model)
        given = frozenset(aliases[name] for name in fields_model.model_fields_set)
        object.__setattr__(built, "_given", given)
        return built

    def serialize(value: R, info: SerializationInfo) -> dict[str, Any]:
        out = shown(value)
        given: frozenset[str] | None = getattr(value, "_given", None)
        if info.exclude_unset and given is not None:
            out = {k: v for k, v in out.items() if k in given}
        if info.exclude_none:
            out = {k: v for k, v in out.items() if v is not None}
        return out if info.by_alias else {names[k]: v for k, v in out.items()}

    return handler.generate_schema(
        Annotated[fields, WrapValidator(validate), PlainSerializer(serialize)]
    )
