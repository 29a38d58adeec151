"""Agent: a model, a prompt, the tools it may call, its roles, memory and limits."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, field_validator

from .base import (
    CelRule,
    JsonObject,
    Name,
    OrdoModel,
    PositiveDuration,
    Resource,
    StatusBase,
    UniqueItems,
    UniqueNames,
    named_items,
)
from .jsonschemas import user_schema

MemoryOperation = Literal["read", "write", "search", "list", "ingest"]
MEMORY_OPERATIONS: tuple[MemoryOperation, ...] = ("read", "write", "search", "list", "ingest")

NameList = Annotated[
    list[Name],
    Field(max_length=64, json_schema_extra={"x-kubernetes-list-type": "set"}),
    UniqueItems,
    named_items,
]


class AgentMemory(OrdoModel):
    """The Memory the agent uses, and which built-in memory tools it is offered."""

    ref: Name | None = None
    """Name of a Memory in the same namespace."""
    allow: (
        Annotated[
            list[MemoryOperation],
            Field(max_length=5, json_schema_extra={"x-kubernetes-list-type": "set"}),
            UniqueItems,
        ]
        | None
    ) = None
    """Operations offered as built-in tools (`memory_read`, ...). Unset: all five."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="!has(self.allow) || has(self.ref)",
            message="memory.allow needs memory.ref: name the Memory the operations apply to",
            check=lambda m: m.allow is None or m.ref is not None,
        ),
    )


class AgentLimits(OrdoModel):
    """Bounds of one run of this agent."""

    max_steps: Annotated[int, Field(ge=1, le=1000)] = 10
    """Most model calls in one run; reaching it fails the Task with `MaxStepsExceeded`."""
    timeout: PositiveDuration = "5m"
    """Deadline for the whole run; reaching it fails the Task with `Timeout`."""
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    """Token budget (input + output) of one run; exceeding it fails with `TokenBudgetExceeded`."""


class Skill(OrdoModel):
    """A named narrowing of the agent: extra instructions and a subset of its tools."""

    name: Annotated[
        str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    ]
    """Skill name, chosen by a Task's `skill` field."""
    instructions: Annotated[str, Field(max_length=65536)] | None = None
    """Appended to the system prompt when the skill is chosen."""
    tools: NameList | None = None
    """Tools available under this skill; must be a subset of the Agent's `tools`. Unset: all."""


QUANTITY_PATTERN = r"^([0-9]+(\.[0-9]+)?|\.[0-9]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$"
Quantity = Annotated[
    str, Field(pattern=QUANTITY_PATTERN, max_length=32, examples=["500m", "256Mi"])
]
"""A Kubernetes resource quantity such as `500m` (CPU) or `256Mi` (memory)."""

ExecutionMode = Literal["InProcess", "Job"]
EXECUTION_MODES: tuple[ExecutionMode, ...] = ("InProcess", "Job")


class ResourceAmounts(OrdoModel):
    """CPU and memory of the Job pod (Kubernetes quantities)."""

    cpu: Quantity | None = None
    """CPU, e.g. `250m`."""
    memory: Quantity | None = None
    """Memory, e.g. `256Mi`; over the limit the pod is OOMKilled (reason `PodFailed`)."""


class ExecutionResources(OrdoModel):
    """Requests and limits of the Job pod; unset ones come from the operator's defaults."""

    requests: ResourceAmounts | None = None
    """What the scheduler reserves for the pod."""
    limits: ResourceAmounts | None = None
    """The most the pod may use."""


class Execution(OrdoModel):
    """Where the agent's Tasks run."""

    mode: ExecutionMode | None = None
    """`InProcess`: in the operator's process (fast start, shared blast radius). `Job`: one
    batch/v1 Job per Task, running the same engine in its own pod (isolated, a few seconds of
    start-up). Unset: the operator's `--default-execution-mode`."""
    resources: ExecutionResources | None = None
    """Requests and limits of the Job pod (Job mode only)."""


class A2ASkill(OrdoModel):
    """A skill the Agent's A2A card lists (what callers may ask of it; it narrows nothing)."""

    name: Annotated[
        str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    ]
    """The skill's id on the card."""
    description: Annotated[str, Field(max_length=4096)] | None = None
    """What the skill does, for callers choosing an agent."""
    tags: Annotated[list[Annotated[str, Field(max_length=63)]], Field(max_length=16)] | None = None
    """Keywords on the card."""


class A2AServing(OrdoModel):
    """Whether `ordo gateway` serves the Agent over A2A, and what its card says."""

    enabled: bool = False
    """`true`: the gateway serves the Agent's card and JSON-RPC endpoint at
    `/a2a/<namespace>/<agent>`; otherwise it answers 404 there, as for a missing Agent."""
    description: Annotated[str, Field(max_length=4096)] | None = None
    """The card's description. Unset: a generic one naming the Agent."""
    skills: Annotated[list[A2ASkill], named_items(32), UniqueNames] | None = None
    """The card's skills."""


class AgentSpec(OrdoModel):
    """Desired state of an Agent."""

    model_ref: Name
    """Name of the ModelEndpoint this agent calls."""
    prompt: Annotated[str, Field(max_length=262144)] | None = None
    """System prompt."""
    tools: NameList | None = None
    """Names of Tools the agent may call (subject to roles, permissions and policies)."""
    roles: NameList | None = None
    """Names of AgentRoles whose permissions the agent holds."""
    memory: AgentMemory | None = None
    """Memory wiring."""
    limits: Annotated[AgentLimits, Field(json_schema_extra={"default": {}})] = Field(
        default_factory=AgentLimits
    )
    """Run bounds; a Task may narrow them, never widen them."""
    skills: (
        Annotated[
            list[Skill],
            named_items(64),
            UniqueNames,
        ]
        | None
    ) = None
    """Named skills a Task can select."""
    output_schema: JsonObject | None = None
    """JSON Schema the final answer must satisfy (a Task's own `outputSchema` wins)."""
    execution: Execution | None = None
    """Execution mode of its Tasks (`InProcess` or `Job`) and the Job pod's resources."""
    guardrails: NameList | None = None
    """Names of Guardrails that check its runs (input, tool calls, tool results, answer), in
    this order; a missing one fails the Task `GuardrailMissing` before any model call."""
    a2a: Annotated[A2AServing | None, Field(alias="a2a")] = None
    """Serving over A2A (`ordo gateway`, docs/a2a.md): opt-in, and the agent card's text."""

    _check_output_schema = field_validator("output_schema")(user_schema)

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="!has(self.skills) || self.skills.all(s, !has(s.tools) || "
            "s.tools.all(t, has(self.tools) && t in self.tools))",
            message="every skill tool must also be listed in spec.tools",
            check=lambda s: all(
                t in (s.tools or []) for sk in (s.skills or []) for t in (sk.tools or [])
            ),
        ),
    )


class AgentStatus(StatusBase):
    """Observed state of an Agent: `Ready` says whether every reference resolves."""

    suspended_by: Annotated[str, Field(max_length=253)] | None = None
    """The AgentPolicy (`spec.suspend: true`) that suspends the Agent now, if any."""


class Agent(Resource):
    """An LLM agent: model, prompt, tools, roles, memory and limits."""

    kind: Literal["Agent"] = "Agent"
    spec: AgentSpec
    status: AgentStatus | None = None
