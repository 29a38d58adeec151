"""Token usage: one record for a model call, a run, and `status.usage` (`ordo.Usage`).

The engine adds one `Usage` per model call (a frozen dataclass: adding is two integer sums,
no validation), and the same class is the type of `TaskStatus.usage`: as a pydantic field it
is validated by `_UsageFields` and serialized as `inputTokens`, `outputTokens`,
`totalTokens` (api/records.py). `estimated` stays out of the status: the checkpoint keeps it
(engine/state.py, `usageEstimated`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field, GetCoreSchemaHandler

from .base import OrdoModel
from .records import status_record


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one model call (or, summed, of a run)."""

    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False
    """True when the server reported no usage and the provider estimated it (characters / 4,
    docs/providers.md); a sum is estimated if any part was. Budgets count estimates too."""
    _given: frozenset[str] | None = field(default=None, init=False, compare=False, repr=False)
    """The status fields it was read with; None: ordo built it (api/records.py)."""

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
    ) -> Any:  # pydantic_core's CoreSchema (pydantic_core is not a declared dependency)
        return status_record(handler, cls, _UsageFields, _from_fields, _shown)


class _UsageFields(OrdoModel):
    """Tokens used by the run, summed over model calls."""

    input_tokens: Annotated[int, Field(ge=0)] = 0
    """Prompt tokens, as the provider reported them (estimated when it did not)."""
    output_tokens: Annotated[int, Field(ge=0)] = 0
    """Completion tokens."""
    total_tokens: Annotated[int, Field(ge=0)] = 0
    """Input plus output tokens; budgets (`maxTokens`, `maxTokensPerTask`) count this."""


def _from_fields(fields: _UsageFields) -> Usage:
    """`totalTokens` is derived from the other two, as the engine always wrote it."""
    return Usage(fields.input_tokens, fields.output_tokens)


def _shown(usage: Usage) -> dict[str, Any]:
    return usage.to_dict()
