"""Governance inputs of one run: the AgentPolicies that select the Agent, roles and
permissions, and the limits. Everything here fails closed:

- AgentPolicies that cannot be listed, or one that does not parse, end the Task
  `PolicyUnavailable` before any model call (its caps would otherwise silently vanish);
- an AgentRole or ToolPermission that cannot be read puts governance in the cannot-decide
  state, which denies every tool call;
- limits only narrow: the smallest of the Agent's, the Task's and every policy's applies;
- `allowedTools` only narrows (policies intersect), and a policy with `suspend: true` stops
  the Agents it selects;
- `live_policy` re-reads all of it at each step boundary of a run (engine/livepolicy.py).

Each object is parsed once per uid and resourceVersion (runtime/parsecache.py, shared models:
never mutate them); one that does not parse is refused at every read, never cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..api import (
    MEMORY_OPERATIONS,
    Agent,
    AgentPolicy,
    AgentRole,
    ModelEndpoint,
    Task,
    ToolPermission,
    parse_duration,
)
from ..api.agent import Skill
from ..engine.governance import (
    ApprovalRule,
    BoundRule,
    Governance,
    OnToolDenied,
    PermissionRule,
    PolicyRefresh,
    PolicyUpdate,
    memory_policy_names,
)
from ..errors import PolicyUnavailable, ResolutionError, StoreError
from .parsecache import CACHE
from .store import ObjectStore


def _name(body: dict[str, Any]) -> str:
    meta = body.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else "?"


async def selecting_policies(store: ObjectStore, agent: Agent) -> list[AgentPolicy]:
    """The AgentPolicies of the namespace that select `agent`, sorted by name."""
    try:
        bodies = await store.list("AgentPolicy", agent.namespace)
    except StoreError as exc:
        raise PolicyUnavailable(
            f"AgentPolicies in namespace {agent.namespace!r} could not be listed ({exc}); "
            "the run fails closed"
        ) from None
    policies: list[AgentPolicy] = []
    for body in bodies:
        try:
            policy = CACHE.parse(AgentPolicy, body, f"AgentPolicy {_name(body)!r}")
        except ResolutionError as exc:  # "AgentPolicy 'x' is invalid at <field>"; never cached
            raise PolicyUnavailable(
                f"{exc.message}; fix or delete it (the run fails closed)"
            ) from None
        selector = policy.spec.agent_selector
        if selector is None or selector.matches(agent.metadata.labels or {}):
            policies.append(policy)
    policies.sort(key=lambda p: p.name)
    return policies


def check_model_allowed(policies: list[AgentPolicy], endpoint: ModelEndpoint) -> None:
    """`allowedModels` names models, and matches the model that will be called — never the
    ModelEndpoint's name (whoever may create endpoints could otherwise route an allowed name
    to any model)."""
    model = endpoint.spec.effective_model()
    for policy in policies:
        allowed = policy.spec.allowed_models
        if allowed and model not in allowed:
            raise ResolutionError(
                "ModelNotAllowed",
                f"model {model!r} of ModelEndpoint {endpoint.name!r} is not in allowedModels of "
                f"AgentPolicy {policy.name!r}",
            )


def blocked_tools(policies: list[AgentPolicy]) -> dict[str, str]:
    """Tool name → the first policy (by name) that blocks it."""
    blocked: dict[str, str] = {}
    for policy in policies:
        for tool in policy.spec.blocked_tools or []:
            blocked.setdefault(tool, policy.name)
    return blocked


def suspending_policy(policies: list[AgentPolicy]) -> str | None:
    """The first selecting policy (by name) with `suspend: true`, or None."""
    return next((p.name for p in policies if p.spec.suspend), None)


def check_not_suspended(policies: list[AgentPolicy], agent: Agent) -> None:
    """New Tasks of a suspended Agent end `AgentSuspended` before any model call."""
    policy = suspending_policy(policies)
    if policy is not None:
        raise ResolutionError(
            "AgentSuspended",
            f"Agent {agent.name!r} is suspended by AgentPolicy {policy!r} (spec.suspend); no "
            "model was called",
        )


def allowlists(policies: list[AgentPolicy]) -> tuple[tuple[str, frozenset[str]], ...]:
    """(policy name, `allowedTools`) of every policy that sets an allowlist, by name."""
    return tuple(
        (p.name, frozenset(p.spec.allowed_tools))
        for p in policies
        if p.spec.allowed_tools is not None
    )


def check_tools_allowed(policies: list[AgentPolicy], agent: Agent, candidates: list[str]) -> None:
    """An Agent that lists a tool outside a selecting policy's `allowedTools` (a Tool the run
    would offer, or an operation its `memory.allow` names explicitly) fails `ToolDenied`
    before any model call. Memory operations `memory.allow` leaves implicit are narrowed to
    the allowlist silently (governance offers only those)."""
    memory = agent.spec.memory
    explicit_ops = list(memory.allow or []) if memory is not None and memory.ref else []
    for policy, allowed in allowlists(policies):
        outside = [t for t in candidates if t not in allowed]
        outside += [
            f"memory.{op}"
            for op in explicit_ops
            if not any(n in allowed for n in memory_policy_names(op))
        ]
        if outside:
            shown = ", ".join(outside[:10]) + (" ..." if len(outside) > 10 else "")
            raise ResolutionError(
                "ToolDenied",
                f"Agent {agent.name!r} lists tools outside allowedTools of AgentPolicy "
                f"{policy!r}: {shown}; no model was called",
            )


def on_tool_denied(policies: list[AgentPolicy]) -> OnToolDenied:
    """`ReturnError` only if every selecting policy says so (and there is one)."""
    if policies and all(p.spec.on_tool_denied == "ReturnError" for p in policies):
        return "ReturnError"
    return "Fail"


def candidate_tools(agent: Agent, skill: Skill | None) -> list[str]:
    """The Agent's tools, narrowed by the skill's (a skill never adds one)."""
    candidates = list(agent.spec.tools or [])
    if skill is not None and skill.tools is not None:
        candidates = [t for t in candidates if t in skill.tools]
    return candidates


def governance(
    agent: Agent,
    skill: Skill | None,
    memory: str | None,
    policies: list[AgentPolicy],
    perms: Permissions,
) -> Governance:
    """The Governance of a run from its inputs (at resolution, and at each re-read)."""
    spec = agent.spec
    operations: tuple[str, ...] = ()
    if memory is not None and spec.memory is not None:
        operations = (
            tuple(spec.memory.allow) if spec.memory.allow is not None else MEMORY_OPERATIONS
        )
    return Governance(
        candidate_tools=frozenset(candidate_tools(agent, skill)),
        blocked_by=blocked_tools(policies),
        rules=perms.rules,
        granted=perms.granted,
        has_roles=bool(spec.roles),
        missing_roles=perms.missing_roles,
        unreadable=perms.unreadable,
        memory=memory,
        memory_operations=frozenset(operations),
        allowlists=allowlists(policies),
        approvals=approval_requirements(policies),
        tool_rules=tool_rules(policies),
    )


def tool_rules(policies: list[AgentPolicy]) -> tuple[BoundRule, ...]:
    """Every selecting policy's `toolRules` (compiled when the policy was parsed), by policy
    name, then in the order the policy lists them."""
    return tuple(BoundRule(p.name, rule) for p in policies for rule in p.spec.tool_rules or [])


def approval_requirements(policies: list[AgentPolicy]) -> dict[str, ApprovalRule]:
    """Tool name → the first policy (by name) whose `approvalRequired` lists it."""
    required: dict[str, ApprovalRule] = {}
    for policy in policies:
        for tool in policy.spec.approval_required or []:
            required.setdefault(tool, ApprovalRule(f"AgentPolicy {policy.name}"))
    return required


def live_policy(
    store: ObjectStore, task: Task, agent: Agent, skill: Skill | None, memory: str | None
) -> PolicyRefresh:
    """The run's re-read hook: AgentPolicies, AgentRoles and ToolPermissions through `store`
    (the operator's is watch-fed, so a re-read costs no API request). The Agent, the Task and
    the skill are the run's snapshot; only the governance objects are read again. Raises
    PolicyUnavailable as at resolution; unreadable roles or permissions deny every call."""

    async def refresh() -> PolicyUpdate:
        policies = await selecting_policies(store, agent)
        perms = await permissions(store, agent)
        limits = effective_limits(agent, task, policies)
        return PolicyUpdate(
            governance=governance(agent, skill, memory, policies, perms),
            suspended_by=suspending_policy(policies),
            max_steps=limits.max_steps,
            token_budget=limits.token_budget,
            on_tool_denied=on_tool_denied(policies),
        )

    return refresh


@dataclass(frozen=True)
class Permissions:
    granted: frozenset[str]
    missing_roles: tuple[str, ...]
    rules: dict[str, tuple[PermissionRule, ...]]
    unreadable: str | None
    """Why governance cannot decide (a role or permission could not be read), if so."""


async def permissions(store: ObjectStore, agent: Agent) -> Permissions:
    """The permissions the Agent's roles grant and the ToolPermission rules of its namespace."""
    ns = agent.namespace
    unreadable: str | None = None
    granted: set[str] = set()
    missing: list[str] = []
    for role_name in agent.spec.roles or []:
        try:
            body = await store.get("AgentRole", ns, role_name)
        except StoreError as exc:
            unreadable = unreadable or f"AgentRole {role_name!r} could not be read ({exc})"
            continue
        if body is None:
            missing.append(role_name)
            continue
        try:
            role = CACHE.parse(AgentRole, body, f"AgentRole {role_name!r}")
        except ResolutionError:
            unreadable = unreadable or f"AgentRole {role_name!r} is invalid"
            continue
        granted.update(role.spec.permissions)
    rules: dict[str, list[PermissionRule]] = {}
    try:
        bodies = await store.list("ToolPermission", ns)
    except StoreError as exc:
        bodies = []
        unreadable = unreadable or f"ToolPermissions could not be read ({exc})"
    for body in bodies:
        name = _name(body)
        try:
            perm = CACHE.parse(ToolPermission, body, f"ToolPermission {name!r}")
        except ResolutionError:
            unreadable = unreadable or f"ToolPermission {name!r} is invalid"
            continue
        rules.setdefault(perm.spec.tool_ref, []).append(
            PermissionRule(perm.name, tuple(perm.spec.required_permissions), perm.spec.match_mode)
        )
    return Permissions(
        granted=frozenset(granted),
        missing_roles=tuple(missing),
        rules={k: tuple(sorted(v, key=lambda r: r.name)) for k, v in rules.items()},
        unreadable=unreadable,
    )


@dataclass(frozen=True)
class Limits:
    max_steps: int
    timeout: float
    """Seconds; always > 0."""
    token_budget: int | None
    max_delegation_depth: int | None = None
    """The smallest of the policies' `maxDelegationDepth` (None: none sets one)."""


def _smallest(*values: int | None) -> int | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def effective_limits(agent: Agent, task: Task, policies: list[AgentPolicy]) -> Limits:
    """The narrowest of the Agent's, the Task's and the policies' limits. A Task (or policy)
    can only narrow; a duration that is not positive is refused, never read as "no limit"."""
    own = task.spec.limits
    max_steps = _smallest(
        agent.spec.limits.max_steps,
        own.max_steps if own else None,
        *(p.spec.max_steps for p in policies),
    )
    timeouts = [("Agent spec.limits.timeout", agent.spec.limits.timeout)]
    if own is not None and own.timeout:
        timeouts.append(("Task spec.limits.timeout", own.timeout))
    seconds: list[float] = []
    for field_name, value in timeouts:
        parsed = parse_duration(value)
        if parsed <= 0:
            raise ResolutionError(
                "InvalidSpec",
                f"{field_name} must be a positive duration such as 30s (got {value!r})",
            )
        seconds.append(parsed)
    budget = _smallest(
        agent.spec.limits.max_tokens,
        own.max_tokens if own else None,
        *(p.spec.max_tokens_per_task for p in policies),
    )
    if max_steps is None or max_steps < 1:
        raise ResolutionError("InvalidSpec", "maxSteps must be at least 1")
    depth = _smallest(*(p.spec.max_delegation_depth for p in policies))
    return Limits(max_steps, min(seconds), budget, depth)
