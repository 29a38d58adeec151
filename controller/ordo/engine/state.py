"""Run configuration, resumable run state, and the result of a run."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..api.phases import RunPhase, TerminalPhase
from ..api.task import Reason, ToolCallRecord
from ..errors import OrdoError
from .approvals import DEFAULT_TIMEOUT_SECONDS, ApprovalDecider, PendingApproval
from .delegation import DEFAULT_MAX_DEPTH, ChildRecord, Delegator, Lineage
from .governance import Governance, OnToolDenied, PolicyRefresh
from .guardrails import GuardrailRecord
from .remote import RemoteRecord
from .toolrules import RuleSubject
from .transcript import AssistantMessage, Item, Usage, item_from_dict, item_to_dict

__all__ = [
    "OnToolDenied",
    "Phase",
    "RunConfig",
    "RunResult",
    "RunState",
    "TerminalPhase",
    "ToolCallRecord",
]

Phase = RunPhase
"""How a run stops (api/phases.py): `AwaitingApproval` is not terminal, the run stopped to
wait for a human (approvals.py); a terminal phase (`TerminalPhase`) ends it."""


@dataclass(frozen=True)
class RunConfig:
    """Everything the loop needs besides the model, the tools and the listeners."""

    system_prompt: str
    user_message: str
    governance: Governance
    max_steps: int = 10
    timeout: float | None = 300.0
    token_budget: int | None = None
    output_schema: dict[str, Any] | None = None
    on_tool_denied: OnToolDenied = "Fail"
    elapsed: float = 0.0
    """Seconds of `timeout` already spent (the deadline is anchored at the first start, so a
    resumed run or a slow set-up does not get a fresh full timeout)."""
    policy_refresh: PolicyRefresh | None = field(default=None, compare=False)
    """Re-reads the governance at each step boundary (engine/livepolicy.py); None: the
    start-time governance holds for the whole run."""
    approval_decider: ApprovalDecider | None = field(default=None, compare=False)
    """Finds the decisions on a call that needs approval (engine/approvals.py); None: no
    decision ever comes, so such a call waits (the run ends `AwaitingApproval`)."""
    approval_timeout: float = DEFAULT_TIMEOUT_SECONDS
    """Seconds a call waits for a decision unless its requirement sets a timeout."""
    clock: Callable[[], float] = field(default=time.time, compare=False)
    """Wall clock (epoch seconds) for approval requests and deadlines."""
    rule_subject: RuleSubject = field(default_factory=RuleSubject)
    """The Agent and the Task as AgentPolicy tool rules read them (`agent`, `task`)."""
    delegator: Delegator | None = field(default=None, compare=False)
    """Starts (or finds) the child Tasks of `agent` Tool calls (engine/delegating.py); None:
    such a call gets an error result, delegation is not available here."""
    lineage: Lineage = field(default_factory=lambda: Lineage("", ()))
    """Where the Task sits in its tree: a call to an Agent on its chain is a cycle."""
    max_delegation_depth: int = DEFAULT_MAX_DEPTH
    """A Task at this depth (the root is 0) may not delegate."""


@dataclass
class RunState:
    """Where a run is: the checkpoint a restarted operator resumes from."""

    items: list[Item] = field(default_factory=list)
    step: int = 0
    usage: Usage = field(default_factory=Usage)
    records: list[ToolCallRecord] = field(default_factory=list)
    used_tools: set[str] = field(default_factory=set)
    """Model-visible names of tools already called (no longer offered)."""
    started_calls: set[str] = field(default_factory=set)
    """Ids of non-idempotent calls that may have started (recorded before they start)."""
    seen_ids: set[str] = field(default_factory=set)
    """Every tool-call id of the run so far (engine/sanitize.py keeps ids unique with it)."""
    guardrail_records: list[GuardrailRecord] = field(default_factory=list)
    """Guardrails that fired (engine/guardrails.py); never the text."""
    approvals: dict[str, PendingApproval] = field(default_factory=dict)
    """Calls waiting for a human decision, by call id (engine/approvals.py)."""
    awaiting_since: float | None = None
    """When the run stopped to wait for approvals (epoch seconds)."""
    paused_seconds: float = 0.0
    """Time spent waiting for approvals so far: not counted against the run's timeout."""
    judge_calls: dict[str, int] = field(default_factory=dict)
    """Model calls of each judge guardrail so far, by name: `maxCallsPerTask` holds across a
    resume (engine/guardsteps.py)."""
    children: dict[str, ChildRecord] = field(default_factory=dict)
    """Every child Task the run started, by the call id that started it, pending or ended
    (engine/delegating.py)."""
    remote_tasks: dict[str, RemoteRecord] = field(default_factory=dict)
    """Every remote A2A task the run sent, by the call id that sent it: a resumed run polls
    it instead of sending again (engine/remotecalls.py)."""

    @property
    def waiting_children(self) -> list[ChildRecord]:
        """The children that have not ended (the run waits for them)."""
        return [c for c in self.children.values() if not c.ended]

    def to_dict(self) -> dict[str, Any]:
        return {
            "items": [item_to_dict(i) for i in self.items],
            "step": self.step,
            "usage": self.usage.to_dict(),
            "records": [r.to_dict() for r in self.records],
            "usedTools": sorted(self.used_tools),
            "startedCalls": sorted(self.started_calls),
            "seenIds": sorted(self.seen_ids),
            **({"usageEstimated": True} if self.usage.estimated else {}),
            **(
                {"guardrails": [r.to_dict() for r in self.guardrail_records]}
                if self.guardrail_records
                else {}
            ),
            **(
                {"approvals": [p.to_dict() for p in self.approvals.values()]}
                if self.approvals
                else {}
            ),
            **({"awaitingSince": self.awaiting_since} if self.awaiting_since is not None else {}),
            **({"pausedSeconds": self.paused_seconds} if self.paused_seconds else {}),
            **({"judgeCalls": dict(self.judge_calls)} if self.judge_calls else {}),
            **(
                {"children": [c.to_dict() for c in self.children.values()]} if self.children else {}
            ),
            **(
                {"remoteTasks": [r.to_dict() for r in self.remote_tasks.values()]}
                if self.remote_tasks
                else {}
            ),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunState:
        usage = d.get("usage") or {}
        items = [item_from_dict(i) for i in d.get("items", [])]
        # A checkpoint written before `seenIds` existed: the transcript's ids are the ones seen.
        transcript_ids = {
            c.id for i in items if isinstance(i, AssistantMessage) for c in i.tool_calls
        }
        return cls(
            items=items,
            step=int(d.get("step", 0)),
            usage=Usage(
                int(usage.get("inputTokens", 0)),
                int(usage.get("outputTokens", 0)),
                bool(d.get("usageEstimated", False)),
            ),
            records=[ToolCallRecord.from_dict(r) for r in d.get("records", [])],
            used_tools=set(d.get("usedTools", [])),
            started_calls=set(d.get("startedCalls", [])),
            seen_ids=set(d.get("seenIds", [])) | transcript_ids,
            guardrail_records=[GuardrailRecord.from_dict(r) for r in d.get("guardrails", [])],
            approvals={
                p.call_id: p for p in (PendingApproval.from_dict(a) for a in d.get("approvals", []))
            },
            awaiting_since=(
                float(d["awaitingSince"]) if d.get("awaitingSince") is not None else None
            ),
            paused_seconds=float(d.get("pausedSeconds", 0.0)),
            # A checkpoint written before `judgeCalls` existed: no judge call counted yet.
            judge_calls={str(k): int(v) for k, v in (d.get("judgeCalls") or {}).items()},
            # A checkpoint written before `children` existed: the run started none.
            children={
                c.key: c for c in (ChildRecord.from_dict(x) for x in d.get("children") or [])
            },
            # A checkpoint written before `remoteTasks` existed: the run sent none.
            remote_tasks={
                r.key: r for r in (RemoteRecord.from_dict(x) for x in d.get("remoteTasks") or [])
            },
        )


@dataclass(frozen=True)
class RunResult:
    """How a run ended: the Task status fields of DESIGN §5 that the engine owns."""

    phase: Phase
    reason: Reason
    message: str
    output: str
    structured_output: dict[str, Any] | None
    state: RunState
    error: OrdoError | None = None
    """The ordo error that ended the run, if one did."""

    @property
    def step(self) -> int:
        return self.state.step

    @property
    def usage(self) -> Usage:
        return self.state.usage

    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        return self.state.records
