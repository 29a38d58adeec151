"""Guardrail: a check on the text of a run at up to four points (the Task input, each tool
call's arguments, each tool result, the final answer). Three types: `pattern` (RE2 regular
expressions, deny or redact), `http` (an external check service, fail closed) and `model`
(an LLM judge through a ModelEndpoint). The engine side is `ordo.engine.guardrails`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, GetCoreSchemaHandler, field_validator

from .base import CelRule, Name, OrdoModel, PositiveDuration, Resource, SecretKeyRef, StatusBase
from .jsonschema_re2 import MAX_PATTERN_CHARS, compile_pattern
from .records import status_record
from .tool import HeaderMap, Url

GuardrailType = Literal["pattern", "http", "model"]
GuardrailPoint = Literal["input", "toolArguments", "toolResult", "output"]
GUARDRAIL_POINTS: tuple[GuardrailPoint, ...] = ("input", "toolArguments", "toolResult", "output")
PatternAction = Literal["deny", "redact"]
GuardrailAction = Literal["redacted", "denied"]

MAX_PATTERNS = 32
"""Most regular expressions in one pattern Guardrail."""
MAX_GUARDRAIL_RECORDS = 100
"""`status.guardrails[]` of a Task keeps at most this many (the newest)."""


def re2_patterns(patterns: list[str]) -> list[str]:
    """Every pattern must compile with RE2 (linear time: no backreferences, no lookaround)."""
    for i, pattern in enumerate(patterns):
        _, problem = compile_pattern(pattern)
        if problem is not None:
            raise ValueError(f"patterns[{i}]: {problem}")
    return patterns


class PatternGuardrail(OrdoModel):
    """Regular expressions (RE2 syntax, matched in time linear in the text)."""

    patterns: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=MAX_PATTERN_CHARS)]],
        Field(min_length=1, max_length=MAX_PATTERNS),
    ]
    """RE2 expressions; a match anywhere in the text fires the guardrail (`(?i)` for case
    folding). Backreferences and lookaround are refused."""
    action: PatternAction = "deny"
    """`deny`: a match is a violation. `redact`: every match is replaced by `replacement`."""
    replacement: Annotated[str, Field(max_length=64)] = "[REDACTED]"
    """What a redacted match becomes (taken literally)."""

    _check_patterns = field_validator("patterns")(re2_patterns)


class HttpGuardrail(OrdoModel):
    """An external check service. ordo POSTs `{"guardrail", "point", "text"}` as JSON and expects
    `{"decision": "allow" | "deny" | "redact", "text": "<redacted text>"}`. A timeout, a
    non-2xx answer, a body over 256 KiB or anything but that object denies (fail closed)."""

    url: Url
    """The check endpoint."""
    headers: HeaderMap | None = None
    """Extra request headers (no secrets here: use secretRef)."""
    secret_ref: SecretKeyRef | None = None
    """Secret key sent as `Authorization: Bearer <value>`. The Secret must carry the label
    `ordo.dev/credential: "true"`; its annotation `ordo.dev/allowed-hosts`, if any, must list
    the URL's host (docs/security.md#secrets)."""
    timeout: PositiveDuration = "5s"
    """Deadline of one check; reaching it denies."""
    allow_private_network: bool = False
    """Allow link-local and cloud-metadata addresses, refused by default (as for http Tools)."""


class ModelGuardrail(OrdoModel):
    """An LLM judge: the text goes to the ModelEndpoint with `instructions`, and the answer must
    be the JSON object `{"decision": "allow" | "deny" | "redact", "text": "..."}`; anything else
    denies. Its tokens count against the Task's token budget."""

    model_ref: Name
    """The ModelEndpoint of the judge (same namespace)."""
    instructions: Annotated[str, Field(min_length=1, max_length=16384)]
    """What the judge checks for, e.g. "deny anything that asks for credentials"."""
    max_calls_per_task: Annotated[int, Field(ge=1, le=1000)] = 50
    """Most judge calls in one Task; a check beyond them denies."""


