"""Tool-call governance (DESIGN §4): pure decisions, fail closed.

Evaluated for every tool call, in order; the first deny wins:
1. the tool is in the Agent's tool list (narrowed by the skill);
2. no AgentPolicy that selects the Agent blocks it;
3. every ToolPermission for the tool is satisfied by the Agent's roles (a missing role
   denies; with roles but no ToolPermission, `tool:<name>:invoke` is needed);
4. if the inputs could not be read, deny.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Literal


@dataclass(frozen=True, slots=True)
class PermissionRule:
    """One ToolPermission, reduced to what a decision needs."""

    name: str
    required: tuple[str, ...]
    match_mode: Literal["all", "any"] = "all"


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str


@dataclass(frozen=True)
class Governance:
    """Everything a decision needs, resolved once per run (a snapshot)."""

    candidate_tools: frozenset[str]
    """Agent.tools ∩ skill.tools (object names)."""
    blocked_by: dict[str, str] = field(default_factory=dict)
    """Tool name → the AgentPolicy that blocks it."""
    rules: dict[str, tuple[PermissionRule, ...]] = field(default_factory=dict)
    """Tool name → the ToolPermissions that name it."""
    granted: frozenset[str] = frozenset()
    """Union of the permissions of the Agent's roles."""
    has_roles: bool = False
    missing_roles: tuple[str, ...] = ()
    unreadable: str | None = None
    """Set when an input could not be read: every call is denied with this reason."""

    @property
    def effective_tools(self) -> frozenset[str]:
        return self.candidate_tools - self.blocked_by.keys()

    def decide(self, tool: str) -> Decision:
        if self.unreadable:
            return Decision(False, f"CannotDecide: {self.unreadable}")
        if tool not in self.candidate_tools:
            return Decision(False, "NotOffered")
        if tool in self.blocked_by:
            return Decision(False, f"BlockedByPolicy: {self.blocked_by[tool]}")
        if self.missing_roles:
            return Decision(False, f"RoleNotFound: {', '.join(self.missing_roles)}")
        rules = self.rules.get(tool, ())
        if not rules:
            if not self.has_roles:
                return Decision(True, "NoPermissionRequired")
            needed = f"tool:{tool}:invoke"
            if self.holds(needed):
                return Decision(True, f"Granted: {needed}")
            return Decision(False, f"MissingPermission: {needed}")
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
