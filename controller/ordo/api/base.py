"""Shared building blocks of the ordo.dev/v1alpha1 API: model config, names, durations,
references, conditions, and the CEL rules that the CRDs carry and `ordo validate` mirrors."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

GROUP = "ordo.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_UNIT_NANOS = {"ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
MIN_LIMIT_DURATION = "1ms"
MAX_LIMIT_DURATION = "168h"
"""Bounds of every duration that is a limit (a timeout, a backoff): zero never means "no limit",
and a week is the longest any one run, call or backoff may take."""


@dataclass(frozen=True)
class CelRule:
    """A cross-field rule: `rule` goes into the CRD as an x-kubernetes-validations entry and
    `check` is the same rule in Python, so `ordo validate` rejects what the API server rejects.
    `check` receives the validated model and returns True when the object is valid; it is None
    for transition rules (they need the old object, so only the API server can apply them)."""

    rule: str
    message: str
    check: Callable[[Any], bool] | None
    field_path: str | None = None
    optional_old_self: bool = False
    """Evaluate the rule on create too, with `oldSelf` an optional (`oldSelf.hasValue()` on
    update): how a rule applies to new objects only and ratchets stored ones (Kubernetes
    1.30+); `check` is then the create-time rule."""


def _cel_entry(rule: CelRule, **extra: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"rule": rule.rule, "message": rule.message, **extra}
    if rule.optional_old_self:
        entry["optionalOldSelf"] = True
    return entry


def _add_cel_rules(schema: dict[str, Any], cls: type[Any]) -> None:
    rules = [
        _cel_entry(r)
        for r in getattr(cls, "cel_rules", ())
        if r.field_path is None or not r.field_path.startswith("metadata.")
    ]
    root_rules = [
        _cel_entry(r, fieldPath="." + r.field_path)
        for r in getattr(cls, "cel_rules", ())
        if r.field_path and r.field_path.startswith("metadata.")
    ]
    if rules or root_rules:
        schema["x-kubernetes-validations"] = rules + root_rules


class OrdoModel(BaseModel):
    """Base of every ordo type: camelCase on the wire, unknown fields rejected (the API server
    rejects them too under strict field validation), field docstrings become descriptions."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=False,
        json_schema_extra=_add_cel_rules,
    )

    cel_rules: ClassVar[tuple[CelRule, ...]] = ()

    @model_validator(mode="after")
    def _check_cel_rules(self) -> OrdoModel:
        for rule in type(self).cel_rules:
            if rule.check is not None and not rule.check(self):
                prefix = f"{rule.field_path}: " if rule.field_path else ""
                raise ValueError(f"{prefix}{rule.message}")
        return self

    def to_dict(self) -> dict[str, Any]:
        """The object as the user wrote it: camelCase, only the fields that were set."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")


Name = Annotated[
    str,
    Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN),
]
"""The name of another ordo object in the same namespace (DNS-1123 subdomain)."""

Duration = Annotated[
    str,
    Field(pattern=DURATION_PATTERN, max_length=32, examples=["30s", "5m", "1h30m"]),
]
"""A Kubernetes-style duration such as `500ms`, `30s`, `5m` or `1h30m`; zero is allowed (use it
only where zero means "none", such as a delay: a limit is a `PositiveDuration`)."""


def duration_nanos(value: str) -> int:
    """Nanoseconds in a duration string, computed as Go's time.ParseDuration (and so the API
    server's CEL `duration()`) computes them: each part truncated to whole nanoseconds."""
    if not re.fullmatch(DURATION_PATTERN, value):
        raise ValueError(f"invalid duration {value!r}: expected e.g. '30s', '5m', '1h30m'")
    return sum(int(Fraction(n) * _UNIT_NANOS[u]) for n, u in _DURATION_PART.findall(value))


def _within_limit_bounds(value: str) -> bool:
    low, high = duration_nanos(MIN_LIMIT_DURATION), duration_nanos(MAX_LIMIT_DURATION)
    return low <= duration_nanos(value) <= high


POSITIVE_DURATION_RULE = CelRule(
    # The format is the pattern's job: a value it rejects is not reported twice.
    rule=f"!self.matches(r'{DURATION_PATTERN}') || "
    f"(duration(self) >= duration('{MIN_LIMIT_DURATION}') "
    f"&& duration(self) <= duration('{MAX_LIMIT_DURATION}'))",
    message=f"must be between {MIN_LIMIT_DURATION} and {MAX_LIMIT_DURATION}; 0 does not mean no limit",
    check=_within_limit_bounds,
)
"""The bounds of a `PositiveDuration`, as a CEL rule on the field (the CRD) and in Python (the
model, so `ordo validate` and the operator reject what the API server rejects)."""


def _positive_duration(value: str) -> str:
    if POSITIVE_DURATION_RULE.check is not None and not POSITIVE_DURATION_RULE.check(value):
        raise ValueError(POSITIVE_DURATION_RULE.message)
    return value


PositiveDuration = Annotated[
    str,
    Field(
        pattern=DURATION_PATTERN,
        max_length=32,
        examples=["30s", "5m", "1h30m"],
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": POSITIVE_DURATION_RULE.rule, "message": POSITIVE_DURATION_RULE.message}
            ]
        },
    ),
    AfterValidator(_positive_duration),
]
"""A duration that is a limit (a timeout, a backoff): at least `1ms`, at most `168h`. Zero is
refused rather than read as "no limit"."""

JsonObject = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]
"""Any JSON object (for example a JSON Schema), stored as written."""

JsonValue = Annotated[
    str | dict[str, Any],
    WithJsonSchema({"x-kubernetes-preserve-unknown-fields": True}),
]
"""A string or a JSON object."""

PERMISSION_PATTERN = r"^[a-z*][a-z0-9*]*:[a-z0-9*]([-a-z0-9.*]*[a-z0-9*])?:[a-z*][a-z*]*$"
Permission = Annotated[
    str,
    Field(pattern=PERMISSION_PATTERN, max_length=300, examples=["tool:web-search:invoke"]),
]
"""A permission string `<kind>:<object-name>:<verb>`, for example `tool:web-search:invoke`;
`*` matches any name or verb."""


def parse_duration(value: str) -> float:
    """Seconds in a duration string such as `1h30m` or `250ms`."""
    if not re.fullmatch(DURATION_PATTERN, value):
        raise ValueError(f"invalid duration {value!r}: expected e.g. '30s', '5m', '1h30m'")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(value))


def _unique(items: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    for i, item in enumerate(items):
        if item in seen:
            raise ValueError(f"duplicate value {item!r} at [{i}]: the list is a set")
        seen.add(item)
    return items


UniqueItems = AfterValidator(_unique)
"""Rejects duplicates, as the API server does for `x-kubernetes-list-type: set`."""


def _unique_names(items: list[Any]) -> list[Any]:
    seen: set[str] = set()
    for i, item in enumerate(items):
        if item.name in seen:
            raise ValueError(f"duplicate name {item.name!r} at [{i}]: names must be unique")
        seen.add(item.name)
    return items


UniqueNames = AfterValidator(_unique_names)
"""Rejects two items with one `name`, as the API server does for
`x-kubernetes-list-type: map` keyed on `name`."""


def named_items(max_items: int) -> Any:
    """The Field of a list of objects keyed by `name` (with UniqueNames): at most `max_items`,
    an `x-kubernetes-list-type: map` on `name` for the API server."""
    return Field(
        max_length=max_items,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class SecretKeyRef(OrdoModel):
    """A key in a Secret in the same namespace."""

    name: Name
    """Name of the Secret."""
    key: Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")]
    """Key within the Secret's data."""


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(OrdoModel):
    """A metav1.Condition."""

    type: Annotated[str, Field(min_length=1, max_length=316)]
    """Type of condition in CamelCase, e.g. `Ready`."""
    status: ConditionStatus
    """`True`, `False` or `Unknown`."""
    observed_generation: Annotated[int, Field(ge=0)] | None = None
    """The .metadata.generation the condition was set from."""
    last_transition_time: str | None = None
    """When the condition last changed status (RFC 3339)."""
    reason: Annotated[str, Field(max_length=1024)] | None = None
    """A CamelCase reason for the last transition."""
    message: Annotated[str, Field(max_length=32768)] | None = None
    """A human-readable message; never secrets, prompts or model content."""


class ObjectMeta(BaseModel):
    """The part of metadata ordo reads; everything else is kept as written."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, alias_generator=to_camel)

    name: Annotated[str, Field(min_length=1, max_length=253, pattern=DNS1123_SUBDOMAIN)] | None = (
        None
    )
    generate_name: str | None = None
    namespace: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS1123_LABEL)] | None = (
        None
    )
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = None

    @model_validator(mode="after")
    def _named(self) -> ObjectMeta:
        if not self.name and not self.generate_name:
            raise ValueError("metadata.name is required")
        return self


class StatusBase(OrdoModel):
    """Status shared by the configuration kinds: conditions and the generation they describe."""

    observed_generation: Annotated[int, Field(ge=0)] | None = None
    """The .metadata.generation this status describes."""
    conditions: list[Condition] | None = None
    """Current state, e.g. `Ready` with a reason and a message naming what is missing."""


class Resource(OrdoModel):
    """Common envelope of every ordo object."""

    api_version: Literal["ordo.dev/v1alpha1"] = "ordo.dev/v1alpha1"
    kind: str
    metadata: ObjectMeta

    @property
    def name(self) -> str:
        return self.metadata.name or ""

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"
