"""Tool-call governance (DESIGN §4): pure decisions, fail closed.

Every tool call is decided here, the built-in memory tools included. In order; the first deny
wins:
0. if an input could not be read, deny (`CannotDecide`) — every call, built-ins included;
1. the tool is offered: a Tool in the Agent's tool list (narrowed by the skill), or a memory
   operation in the effective `memory.allow` of a wired Memory (`NotOffered`);
2. no AgentPolicy that selects the Agent blocks it (`BlockedByPolicy`); a policy names the
   memory tool `memory_<op>` as `memory.<op>` in `blockedTools` (the DNS-1123 spelling of the
   model-visible name, as a Tool `web.search` is `web_search` to the model), `memory_<op>` is
   matched too;
2b. every selecting AgentPolicy with `allowedTools` lists it, spelled the same way
   (`NotAllowedByPolicy`); several allowlists intersect;
3. every AgentRole the Agent lists exists (`RoleNotFound`);
4. every ToolPermission naming the tool (for memory: `toolRef: memory.<op>`) is satisfied by the
   Agent's roles; with roles but no ToolPermission, a Tool needs `tool:<name>:invoke` and a
   memory operation `memory:<memory name>:<op>` (`MissingPermission`). An Agent without roles
   and without a ToolPermission for the tool may call it (`NoPermissionRequired`).

A call these checks allow then meets the policies' argument-aware `toolRules`
(engine/toolrules.py, once its arguments are known to be valid).

Every Decision's reason is bounded (`REASON_MAX_CHARS`, the CRD's `toolCalls[].reason`) and
single-line, so whatever a policy or an API error says, the status write fits.

A run re-reads its governance at each step boundary (engine/livepolicy.py); the fresh
Governance carries the start-time one in `within`, and a call must pass both: a change made
mid-run can take a permission away, never add one.

The types the rest of the engine shares about policy live here, at the bottom of the engine's
imports (state, approvals and livepolicy all read them, none of them is read here): why a call
needs a human approval (`ApprovalRule`), what a denial does to the run (`OnToolDenied`), and
what a policy re-read found (`PolicyUpdate`, through the runtime's `PolicyRefresh` hook).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Literal

from ..api.agent import MEMORY_OPERATIONS
from ..api.policy import ToolRule

REASON_MAX_CHARS = 1024
"""`status.toolCalls[].reason` maxLength in the Task CRD."""
TRUNCATED_MARKER = "...[truncated]"

MEMORY_TOOL_PREFIX = "memory_"


def memory_tool_name(operation: str) -> str:
    """The model-visible name of a built-in memory tool, e.g. `memory_read`; also its identity
    for governance (`ToolBinding.object_name` of a memory binding)."""
    return f"{MEMORY_TOOL_PREFIX}{operation}"


def memory_operation(tool: str) -> str | None:
    """The memory operation a built-in tool name stands for (`memory_read` → `read`), or None
    when `tool` names no memory operation."""
    if not tool.startswith(MEMORY_TOOL_PREFIX):
        return None
    op = tool[len(MEMORY_TOOL_PREFIX) :]
    return op if op in MEMORY_OPERATIONS else None


def memory_policy_names(operation: str) -> tuple[str, str]:
    """The names a policy (`blockedTools`) or a ToolPermission (`toolRef`) may use for a memory
    operation: `memory.<op>` (valid as an object name) and the model-visible `memory_<op>`."""
    return (f"memory.{operation}", memory_tool_name(operation))


def bounded_reason(reason: str) -> str:
    """`reason` on one line and at most REASON_MAX_CHARS characters, with a marker when cut."""
    if len(reason) <= REASON_MAX_CHARS and reason.isprintable():
        return reason  # the usual case: nothing to replace or cut
    text = "".join(c if c.isprintable() else " " for c in reason)
    if len(text) <= REASON_MAX_CHARS:
        return text
    return text[: REASON_MAX_CHARS - len(TRUNCATED_MARKER)] + TRUNCATED_MARKER


OnToolDenied = Literal["Fail", "ReturnError"]
"""What a denied call does to the run (AgentPolicy `onToolDenied`): end it, or answer the
model with an error result and go on."""


@dataclass(frozen=True, slots=True)
class ApprovalRule:
    """Why a tool needs approval: the Tool itself or a policy, and its timeout (None: the
    run's default). Engine/approvals.py settles the calls it applies to."""

    source: str
    timeout: float | None = None
    approvals: int = 1
    """Distinct approvers a call needs (four eyes: 2)."""
    requester_excluded: bool = False
    """The Task's requester cannot be one of them."""


@dataclass(frozen=True, slots=True)
class BoundRule:
    """An AgentPolicy's tool rule (`spec.toolRules[]`, compiled); engine/toolrules.py
    evaluates it per call."""

    policy: str
    rule: ToolRule

    @property
    def label(self) -> str:
        """`<policy>/<rule>`: how records and messages name it."""
        return f"{self.policy}/{self.rule.name}"


@dataclass(frozen=True, slots=True)
class PermissionRule:
    """One ToolPermission, reduced to what a decision needs."""

    name: str
    required: tuple[str, ...]
    match_mode: Literal["all", "any"] = "all"


@dataclass(frozen=True, slots=True)
class Decision:
    """A verdict on one call. The reason is bounded and single-line on construction."""

    allowed: bool
    reason: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", bounded_reason(self.reason))


@dataclass(frozen=True)
class Governance:
    """Everything a decision needs, resolved once per run (a snapshot).

    Constructed with keywords; every field but `candidate_tools` has a default. Without
    `memory` / `memory_operations` no memory tool is offered (fail closed)."""

    candidate_tools: frozenset[str]
    """Agent.tools ∩ skill.tools (object names)."""
    blocked_by: dict[str, str] = field(default_factory=dict)
    """Tool name (or `memory.<op>` / `memory_<op>`) → the AgentPolicy that blocks it."""
    rules: dict[str, tuple[PermissionRule, ...]] = field(default_factory=dict)
    """Tool name (or `memory.<op>` / `memory_<op>`) → the ToolPermissions that name it."""
    granted: frozenset[str] = frozenset()
    """Union of the permissions of the Agent's roles."""
    has_roles: bool = False
    missing_roles: tuple[str, ...] = ()
    unreadable: str | None = None
    """Set when an input could not be read: every call is denied with this reason."""
    memory: str | None = None
    """The Memory object the Agent wires in (`spec.memory.ref`), if any."""
    memory_operations: frozenset[str] = frozenset()
    """The operations `memory.allow` offers (all five when unset); empty without a Memory."""
    allowlists: tuple[tuple[str, frozenset[str]], ...] = ()
    """(policy name, its `allowedTools`) for every selecting policy that sets one, by name."""
    approvals: dict[str, ApprovalRule] = field(default_factory=dict)
    """Tool name (or `memory.<op>` / `memory_<op>`) → why a call of it needs a human approval
    (engine/approvals.py); with `within`, the requirements of both apply."""
    tool_rules: tuple[BoundRule, ...] = ()
    """The selecting policies' `toolRules`, by policy name then position; with `within`, the
    rules of both apply (engine/toolrules.py)."""
    within: Governance | None = None
    """The governance this one narrows (the run's start-time one): it must allow a call too."""

    @property
    def effective_tools(self) -> frozenset[str]:
        return frozenset(
            t
            for t in self.candidate_tools - self.blocked_by.keys()
            if self._disallowing_policy((t,)) is None
        )

    def offers(self, tool: str, *, builtin: bool = False) -> bool:
        """Whether a bound tool may still be offered to the model: not blocked, and inside
        every allowlist (here and in `within`). Permissions are decided per call."""
        names: tuple[str, ...] = (tool,)
        if builtin:
            op = memory_operation(tool)
            if op is None:
                return False
            names = memory_policy_names(op)
        if any(n in self.blocked_by for n in names) or self._disallowing_policy(names):
            return False
        return self.within is None or self.within.offers(tool, builtin=builtin)

    def narrowed_by(self, fresh: Governance) -> Governance:
        """`fresh` (re-read mid-run) checked against this start-time governance as well."""
        base = self if self.within is None else self.within
        return replace(fresh, within=base)

    def _disallowing_policy(self, names: tuple[str, ...]) -> str | None:
        """The first policy whose allowlist names none of `names`, or None."""
        for policy, allowed in self.allowlists:
            if not any(n in allowed for n in names):
                return policy
        return None

    @property
    def effective_memory_operations(self) -> tuple[str, ...]:
        """The memory operations to offer the model (in MEMORY_OPERATIONS order): those
        allowed by `memory.allow`, minus those a policy blocks; none without a Memory."""
        if self.memory is None:
            return ()
        return tuple(
            op
            for op in MEMORY_OPERATIONS
            if op in self.memory_operations
            and self._blocking_policy(op) is None
            and self._disallowing_policy(memory_policy_names(op)) is None
        )

    def decide(self, tool: str, *, builtin: bool = False) -> Decision:
        """Decide one call. `tool` is the Tool object name, or, with `builtin=True`, the
        name of a built-in memory tool (`memory_<op>`). With `within`, both must allow it."""
        decision = self._decide_here(tool, builtin=builtin)
        if not decision.allowed or self.within is None:
            return decision
        earlier = self.within.decide(tool, builtin=builtin)
        return decision if earlier.allowed else earlier

    def _decide_here(self, tool: str, *, builtin: bool = False) -> Decision:
        if self.unreadable:
            return Decision(False, f"CannotDecide: {self.unreadable}")
        if builtin:
            return self._decide_memory(tool)
        if tool not in self.candidate_tools:
            return Decision(False, self._unbound_reason(tool))
        if tool in self.blocked_by:
            return Decision(False, f"BlockedByPolicy: {self.blocked_by[tool]}")
        outside = self._disallowing_policy((tool,))
        if outside is not None:
            return Decision(False, f"NotAllowedByPolicy: {outside}")
        return self._permitted(self.rules.get(tool, ()), f"tool:{tool}:invoke")

    def _decide_memory(self, tool: str) -> Decision:
        op = memory_operation(tool)
        if op is None or self.memory is None or op not in self.memory_operations:
            return Decision(False, "NotOffered")
        policy = self._blocking_policy(op)
        if policy is not None:
            return Decision(False, f"BlockedByPolicy: {policy}")
        outside = self._disallowing_policy(memory_policy_names(op))
        if outside is not None:
            return Decision(False, f"NotAllowedByPolicy: {outside}")
        rules = tuple(r for name in memory_policy_names(op) for r in self.rules.get(name, ()))
        return self._permitted(rules, f"memory:{self.memory}:{op}")

    def _unbound_reason(self, tool: str) -> str:
        """Why a call of a name with no Tool is denied: `NotOffered`, or, for a memory tool a
        policy blocks (so it was not bound), the policy. Only ever a denial."""
        op = memory_operation(tool)
        if op is not None and self.memory is not None and op in self.memory_operations:
            policy = self._blocking_policy(op)
            if policy is not None:
                return f"BlockedByPolicy: {policy}"
            outside = self._disallowing_policy(memory_policy_names(op))
            if outside is not None:
                return f"NotAllowedByPolicy: {outside}"
        return "NotOffered"

    def _blocking_policy(self, operation: str) -> str | None:
        for name in memory_policy_names(operation):
            if name in self.blocked_by:
                return self.blocked_by[name]
        return None

    def _permitted(self, rules: tuple[PermissionRule, ...], default_needed: str) -> Decision:
        """Checks 3 and 4: the roles exist, and they satisfy the ToolPermissions (or, with
        roles and no ToolPermission, grant `default_needed`)."""
        if self.missing_roles:
            return Decision(False, f"RoleNotFound: {', '.join(self.missing_roles)}")
        if not rules:
            if not self.has_roles:
                return Decision(True, "NoPermissionRequired")
            if self.holds(default_needed):
                return Decision(True, f"Granted: {default_needed}")
            return Decision(False, f"MissingPermission: {default_needed}")
        for rule in rules:
            held = [p for p in rule.required if self.holds(p)]
            ok = len(held) == len(rule.required) if rule.match_mode == "all" else bool(held)
            if not ok:
                missing = [p for p in rule.required if p not in held]
                return Decision(
                    False,
                    f"MissingPermission: {rule.match_mode} of {', '.join(missing)} ({rule.name})",
                )
        return Decision(True, "Granted")

    def holds(self, permission: str) -> bool:
        """Whether the roles grant `permission`; a granted `*` segment matches any value."""
        if permission in self.granted:
            return True
        parts = permission.split(":")
        for grant in self.granted:
            gparts = grant.split(":")
            if len(gparts) == len(parts) and all(
                fnmatchcase(p, g) for p, g in zip(parts, gparts, strict=True)
            ):
                return True
        return False


@dataclass(frozen=True)
class PolicyUpdate:
    """What a policy re-read found (engine/livepolicy.py narrows the run with it). None means
    "sets no value"."""

    governance: Governance
    suspended_by: str | None = None
    """The first (by name) selecting AgentPolicy with `suspend: true`."""
    max_steps: int | None = None
    token_budget: int | None = None
    on_tool_denied: OnToolDenied | None = None


PolicyRefresh = Callable[[], Awaitable[PolicyUpdate]]
"""The runtime's re-read hook (runtime/policies.py `live_policy`)."""
