"""Token usage: one record for a model call, a run, and `status.usage` (`ordo.Usage`).

The engine adds one `Usage` per model call (a frozen dataclass: adding is two integer sums,
no validation), and the same class is the type of `TaskStatus.usage`: as a pydantic field it
is validated by `_UsageFields` (camelCase or snake_case keys, counts >= 0, unknown keys
rejected, the CRD schema) and serialized as `inputTokens`, `outputTokens`, `totalTokens`
(snake_case without `by_alias`). `estimated` stays out of the status: the checkpoint keeps it
(engine/state.py, `usageEstimated`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, GetCoreSchemaHandler, SerializationInfo
from pydantic_core import core_schema

from .base import OrdoModel


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one model call (or, summed, of a run)."""

    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False
    """True when the server reported no usage and the provider estimated it (characters / 4,
    docs/providers.md); a sum is estimated if any part was. Budgets count estimates too."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.estimated or other.estimated,
        )

    def to_dict(self) -> dict[str, int]:
        """`status.usage` (and the checkpoint's `usage`): camelCase."""
        return {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "totalTokens": self.total_tokens,
        }

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_wrap_validator_function(
            _validate,
            handler.generate_schema(_UsageFields),
            serialization=core_schema.plain_serializer_function_ser_schema(
                _serialize, info_arg=True
            ),
        )


class _UsageFields(OrdoModel):
    """Tokens used by the run, summed over model calls."""

    input_tokens: Annotated[int, Field(ge=0)] = 0
    """Prompt tokens, as the provider reported them (estimated when it did not)."""
    output_tokens: Annotated[int, Field(ge=0)] = 0
    """Completion tokens."""
    total_tokens: Annotated[int, Field(ge=0)] = 0
    """Input plus output tokens; budgets (`maxTokens`, `maxTokensPerTask`) count this."""


def _validate(value: Any, handler: core_schema.ValidatorFunctionWrapHandler) -> Usage:
    """A `Usage` as it is (its counts checked as the API's), or the status's mapping as one
    (`totalTokens` is derived from the other two, as the engine always wrote it)."""
    if isinstance(value, Usage):
        handler(value.to_dict())
        return value
    fields: _UsageFields = handler(value)
    return Usage(fields.input_tokens, fields.output_tokens)


def _serialize(usage: Usage, info: SerializationInfo) -> dict[str, int]:
    if info.by_alias:
        return usage.to_dict()
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }
