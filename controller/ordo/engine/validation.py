"""Validate an untrusted value (a model's answer, a tool call's arguments) against a user's
JSON Schema without holding the event loop.

A value whose validation is cheap (`SchemaValidator.on_loop`: its work budget fits
`MAX_FUEL`, ~60 ms, and RE2's worst case fits `MAX_PATTERN_WORK_ON_LOOP`) is validated on the
loop, as before. A larger one is validated in a worker thread (`OffLoop`: at most
`VALIDATION_THREADS` per process) with the larger budget `MAX_OFF_LOOP_FUEL` and within
`VALIDATION_SECONDS`, waiting for a free thread included. Past either, the value is refused
(`UntrustedInputTooLarge`): the caller fails closed (the answer is `InvalidOutput`, the tool
call is rejected and never runs unchecked). So a large answer against a large schema is still
validated, and it costs only its own Task's time.
"""

from __future__ import annotations

import threading
from typing import Any

from jsonschema.exceptions import ValidationError

from ..api import jsonschema_fuel as fuel
from ..api import jsonschemas
from ..errors import UntrustedInputTooLarge
from .offloop import OffLoop

VALIDATION_SECONDS = 5.0
"""Deadline of one off-loop validation, waiting for a free thread included."""

VALIDATION_THREADS = 2
"""Off-loop validations running at once per process."""

_VALIDATIONS = OffLoop("ordo-validation", threads=VALIDATION_THREADS, seconds=VALIDATION_SECONDS)


async def schema_errors(schema: dict[str, Any], instance: Any) -> list[ValidationError]:
    """The validation errors of `instance` against `schema`. Raises what
    `SchemaValidator.errors` raises (`InvalidSchema`, `UntrustedInputTooLarge`), and
    `UntrustedInputTooLarge` when an off-loop validation misses its deadline."""
    validator = jsonschemas.validator_for(schema)
    if validator.on_loop(instance):
        return validator.errors(instance)

    def work(stop: threading.Event) -> list[ValidationError]:
        return validator.errors(instance, cap=fuel.MAX_OFF_LOOP_FUEL)

    try:
        return await _VALIDATIONS.run(work)
    except TimeoutError:
        raise UntrustedInputTooLarge(
            f"validating the value against the schema did not finish within "
            f"{VALIDATION_SECONDS:g} s: make the value smaller or the schema simpler"
        ) from None


__all__ = ["VALIDATION_SECONDS", "VALIDATION_THREADS", "schema_errors"]
