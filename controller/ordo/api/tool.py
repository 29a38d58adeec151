"""Tool: an HTTP endpoint, an MCP server tool, another Agent or a remote A2A agent the model
may call."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, WithJsonSchema, field_validator

from .base import (
    CelRule,
    JsonValue,
    Name,
    OrdoModel,
    PositiveDuration,
    Resource,
    SecretKeyRef,
    StatusBase,
)
from .jsonschemas import user_schema
from .toolapproval import MAX_REQUIRED_APPROVALS

ToolType = Literal["http", "mcp", "mock", "agent", "a2a"]
RiskLevel = Literal["low", "medium", "high", "critical"]
HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
MODEL_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
BUILTIN_TOOL_PREFIX = "memory."
"""The built-in namespace: the built-in memory tools are `memory.<op>` to policies and
ToolPermissions and `memory_<op>` to the model. A Tool object named in it would pass the
allowlists and permissions written for a built-in and show the model (and the audit trail) a
built-in's name, so no Tool may be named so. Object names are DNS-1123 (no `_`), so this
prefix is also every name whose model-visible name starts `memory_`."""
RESERVED_NAME_MESSAGE = (
    "Tool names starting with 'memory.' are reserved for the built-in memory tools "
    "(the model would see a built-in's name, e.g. memory_write): rename the Tool, "
    "e.g. memory-write, and the Agents' spec.tools that name it"
)

HeaderMap = Annotated[dict[str, Annotated[str, Field(max_length=8192)]], Field(max_length=64)]
Url = Annotated[str, Field(pattern=r"^https?://", min_length=8, max_length=2048)]

ObjectSchema = Annotated[
    dict[str, Any],
    WithJsonSchema(
        {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            # Declared so the CEL rule on spec can read it (CEL sees only declared fields).
            "properties": {
                "type": {"type": "string", "description": "`object` when set."},
            },
        }
    ),
]
"""A JSON Schema of an object, stored as written."""


class HttpTool(OrdoModel):
    """How to call an HTTP tool: the model's arguments are sent as the JSON body (query string
    for GET and DELETE)."""

    url: Url
    """Endpoint URL."""
    method: HttpMethod = "POST"
    """HTTP method."""
    headers: HeaderMap | None = None
    """Extra request headers (no secrets here: use secretRef)."""
    secret_ref: SecretKeyRef | None = None
    """Secret key whose value is sent in the auth header. The Secret must carry the label
    `ordo.dev/credential: "true"`; its annotation `ordo.dev/allowed-hosts`, if any, must list
    the URL's host (docs/security.md#secrets)."""
    auth_header: Annotated[str, Field(min_length=1, max_length=256)] = "Authorization"
    """Header that carries the secret."""
    auth_scheme: Annotated[str, Field(max_length=64)] = "Bearer"
    """Prefix of the header value (`Bearer <secret>`); empty sends the secret alone."""
    allow_private_network: bool = False
    """Allow link-local and cloud-metadata addresses (169.254.0.0/16, fe80::/10), refused by default."""


class McpTool(OrdoModel):
    """How to call a tool on an MCP server over streamable HTTP."""

    url: Url
    """The MCP server endpoint (streamable HTTP), e.g. http://mcp.tools.svc:8080/mcp."""
    tool_name: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    """The tool's name on the server; defaults to this Tool's name."""
    headers: HeaderMap | None = None
    """Extra request headers."""
    secret_ref: SecretKeyRef | None = None
    """Secret key sent as `Authorization: Bearer <value>`. The Secret must carry the label
    `ordo.dev/credential: "true"`; its annotation `ordo.dev/allowed-hosts`, if any, must list
    the URL's host (docs/security.md#secrets)."""


class MockToolResult(OrdoModel):
    """A canned result, for offline examples and tests (no network call)."""

    result: JsonValue | None = None
    """What every call returns (a string or a JSON object). Unset: the arguments, echoed."""
    error: Annotated[str, Field(max_length=4096)] | None = None
    """If set, every call fails with this error (a `ToolError` result the model sees)."""