class GuardrailSpec(OrdoModel):
    """Desired state of a Guardrail."""

    type: GuardrailType
    """`pattern`, `http` or `model`."""
    points: Annotated[
        list[GuardrailPoint],
        Field(min_length=1, max_length=4, json_schema_extra={"x-kubernetes-list-type": "set"}),
    ]
    """Where it checks: `input` (the Task's input and instructions), `toolArguments`,
    `toolResult`, `output` (the final answer)."""
    pattern: PatternGuardrail | None = None
    """Settings for `type: pattern`."""
    http: HttpGuardrail | None = None
    """Settings for `type: http`."""
    model: ModelGuardrail | None = None
    """Settings for `type: model`."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="self.type != 'pattern' || has(self.pattern)",
            message="a pattern Guardrail needs spec.pattern",
            check=lambda s: s.type != "pattern" or s.pattern is not None,
        ),
        CelRule(
            rule="has(self.http) || self.type != 'http'",
            message="an http Guardrail needs spec.http",
            check=lambda s: s.type != "http" or s.http is not None,
        ),
        CelRule(
            rule="self.type != 'model' || has(self.model)",
            message="a model Guardrail needs spec.model",
            check=lambda s: s.type != "model" or s.model is not None,
        ),
        CelRule(
            rule="[has(self.pattern), has(self.http), has(self.model)].filter(x, x).size() <= 1",
            message="set only one of spec.pattern, spec.http and spec.model",
            check=lambda s: sum(x is not None for x in (s.pattern, s.http, s.model)) <= 1,
        ),
    )

    def applies_to(self, point: GuardrailPoint) -> bool:
        return point in self.points


class GuardrailStatus(StatusBase):
    """Observed state: `Ready` says whether the check can run (patterns compile, the http
    destination is allowed, the judge's ModelEndpoint exists)."""


@dataclass(frozen=True, slots=True)
class GuardrailRecord:
    """One guardrail that fired (never the text): the engine keeps it in the run state
    (`to_dict` is its checkpoint form) and `status.guardrails[]` shows it
    (`_GuardrailRecordFields`, names capped by runtime/status.py)."""

    step: int
    point: GuardrailPoint
    guardrail: str
    action: GuardrailAction
    tool: str | None = None
    cause: str | None = None
    _given: frozenset[str] | None = field(default=None, init=False, compare=False, repr=False)
    """The status fields it was read with; None: ordo built it (api/records.py)."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "step": self.step,
            "point": self.point,
            "guardrail": self.guardrail,
            "action": self.action,
        }
        if self.tool:
            d["tool"] = self.tool
        if self.cause:
            d["cause"] = self.cause
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GuardrailRecord:
        return cls(
            int(d["step"]), d["point"], d["guardrail"], d["action"], d.get("tool"), d.get("cause")
        )

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> Any:  # pydantic_core's CoreSchema (pydantic_core is not a declared dependency)
        return status_record(handler, cls, _GuardrailRecordFields, _record, _shown)


class _GuardrailRecordFields(OrdoModel):
    """One guardrail that fired in a run (never the matched or checked text)."""

    step: Annotated[int, Field(ge=0)]
    """Step at which it fired (0: the Task input, before the first model call)."""
    point: GuardrailPoint
    """Where it fired."""
    guardrail: Annotated[str, Field(max_length=253)]
    """The Guardrail's name."""
    action: GuardrailAction
    """`redacted` (the run went on with the redacted text) or `denied`."""
    tool: Annotated[str, Field(max_length=128)] | None = None
    """For toolArguments and toolResult: the tool the model called."""
    cause: Annotated[str, Field(max_length=128)] | None = None
    """Why a check denied without a verdict (fail closed), e.g. `Timeout`, `HTTPStatus 500`,
    `InvalidVerdict`; never content."""


def _record(f: _GuardrailRecordFields) -> GuardrailRecord:
    return GuardrailRecord(f.step, f.point, f.guardrail, f.action, f.tool, f.cause)


def _shown(r: GuardrailRecord) -> dict[str, Any]:
    """The status fields (what is empty is unset)."""
    return {
        "step": r.step,
        "point": r.point,
        "guardrail": r.guardrail,
        "action": r.action,
        "tool": r.tool or None,
        "cause": r.cause or None,
    }


class Guardrail(Resource):
    """A check on a run's input, tool calls, tool results or final answer."""

    kind: Literal["Guardrail"] = "Guardrail"
    spec: GuardrailSpec
    status: GuardrailStatus | None = None
