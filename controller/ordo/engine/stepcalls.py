"""Two decisions of the step loop factored out of loop.py: calling the model so that a
cancel request does not wait for it, and checking tool-call arguments against the tool's
schema (fail closed, bounded)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import jsonschema

from ..api import jsonschemas
from ..errors import InvalidSchema, UntrustedInputTooLarge
from . import validation
from .jsontext import MAX_JSON_DEPTH, value_depth
from .model import ModelClient, ModelRequest, ModelResponse


async def complete_unless_cancelled(
    model: ModelClient, request: ModelRequest, cancel: asyncio.Event | None
) -> ModelResponse | None:
    """The model's answer, or None when a cancel request (spec.cancel, the Task deleted)
    arrives first: the in-flight call is abandoned rather than awaited (it may take up to the
    endpoint's timeout times its retries)."""
    if cancel is None:
        return await model.complete(request)
    if cancel.is_set():
        return None
    call = asyncio.ensure_future(model.complete(request))
    waiter = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait({call, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not call.done():
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await call
    if call.cancelled():
        return None
    return call.result()


def loop_deadline(deadline: float | None) -> float | None:
    """Convert a time.monotonic() deadline to the event loop's clock."""
    if deadline is None:
        return None
    return asyncio.get_running_loop().time() + (deadline - time.monotonic())


def argument_problem(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """Why `arguments` do not satisfy the tool's input schema, or None, validated on the event
    loop within its share of work (`check_arguments` validates larger arguments off it).
    Patterns are matched with RE2 (linear time) and the validation runs within a work budget;
    a schema that cannot be evaluated, or arguments too costly to check, reject the call
    (fail closed)."""
    problem = _shape_problem(arguments)
    if problem or not schema:
        return problem
    try:
        errors = jsonschemas.validator_for(schema).errors(arguments)
    except (InvalidSchema, UntrustedInputTooLarge) as exc:
        return _refusal(exc)
    return _first_error(errors)


async def check_arguments(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    """`argument_problem` for the loop's tool calls: arguments too costly to validate on the
    event loop are validated off it (`ordo.engine.validation`), within a deadline that fails
    closed."""
    problem = _shape_problem(arguments)
    if problem or not schema:
        return problem
    try:
        errors = await validation.schema_errors(schema, arguments)
    except (InvalidSchema, UntrustedInputTooLarge) as exc:
        return _refusal(exc)
    return _first_error(errors)


def _shape_problem(arguments: dict[str, Any]) -> str | None:
    if value_depth(arguments, limit=MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        return f"the arguments nest deeper than {MAX_JSON_DEPTH} levels"
    return None


def _refusal(exc: InvalidSchema | UntrustedInputTooLarge) -> str:
    if isinstance(exc, InvalidSchema):
        return "the tool's input schema cannot be used, so the call was not run"
    return (
        "the arguments are too costly to check against the tool's input schema, so the "
        "call was not run; send smaller arguments"
    )


def _first_error(errors: list[Any]) -> str | None:
    error = jsonschema.exceptions.best_match(errors)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    # The message quotes the model's own value: cap it so a huge argument is not echoed back.
    return f"{where}: {error.message}"[:500]