class AgentToolTarget(OrdoModel):
    """The Agent a call delegates to: each call creates one child Task of that Agent, owned
    by the calling Task (docs/concepts.md#trees)."""

    ref: Name
    """An Agent in the Tool's namespace."""


class A2aToolTarget(OrdoModel):
    """The remote A2A agent a call sends its input to (docs/a2a.md#calling-remote-agents):
    each call is one A2A task there, through the official a2a-sdk client."""

    url: Url
    """The remote agent's base URL (its card is read from `/.well-known/agent-card.json` under
    it) or the URL of its card (ending `.json`). Every URL used, the card's endpoint included,
    passes the SSRF guard (docs/security.md)."""
    headers: HeaderMap | None = None
    """Extra request headers (no secrets here: use secretRef)."""
    secret_ref: SecretKeyRef | None = None
    """Secret key sent as `Authorization: Bearer <value>`. The Secret must carry the label
    `ordo.dev/credential: "true"`; its annotation `ordo.dev/allowed-hosts`, if any, must list
    the URL's host (docs/security.md#secrets)."""


AGENT_TOOL_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "What to ask the agent."}},
    "required": ["input"],
    "additionalProperties": False,
}
"""The input schema of an `agent` Tool without its own: one string, the child Task's input."""


class ToolApprovalRequirement(OrdoModel):
    """A human must approve each call of this Tool before it runs (docs/governance.md): the
    Task waits, holding no slot, until a ToolApproval approves or rejects the call."""

    required: bool = True
    """Whether calls need an approval (an AgentPolicy's `approvalRequired` can add the
    requirement; nothing removes it)."""
    timeout: PositiveDuration | None = None
    """How long a call waits for a decision before it counts as rejected
    (`ApprovalTimedOut`); unset: the operator's `--approval-timeout` (default 24h)."""
    required_approvals: Annotated[int, Field(ge=1, le=MAX_REQUIRED_APPROVALS)] = 1
    """How many distinct people must approve each call (2: four eyes). One person counts once
    however many ToolApprovals they create; any Reject still wins."""
    exclude_requester: bool = False
    """The Task's requester (its `ordo.dev/requested-by` annotation, which the chart's
    admission policy ties to the creating user) cannot approve its calls; a Task without that
    annotation then has no approver who counts (fail closed): its calls are rejected or time
    out."""


