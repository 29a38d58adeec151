"""Every model answer is normalised here before the loop looks at it.

A model (or a server pretending to be one) may answer anything. `normalise_response` turns any
`ModelResponse` into one the rest of ordo can record, checkpoint, send back to a provider and
write into Task status without a second thought:

- **Tool names** that fit every provider's rule (`[a-zA-Z0-9_-]{1,64}`) are kept. Any other
  name becomes `<up to 48 of its safe characters>-x<hash8>` (`invalid-x<hash8>` when none
  are safe): at most 58 characters, so a record always fits the CRD (`toolCalls[].tool`, 128),
  and a provider accepts it when the history goes back. An offered tool's real name is valid,
  so it is kept, never mapped; a mapped name is not offered, so governance denies the call
  (`NotOffered`) unless a tool is literally named like the mapping of an invalid name.
- **Call ids** that are empty, longer than 64 characters, not `[A-Za-z0-9_-]`, already used in
  this run (`seen_ids`, kept in the checkpoint), or in ordo's own `ordo_` namespace are
  replaced by `ordo_<step>_<index>`, unique across the run. Resuming and "one result per call"
  key on these ids; both OpenAI and Anthropic accept them when they are sent back.
- **Text** (the answer, raw argument text, the finish reason): lone surrogates become U+FFFD,
  so status JSON always encodes as UTF-8.
- **Arguments** that nest deeper than `MAX_JSON_DEPTH`, whose raw text is longer than
  `MAX_JSON_CHARS`, that hold a value JSON cannot carry (a lone surrogate, NaN, a non-JSON
  type, a cycle) become `None`: the loop rejects the call with `InvalidArguments` and the model may
  correct itself.
- **Caps**: at most `MAX_TOOL_CALLS_PER_RESPONSE` tool calls (the rest are dropped, and a note
  saying how many is appended to the answer text, where the model and the run's output see
  it), at most `MAX_ARGUMENT_CHARS_PER_RESPONSE` characters of arguments read per response
  (the calls past it are rejected, with a note) and at most `MAX_TEXT_CHARS` characters of
  text (cut, with a note).
- **Usage**: counts are non-negative integers (anything else counts as 0).

Everything here is linear in the size of the answer and never recursive beyond
`MAX_JSON_DEPTH`; texts are cut before they are cleaned, so a 32 MiB answer costs what its kept
part does (docs/security.md has the measured figures).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from .jsontext import MAX_JSON_CHARS, MAX_JSON_DEPTH, json_depth
from .model import ModelResponse
from .transcript import ToolCall, Usage

MAX_TOOL_CALLS_PER_RESPONSE = 64
"""Tool calls of one answer the loop considers; the rest are dropped with a note."""
MAX_TEXT_CHARS = 1_048_576
"""Characters of answer text kept (1 Mi); the rest is cut with a note."""
MAX_ARGUMENT_CHARS_PER_RESPONSE = MAX_JSON_CHARS
"""Characters of tool-call arguments (raw JSON text) read per response, all calls together:
the arguments of a call past it are not read (the call is rejected, `InvalidArguments`, with a
note), so checking one response costs what one document at the JSON cap costs."""
MAX_NAME_HASH_CHARS = 4096
"""Characters of an invalid tool name that its mapped name's hash covers (with its length)."""
MAX_FINISH_REASON_CHARS = 64
MAX_MODEL_NAME_CHARS = 256
MAX_TOKEN_COUNT = 10**15
"""A reported token count above this is clamped (status integers must stay int64)."""
NAME_PREFIX_CHARS = 48
"""Safe characters of an invalid tool name kept in its mapped name."""
CALL_ID_PREFIX = "ordo_"

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def clean_text(value: Any) -> str:
    """`value` as a string with every lone surrogate replaced by U+FFFD ('' if not a str)."""
    if not isinstance(value, str):
        return ""
    return _SURROGATE.sub("\ufffd", value)


