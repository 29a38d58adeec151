"""The ordo.dev/v1alpha1 API: pydantic models of every kind, the one source of the CRD schema.

Internal code imports modules (`from ordo.api import task`) or the names re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .agent import MEMORY_OPERATIONS, Agent, AgentSpec, MemoryOperation
from .base import API_VERSION, GROUP, VERSION, CelRule, Condition, Resource, parse_duration
from .guardrail import Guardrail, GuardrailSpec
from .memory import Memory, MemorySpec
from .modelendpoint import ModelEndpoint, ModelEndpointSpec
from .policy import AgentPolicy, AgentPolicySpec
from .rbac import AgentRole, AgentRoleSpec, ToolPermission, ToolPermissionSpec
from .task import REASONS, TASK_SPEC_IMMUTABLE, TERMINAL_PHASES, Task, TaskSpec, TaskStatus
from .taskschedule import TaskSchedule, TaskScheduleSpec
from .taskwebhook import TaskWebhook, TaskWebhookSpec
from .team import Team, TeamSpec
from .tool import Tool, ToolSpec, model_tool_name, reserved_tool_name
from .toolapproval import TOOL_APPROVAL_IMMUTABLE, ToolApproval, ToolApprovalSpec

READY = '.status.conditions[?(@.type=="Ready")].status'
AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


@dataclass(frozen=True)
class KindInfo:
    """What the CRD of a kind needs beyond the schema."""

    model: type[Resource]
    plural: str
    short_names: tuple[str, ...]
    columns: tuple[dict[str, str], ...]
    spec_rules: tuple[CelRule, ...] = field(default=())

    @property
    def kind(self) -> str:
        return self.model.model_fields["kind"].default  # type: ignore[no-any-return]

    @property
    def singular(self) -> str:
        return self.kind.lower()


def _col(name: str, path: str, type_: str = "string", priority: int = 0) -> dict[str, str]:
    col: dict[str, str] = {"name": name, "type": type_, "jsonPath": path}
    if priority:
        col["priority"] = str(priority)
    return col


KINDS: dict[str, KindInfo] = {
    info.kind: info
    for info in (
        KindInfo(
            Agent,
            "agents",
            ("agt",),
            (
                _col("Model", ".spec.modelRef"),
                _col("Tools", ".spec.tools"),
                _col("Ready", READY),
                _col("Suspended-By", ".status.suspendedBy"),
                AGE,
            ),
        ),
        KindInfo(
            ModelEndpoint,
            "modelendpoints",
            ("mep",),
            (
                _col("Provider", ".spec.provider"),
                _col("Model", ".spec.model"),
                _col("Ready", READY),
                AGE,
            ),
        ),
        KindInfo(
            Tool,
            "tools",
            ("otool",),
            (
                _col("Type", ".spec.type"),
                _col("Risk", ".spec.riskLevel"),
                _col("Idempotent", ".spec.idempotent", "boolean"),
                _col("Ready", READY),
                AGE,
            ),
        ),
        KindInfo(
            AgentRole,
            "agentroles",
            ("arole",),
            (
                _col("Permissions", ".spec.permissions"),
                _col("Agents", ".status.agents", "integer"),
                _col("Ready", READY),
                AGE,
            ),
        ),
        KindInfo(
            ToolPermission,
            "toolpermissions",
            ("tperm",),
            (
                _col("Tool", ".spec.toolRef"),
                _col("Mode", ".spec.matchMode"),
                _col("Requires", ".spec.requiredPermissions"),
                _col("Ready", READY),
                AGE,
            ),
        ),
        KindInfo(
            AgentPolicy,
            "agentpolicies",
            ("apol",),
            (
                _col("On-Denied", ".spec.onToolDenied"),
                _col("Max-Tokens", ".spec.maxTokensPerTask", "integer"),
                _col("Blocked", ".spec.blockedTools"),
                _col("Allowed", ".spec.allowedTools", priority=1),
                _col("Suspend", ".spec.suspend", "boolean"),
                _col("Agents", ".status.selectedAgents", "integer"),
                _col("Ready", READY),
                AGE,
            ),
        ),
        KindInfo(
            Guardrail,
            "guardrails",
            ("grail",),
            (
                _col("Type", ".spec.type"),
                _col("Points", ".spec.points"),
                _col("Ready", READY),
                AGE,
            ),
        ),
        KindInfo(
            Memory,
            "memories",
            ("omem",),
            (_col("Provider", ".spec.provider"), _col("Ready", READY), AGE),
        ),
        KindInfo(
            Task,
            "tasks",
            ("otask",),
            (
                _col("Agent", ".spec.agentRef"),
                _col("Team", ".spec.teamRef"),
                _col("Parent", ".metadata.labels.ordo\\.dev/parent"),
                _col("Phase", ".status.phase"),
                _col("Reason", ".status.reason"),
                _col("Steps", ".status.step", "integer"),
                _col("Tokens", ".status.usage.totalTokens", "integer"),
                _col("Mode", ".status.executionMode"),
                _col(
                    "Awaiting-Approval", '.status.conditions[?(@.type=="AwaitingApproval")].status'
                ),
                AGE,
            ),
            spec_rules=(TASK_SPEC_IMMUTABLE,),
        ),
        KindInfo(
            Team,
            "teams",
            ("oteam",),
            (
                _col("Strategy", ".spec.strategy"),
                _col("Ready", READY),
                AGE,
            ),
        ),
        KindInfo(
            TaskWebhook,
            "taskwebhooks",
            ("twh",),
            (
                _col("Profile", ".spec.auth.profile"),
                _col("Agent", ".spec.taskTemplate.spec.agentRef"),
                _col("Suspend", ".spec.suspend", "boolean"),
                _col("Ready", READY),
                _col("Tasks", ".status.tasksCreated", "integer"),
                _col("Last-Delivery", ".status.lastDeliveryTime", "date"),
                AGE,
            ),
        ),
        KindInfo(
            ToolApproval,
            "toolapprovals",
            ("tappr",),
            (
                _col("Task", ".spec.taskRef"),
                _col("Call", ".spec.callId"),
                _col("Decision", ".spec.decision"),
                _col("Accepted", '.status.conditions[?(@.type=="Accepted")].status'),
                _col("Why", '.status.conditions[?(@.type=="Accepted")].reason', priority=1),
                AGE,
            ),
            spec_rules=(TOOL_APPROVAL_IMMUTABLE,),
        ),
        KindInfo(
            TaskSchedule,
            "taskschedules",
            ("tsch",),
            (
                _col("Schedule", ".spec.schedule"),
                _col("Timezone", ".spec.timeZone"),
                _col("Suspend", ".spec.suspend", "boolean"),
                _col("Active", ".status.active"),
                _col("Last-Schedule", ".status.lastScheduleTime", "date"),
                _col("Ready", READY),
                AGE,
            ),
        ),
    )
}

__all__ = [
    "API_VERSION",
    "GROUP",
    "KINDS",
    "MEMORY_OPERATIONS",
    "REASONS",
    "TERMINAL_PHASES",
    "VERSION",
    "Agent",
    "AgentPolicy",
    "AgentPolicySpec",
    "AgentRole",
    "AgentRoleSpec",
    "AgentSpec",
    "Condition",
    "Guardrail",
    "GuardrailSpec",
    "KindInfo",
    "Memory",
    "MemoryOperation",
    "MemorySpec",
    "ModelEndpoint",
    "ModelEndpointSpec",
    "Resource",
    "Task",
    "TaskSchedule",
    "TaskScheduleSpec",
    "TaskSpec",
    "TaskStatus",
    "TaskWebhook",
    "TaskWebhookSpec",
    "Team",
    "TeamSpec",
    "Tool",
    "ToolApproval",
    "ToolApprovalSpec",
    "ToolPermission",
    "ToolPermissionSpec",
    "ToolSpec",
    "model_tool_name",
    "parse_duration",
    "reserved_tool_name",
]
