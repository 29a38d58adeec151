"""Approvals under `ordo run` (issue 16 §3): a call that needs a human approval is asked about
on the terminal, or settled by `--approve-all` / `--reject-all`. Without a terminal and without
either flag nobody can approve, so the call is rejected, and the reason says how to decide.

The person running `ordo run` owns the run: the prompt shows the call's arguments and their
digest (`args_digest`, as `ordo approvals` shows it for a Task in a cluster), and their one
decision settles the call even where its Tool asks for several approvers or excludes the
requester (`requiredApprovals`, `excludeRequester`: there is nobody else to ask locally; the
prompt says so)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any, Literal, TextIO

from ..engine.approvals import ApprovalDecider, ApprovalDecision, PendingApproval, call_digest

Mode = Literal["approve", "reject", "prompt", "none"]
NO_TERMINAL = "ordo run: no terminal to ask (use --approve-all or --reject-all)"
MAX_SHOWN_CHARS = 4000


def mode_for(approve_all: bool, reject_all: bool, interactive: bool) -> Mode:
    if approve_all:
        return "approve"
    if reject_all:
        return "reject"
    return "prompt" if interactive else "none"


class LocalApprover:
    """Decides the calls of every Task of one `ordo run`; prompts one at a time."""

    def __init__(
        self,
        mode: Mode,
        *,
        ask: Callable[[str], str] = input,
        out: TextIO | None = None,
    ) -> None:
        self.mode = mode
        self._ask = ask
        self._out = out
        self._lock = asyncio.Lock()
        self.pause: Callable[[bool], None] = lambda _paused: None
        """Stops (True) and restarts (False) a live view around a prompt."""
        self.warned = False

    def for_task(self, task: str) -> ApprovalDecider:
        async def decide(
            pending: PendingApproval, arguments: dict[str, Any]
        ) -> Sequence[ApprovalDecision]:
            if self.mode == "approve":
                return [ApprovalDecision("Approve", "ordo run --approve-all", sole=True)]
            if self.mode == "reject":
                return [ApprovalDecision("Reject", "ordo run --reject-all", sole=True)]
            if self.mode == "none":
                if not self.warned and self._out is not None:
                    print(f"note: {pending.tool} needs an approval; {NO_TERMINAL}", file=self._out)
                self.warned = True
                return [ApprovalDecision("Reject", NO_TERMINAL)]
            async with self._lock:
                return [await self._prompt(task, pending, arguments)]

        return decide

    async def _prompt(
        self, task: str, pending: PendingApproval, arguments: dict[str, Any]
    ) -> ApprovalDecision:
        shown = json.dumps(arguments, indent=2, sort_keys=True, ensure_ascii=False)
        if len(shown) > MAX_SHOWN_CHARS:
            shown = shown[:MAX_SHOWN_CHARS] + "\n... (truncated)"
        rule = ""
        if pending.approvals > 1 or pending.requester_excluded:
            rule = (
                f"in a cluster this call needs {pending.approvals} approver(s)"
                + (" other than the requester" if pending.requester_excluded else "")
                + "; here your answer decides it\n"
            )
        question = (
            f"\nTask {task}: tool {pending.tool} (call {pending.call_id}, step {pending.step}, "
            f"approval required by {pending.required_by or 'policy'}) wants to run with:\n"
            f"{shown}\ndigest: {call_digest(arguments) or '(none: not canonical JSON)'}\n"
            f"{rule}approve? [y/N] "
        )
        self.pause(True)
        try:
            reply = await asyncio.to_thread(self._ask, question)
        except EOFError:
            reply = ""
        finally:
            self.pause(False)
        if reply.strip().lower() in ("y", "yes"):
            return ApprovalDecision("Approve", "ordo run (terminal)", sole=True)
        return ApprovalDecision("Reject", "ordo run (terminal)", sole=True)
