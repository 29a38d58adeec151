"""The snapshot of one run: every object it reads, frozen at resolution time."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..api import Agent, Memory, ModelEndpoint, Task
from ..api.agent import Skill
from ..engine.governance import Governance
from ..engine.livepolicy import PolicyRefresh
from ..engine.state import OnToolDenied
from ..engine.tooling import ResolvedTool
from .guardrails import ResolvedGuardrail


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
    agent_generation: int | None = None
    notes: list[str] = field(default_factory=list)
    guardrails: tuple[ResolvedGuardrail, ...] = ()
    """The Agent's Guardrails, in its order (runtime/guardrails.py)."""
    policy_refresh: PolicyRefresh | None = field(default=None, compare=False, repr=False)
    """Re-reads the governance objects at each step boundary (runtime/policies.py
    `live_policy`); the only part of a snapshot that is not frozen at resolution."""