class ToolSpec(OrdoModel):
    """Desired state of a Tool."""

    type: ToolType
    """`http`, `mcp`, `mock` (a canned result, no network: for offline examples and tests), or
    `agent` (each call runs another Agent as a child Task: docs/concepts.md#trees) or `a2a`
    (each call is a task of a remote A2A agent: docs/a2a.md#calling-remote-agents)."""
    description: Annotated[str, Field(max_length=4096)] | None = None
    """What the tool does; shown to the model."""
    input_schema: ObjectSchema | None = None
    """JSON Schema of the arguments (an object schema). mcp: taken from the server when unset."""
    http: HttpTool | None = None
    """Settings for `type: http`."""
    mcp: McpTool | None = None
    """Settings for `type: mcp`."""
    mock: MockToolResult | None = None
    """Settings for `type: mock`."""
    agent: AgentToolTarget | None = None
    """Settings for `type: agent`: the Agent each call runs as a child Task (input schema
    `{input: string}` unless `inputSchema` is set: then the arguments, as JSON, are the
    child's input). The child's limits are narrowed to what the caller has left."""
    a2a: Annotated[A2aToolTarget | None, Field(alias="a2a")] = None
    """Settings for `type: a2a`: the remote agent each call sends a message to (input schema
    `{input: string}` unless `inputSchema` is set: then the arguments, as JSON, are the
    message). The call waits for the remote task to end, at most `timeout`, then cancels it."""
    timeout: PositiveDuration = "30s"
    """Deadline of one call."""
    risk_level: RiskLevel = "low"
    """Informational risk class, recorded with each decision."""
    idempotent: bool = False
    """Safe to repeat: after an operator restart a call that may have started is re-run only when true."""
    approval: ToolApprovalRequirement | None = None
    """Human approval of each call before it runs."""

    _check_input_schema = field_validator("input_schema")(user_schema)

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="self.type != 'http' || has(self.http)",
            message="an http Tool needs spec.http.url",
            check=lambda s: s.type != "http" or s.http is not None,
        ),
        CelRule(
            rule="self.type != 'mcp' || has(self.mcp)",
            message="an mcp Tool needs spec.mcp.url",
            check=lambda s: s.type != "mcp" or s.mcp is not None,
        ),
        CelRule(
            rule="[has(self.http), has(self.mcp), has(self.mock), has(self.agent), has(self.a2a)]"
            ".filter(x, x).size() <= 1",
            message="set only one of spec.http, spec.mcp, spec.mock, spec.agent and spec.a2a",
            check=lambda s: (
                sum(x is not None for x in (s.http, s.mcp, s.mock, s.agent, s.a2a)) <= 1
            ),
        ),
        CelRule(
            rule="self.type != 'a2a' || has(self.a2a)",
            message="an a2a Tool needs spec.a2a.url",
            check=lambda s: s.type != "a2a" or s.a2a is not None,
        ),
        CelRule(
            rule="self.type == 'a2a' || !has(self.a2a)",
            message="spec.a2a is only valid with type a2a",
            check=lambda s: s.a2a is None or s.type == "a2a",
        ),
        CelRule(
            rule="self.type != 'agent' || has(self.agent)",
            message="an agent Tool needs spec.agent.ref",
            check=lambda s: s.type != "agent" or s.agent is not None,
        ),
        CelRule(
            rule="self.type == 'agent' || !has(self.agent)",
            message="spec.agent is only valid with type agent",
            check=lambda s: s.agent is None or s.type == "agent",
        ),
        CelRule(
            rule="(self.type == 'http') == has(self.http) || !has(self.http)",
            message="spec.http is only valid with type http",
            check=lambda s: s.http is None or s.type == "http",
        ),
        CelRule(
            rule="(self.type == 'mcp') == has(self.mcp) || !has(self.mcp)",
            message="spec.mcp is only valid with type mcp",
            check=lambda s: s.mcp is None or s.type == "mcp",
        ),
        CelRule(
            rule="!has(self.inputSchema) || !has(self.inputSchema.type) || self.inputSchema.type == 'object'",
            message="spec.inputSchema must be an object schema (type: object)",
            check=lambda s: (
                s.input_schema is None or s.input_schema.get("type", "object") == "object"
            ),
        ),
    )


class ToolStatus(StatusBase):
    """Observed state: for mcp, `Ready` says whether the server lists the tool."""


def reserved_tool_name(object_name: str) -> bool:
    """Whether `object_name` is in the built-in namespace (`BUILTIN_TOOL_PREFIX`), or maps to
    a model-visible name there: no Tool may have such a name."""
    return object_name.startswith(BUILTIN_TOOL_PREFIX) or object_name.replace(".", "_").startswith(
        "memory_"
    )


def model_tool_name(object_name: str) -> str:
    """The function name the model sees for a Tool: the object name with `.` mapped to `_`
    (providers accept `[a-zA-Z0-9_-]{1,64}`). Raises ValueError when it cannot fit."""
    candidate = object_name.replace(".", "_")
    if not MODEL_TOOL_NAME.match(candidate):
        raise ValueError(
            f"Tool name {object_name!r} cannot be a model function name: "
            "use at most 64 characters of [a-z0-9-.]"
        )
    return candidate


class Tool(Resource):
    """A callable tool."""

    kind: Literal["Tool"] = "Tool"
    spec: ToolSpec
    status: ToolStatus | None = None

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="size(self.metadata.name) <= 64",
            message="Tool names are at most 64 characters (the model sees the name as a function name)",
            check=lambda t: len(t.metadata.name or "") <= 64,
            field_path="metadata.name",
        ),
        # New Tools only: names are immutable, so an update (any status write included) is of
        # a Tool stored before this rule, which the operator refuses itself (`ReservedName`);
        # the API server must still accept its status.
        CelRule(
            rule="oldSelf.hasValue() || !self.metadata.name.startsWith('memory.')",
            message=RESERVED_NAME_MESSAGE,
            check=lambda t: not reserved_tool_name(t.metadata.name or ""),
            field_path="metadata.name",
            optional_old_self=True,
        ),
    )
