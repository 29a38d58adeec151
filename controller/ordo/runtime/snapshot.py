"""The snapshot of one run: every object it reads, frozen at resolution time, and its content
hash (`content_hashes`), which a resumed run compares with the one its checkpoint recorded.

The hash is versioned. `v2:<16 hex>` covers the ToolPermissions that apply to the run's tools;
the hash of earlier versions (16 hex digits, no prefix) did not. A checkpoint written before
the upgrade is compared against the formula of its time (`legacy_hash`), so the upgrade ends
no Task whose objects did not change; `same_content` picks the formula by the prefix."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ..api import Agent, Memory, ModelEndpoint, Task
from ..api.agent import Skill
from ..engine.governance import Governance, OnToolDenied, PolicyRefresh
from ..engine.tooling import ResolvedTool
from .guardrails import ResolvedGuardrail

HASH_VERSION = "v2"


def _digest(content: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()[:16]


def content_hashes(content: dict[str, Any], permissions: dict[str, Any]) -> tuple[str, str]:
    """(the `v2:` hash of `content` with the ToolPermissions, the earlier formula's hash of
    `content` alone)."""
    current = _digest({**content, "toolPermissions": permissions})
    return f"{HASH_VERSION}:{current}", _digest(content)


@dataclass(frozen=True)
class Snapshot:
    """Everything one run reads, frozen at resolution time."""

    task: Task
    agent: Agent
    endpoint: ModelEndpoint
    api_key: str | None
    tools: dict[str, ResolvedTool]
    """Object name → tool, for every tool the run may offer (after skill and policy)."""
    governance: Governance
    memory: Memory | None
    memory_secret: str | None
    memory_operations: tuple[str, ...]
    skill: Skill | None
    max_steps: int
    timeout: float
    token_budget: int | None
    output_schema: dict[str, Any] | None
    on_tool_denied: OnToolDenied
    policies: tuple[str, ...] = ()
    content_hash: str = ""
    """`v2:` + 16 hex digits (`content_hashes`)."""
    legacy_hash: str = ""
    """The same content by the formula before ToolPermissions were hashed (no prefix)."""
    agent_generation: int | None = None
    notes: list[str] = field(default_factory=list)
    guardrails: tuple[ResolvedGuardrail, ...] = ()
    """The Agent's Guardrails, in its order (runtime/guardrails.py)."""
    max_delegation_depth: int | None = None
    """The smallest of the selecting policies' `maxDelegationDepth` (None: none sets one);
    the front end's limit narrows it further (runtime/wiring.py `run_config`)."""
    policy_refresh: PolicyRefresh | None = field(default=None, compare=False, repr=False)
    """Re-reads the governance objects at each step boundary (runtime/policies.py
    `live_policy`); the only part of a snapshot that is not frozen at resolution."""

    def same_content(self, recorded: str) -> bool:
        """Whether a hash an earlier execution recorded names this snapshot's content: a
        `v2:` hash compared with `content_hash`, a hash without a prefix (written before the
        upgrade) with `legacy_hash`; any other form never matches."""
        if recorded.startswith(f"{HASH_VERSION}:"):
            return recorded == self.content_hash
        return ":" not in recorded and recorded == self.legacy_hash