def safe_tool_name(name: Any) -> str:
    """The name the run uses for a tool name the model sent (see the module docstring)."""
    if isinstance(name, str) and _NAME.fullmatch(name):
        return name
    text = name if isinstance(name, str) else ""
    hashed = (
        text if len(text) <= MAX_NAME_HASH_CHARS else f"{text[:MAX_NAME_HASH_CHARS]}#{len(text)}"
    )
    digest = hashlib.sha256(hashed.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    prefix = _UNSAFE.sub("", text[: NAME_PREFIX_CHARS * 8])[:NAME_PREFIX_CHARS]
    return f"{prefix or 'invalid'}-x{digest}"


def _valid_id(call_id: Any, seen_ids: set[str]) -> bool:
    return (
        isinstance(call_id, str)
        and _NAME.fullmatch(call_id) is not None
        and not call_id.startswith(CALL_ID_PREFIX)
        and call_id not in seen_ids
    )


def _fresh_id(step: int, index: int, seen_ids: set[str]) -> str:
    candidate = f"{CALL_ID_PREFIX}{step}_{index}"
    n = 0
    while candidate in seen_ids:  # only after a resume replayed a step: stay unique anyway
        n += 1
        candidate = f"{CALL_ID_PREFIX}{step}_{index}_{n}"
    return candidate


def json_value_ok(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """True if `value` is plain JSON (dicts, lists or tuples, str, finite numbers, bool, None;
    keys JSON writes as strings) nested at most `max_depth` deep, with no lone surrogate.
    Everything is checked on one serialisation, in C but for one step per bracket: types and
    finiteness by `json.dumps`, surrogates by encoding its text, depth by counting its
    brackets (jsontext.json_depth). Never recursive beyond the interpreter's limit."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        text.encode("utf-8")
    except (TypeError, ValueError, RecursionError):  # UnicodeEncodeError is a ValueError
        return False
    if text.count("[") + text.count("{") <= max_depth:
        return True
    return json_depth(text) <= max_depth


def _arguments(call: ToolCall, raw: str, budget: int) -> dict[str, Any] | None:
    """The call's arguments if they are a plain JSON object of at most `budget` characters
    (raw or as JSON), else None (the loop rejects the call: `InvalidArguments`)."""
    arguments = call.arguments
    if not isinstance(arguments, dict) or len(raw) > min(budget, MAX_JSON_CHARS):
        return None
    return arguments if json_value_ok(arguments) else None


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return min(max(0, value), MAX_TOKEN_COUNT)


def _model_name(value: object) -> str:
    """The model name a provider reported, if it is a string; bounded."""
    return clean_text(value)[:MAX_MODEL_NAME_CHARS] if isinstance(value, str) else ""


def normalise_response(response: ModelResponse, *, step: int, seen_ids: set[str]) -> ModelResponse:
    """The answer with safe names, unique ids, encodable text and bounded size. Adds the ids
    it keeps or makes to `seen_ids`."""
    full = response.text if isinstance(response.text, str) else ""
    text = clean_text(full[:MAX_TEXT_CHARS])  # cut first: cleaning keeps the length
    notes: list[str] = []
    raw_calls = response.tool_calls if isinstance(response.tool_calls, tuple | list) else ()
    calls: list[ToolCall] = []
    budget = MAX_ARGUMENT_CHARS_PER_RESPONSE
    unread = 0
    for index, call in enumerate(raw_calls[:MAX_TOOL_CALLS_PER_RESPONSE]):
        call_id = call.id if _valid_id(call.id, seen_ids) else _fresh_id(step, index, seen_ids)
        seen_ids.add(call_id)
        raw_text = call.raw_arguments if isinstance(call.raw_arguments, str) else ""
        if budget > 0:  # cut before cleaning: what is past the budget is never looked at
            raw = clean_text(raw_text[: min(MAX_JSON_CHARS, budget) + 1])
            arguments = _arguments(call, raw, budget)
        else:
            raw, arguments = "", None
        if (budget <= 0 or len(raw) > budget) and isinstance(call.arguments, dict):
            unread += 1
        budget -= len(raw)
        calls.append(ToolCall(call_id, safe_tool_name(call.name), arguments, raw[:MAX_JSON_CHARS]))
    dropped = len(raw_calls) - len(calls)
    if dropped > 0:
        notes.append(
            f"[ordo: {dropped} more tool call(s) dropped: at most "
            f"{MAX_TOOL_CALLS_PER_RESPONSE} per response]"
        )
    if unread:
        notes.append(
            f"[ordo: the arguments of {unread} tool call(s) were not read: at most "
            f"{MAX_ARGUMENT_CHARS_PER_RESPONSE} characters of arguments per response]"
        )
    if len(full) > MAX_TEXT_CHARS:
        notes.append(f"[ordo: the answer was cut to {MAX_TEXT_CHARS} characters]")
    if notes:
        text = "\n".join([text, *notes]) if text else "\n".join(notes)
    usage = response.usage if isinstance(response.usage, Usage) else Usage()
    return ModelResponse(
        text=text,
        tool_calls=tuple(calls),
        usage=Usage(
            _count(usage.input_tokens), _count(usage.output_tokens), estimated=usage.estimated
        ),
        finish_reason=clean_text(response.finish_reason)[:MAX_FINISH_REASON_CHARS],
        response_model=_model_name(response.response_model),
    )
