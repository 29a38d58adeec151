"""AgentPolicy: namespace-level guard rails over the Agents it selects."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, PrivateAttr, model_validator

from .base import (
    CelRule,
    Name,
    OrdoModel,
    Resource,
    StatusBase,
    UniqueItems,
    UniqueNames,
    named_items,
)
from .celexpr import MAX_EXPRESSION_CHARS, CelError, Program, compile_expression

OnToolDenied = Literal["Fail", "ReturnError"]
SelectorOperator = Literal["In", "NotIn", "Exists", "DoesNotExist"]
ToolNames = Annotated[
    list[Name],
    Field(max_length=256, json_schema_extra={"x-kubernetes-list-type": "set"}),
    UniqueItems,
]
"""Tool object names (memory tools as `memory.<operation>`), a set."""


class LabelSelectorRequirement(OrdoModel):
    """One requirement of a label selector."""

    key: Annotated[str, Field(min_length=1, max_length=317)]
    """The label key."""
    operator: SelectorOperator
    """`In`, `NotIn`, `Exists` or `DoesNotExist`."""
    values: Annotated[list[str], Field(max_length=64)] | None = None
    """Label values: non-empty for `In` and `NotIn`, empty for `Exists` and `DoesNotExist`."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0)"
            " : (!has(self.values) || size(self.values) == 0)",
            message="values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
            check=lambda r: bool(r.values) == (r.operator in ("In", "NotIn")),
        ),
    )


class LabelSelector(OrdoModel):
    """A metav1.LabelSelector; an empty selector selects every Agent in the namespace."""

    match_labels: dict[str, str] | None = None
    """Labels an Agent must carry, all of them, with these values."""
    match_expressions: Annotated[list[LabelSelectorRequirement], Field(max_length=32)] | None = None
    """Requirements an Agent's labels must all meet."""

    def matches(self, labels: dict[str, str]) -> bool:
        for key, value in (self.match_labels or {}).items():
            if labels.get(key) != value:
                return False
        for req in self.match_expressions or []:
            present = req.key in labels
            values = req.values or []
            if req.operator == "In" and (not present or labels[req.key] not in values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
        return True


ToolRuleAction = Literal["Deny", "RequireApproval"]
ToolRuleMode = Literal["Enforce", "Audit"]


class ToolRule(OrdoModel):
    """An argument-aware rule on tool calls (docs/governance.md, "Tool rules"): when `when`
    is true for a call of one of `tools`, the call is denied or needs a human approval."""

    name: Name
    """Unique in the policy; `status.toolCalls[].reason` and the metric name it."""
    tools: Annotated[
        list[Name],
        Field(min_length=1, max_length=64, json_schema_extra={"x-kubernetes-list-type": "set"}),
        UniqueItems,
    ]
    """Tool object names the rule applies to (memory tools as `memory.<operation>`)."""
    when: Annotated[str, Field(min_length=1, max_length=MAX_EXPRESSION_CHARS)]
    """A CEL expression over `args` (the call's parsed arguments), `agent` and `task` (`name`,
    `labels`), `step` and `usage` (`inputTokens`, `outputTokens`, `totalTokens`) that yields a
    bool, e.g. `args.amount > 100`. Compiled when the policy is read: one that does not
    compile makes the policy invalid (runs fail `PolicyUnavailable`)."""
    action: ToolRuleAction
    """`Deny` the call, or `RequireApproval` of a human for it (engine/approvals.py)."""
    mode: ToolRuleMode = "Enforce"
    """`Audit` only records what the rule would have done (in `status.toolCalls[].reason`)."""
    message: Annotated[str, Field(max_length=256)] | None = None
    """What the model is told when the rule denies a call (never shown in status)."""

    _program: Program | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _compile(self) -> ToolRule:
        try:
            self._program = compile_expression(self.when)
        except CelError as exc:
            raise ValueError(f"toolRule {self.name!r}: when: {exc}") from None
        return self

    @property
    def program(self) -> Program:
        """The compiled `when` (set by validation)."""
        assert self._program is not None
        return self._program


MAX_DELEGATION_DEPTH = 16
"""The deepest any tree of Tasks may be, whatever a policy or flag says."""


class AgentPolicySpec(OrdoModel):
    """Desired state of an AgentPolicy."""

    agent_selector: LabelSelector | None = None
    """Agents this policy applies to; unset or empty selects every Agent in the namespace."""
    allowed_models: (
        Annotated[
            list[Annotated[str, Field(min_length=1, max_length=256)]],
            Field(max_length=128, json_schema_extra={"x-kubernetes-list-type": "set"}),
            UniqueItems,
        ]
        | None
    ) = None
    """If set, the Agent's ModelEndpoint `model` (or the endpoint's name) must be listed."""
    blocked_tools: ToolNames | None = None
    """Tools removed from every selected Agent; a call to one is denied."""
    allowed_tools: ToolNames | None = None
    """If set, the only tools the selected Agents may use (several policies intersect; memory
    tools as `memory.<operation>`). A Task whose Agent lists another tool fails `ToolDenied`
    before any model call; an empty list allows no tool at all."""
    approval_required: ToolNames | None = None
    """Tools whose calls a human must approve before they run (memory tools as
    `memory.<operation>`), for the selected Agents; adds to a Tool's own
    `spec.approval.required`, never removes it."""
    suspend: bool = False
    """Kill switch: new Tasks of the selected Agents fail `AgentSuspended` before any model
    call, and running ones stop at their next step boundary."""
    max_tokens_per_task: Annotated[int, Field(ge=1)] | None = None
    """Token budget of one Task; the smallest of all policies and the Agent's `maxTokens` applies."""
    max_steps: Annotated[int, Field(ge=1, le=1000)] | None = None
    """Caps the Agent's `maxSteps`."""
    max_delegation_depth: Annotated[int, Field(ge=0, le=MAX_DELEGATION_DEPTH)] | None = None
    """How deep a tree of Tasks under a selected Agent may grow: a Task at this depth (its root
    is depth 0) may not delegate (`agent` Tools, Teams) any further; the smallest of all
    policies and the operator's `--max-delegation-depth` applies (docs/concepts.md#trees)."""
    required_guardrails: (
        Annotated[
            list[Name],
            Field(max_length=64, json_schema_extra={"x-kubernetes-list-type": "set"}),
            UniqueItems,
        ]
        | None
    ) = None
    """Guardrails every selected Agent must list in `spec.guardrails`; a Task of an Agent that
    does not fails `GuardrailMissing` before any model call."""
    on_tool_denied: OnToolDenied = "Fail"
    """`Fail` ends the Task with `ToolDenied`; `ReturnError` tells the model and continues."""
    tool_rules: (
        Annotated[
            list[ToolRule],
            named_items(64),
            UniqueNames,
        ]
        | None
    ) = None
    """Argument-aware rules, checked after the checks above and before guardrails and
    approvals; every selecting policy's rules apply."""


class AgentPolicyStatus(StatusBase):
    """Observed state: `Ready`, and how many Agents the selector matches."""

    selected_agents: Annotated[int, Field(ge=0)] | None = None
    """How many Agents in the namespace the policy selects now (the `Ready` message names a few)."""


class AgentPolicy(Resource):
    """Guard rails over the Agents it selects."""

    kind: Literal["AgentPolicy"] = "AgentPolicy"
    spec: AgentPolicySpec
    status: AgentPolicyStatus | None = None
