"""The agent step loop (DESIGN §3, steps 4-6): every step ends in a typed verdict
(engine/verdicts.py: `Continue`, `AwaitApproval` or `Finished(phase, reason, message)`), and
`run_agent` acts on the one that stops the run in one place (`_Run.act`).

The opening (`_Run.opening`), once per start:
- a fresh run screens the Task input with the input guardrails before any model call (a
  resumed run did it at its start); a denial is `Finished(Failed, GuardrailViolation)`;
- a resumed run completes the calls its last step left without results
  (toolsteps.complete_pending), as in step 7 below; a call of a non-idempotent tool that
  may have started is not repeated: `Interrupted`.

Each step (`_Run.step`), while the verdict is `Continue`:
1. a cancel request (spec.cancel, the Task deleted) is `Finished(Cancelled)`;
2. the policies are re-read (livepolicy.py): governance, `maxSteps`, the token budget and
   `onToolDenied` can only narrow; a suspended Agent is `Finished(Failed, AgentSuspended)`,
   policies that cannot be read end the run `PolicyUnavailable`;
3. `maxSteps` model calls made is `Finished(Failed, MaxStepsExceeded)`;
4. the prompt is the history so far with the tools still on offer (a Tool once, until it is
   called; built-in memory tools always; only what governance offers) and the output
   schema. A cancel request abandons the model call (`Finished(Cancelled)`; the call is not
   a step); a call that fails for good ends the run with its reason (ModelError, ...);
5. the response is normalised (sanitize.py) and its usage added: over the token budget is
   `Finished(Failed, TokenBudgetExceeded)` and its calls do not run;
6. a text answer passes the output guardrails (`GuardrailViolation`), then the output
   schema: `Finished(Succeeded)` with the structured output, or `InvalidOutput`;
7. tool calls: the policies are re-read again (as in 2), then each call
   (toolsteps.run_calls) is screened (duplicate, governance, already used, arguments:
   screening.py), its arguments guarded, gated on a human approval (approvals.py), run (a
   non-idempotent tool is checkpointed before it starts), and its result guarded; a judge
   that takes the run over its token budget ends it `TokenBudgetExceeded`. A refusal under
   `onToolDenied: Fail` is `Finished(Failed, <the reason its refusal chose>)` (ToolDenied,
   GuardrailViolation, ApprovalRejected, ApprovalTimedOut, DelegationCycle,
   DelegationDepthExceeded); an `agent` Tool's call starts its child Task
   (engine/delegating.py), whose tokens join the run's when it ends (over the budget:
   `TokenBudgetExceeded`); calls that wait for a human are `AwaitApproval`, calls that wait
   only for child Tasks `AwaitChildren`, or `Finished(Cancelled)` when a cancel request
   came; else the step is checkpointed and finished: `Continue`.

The run's deadline (`timeout`, anchored at its first start: `elapsed`) cancels an in-flight
model or tool call and is `Finished(Failed, Timeout)`; any other ordo error (a checkpoint that
cannot be written, ...) is `Finished(Failed, <its reason>)`. `LeaseLost` propagates: another
execution owns the Task, this one ends without a verdict.

Acting: `AwaitApproval` records when the wait began, checkpoints and returns the non-terminal
`AwaitingApproval`; `AwaitChildren` checkpoints and returns `AwaitingChildren` (the run's
clock keeps running: its children's deadlines are inside it); `Finished` answers every call still without a result (the transcript
stays well-formed), emits `RunFinished` and returns the RunResult. The output is the answer
of a Succeeded run, else the last text, never when output guardrails exist (it did not pass
them).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from typing import Any

from ..api.task import Reason
from ..errors import LeaseLost, OrdoError
from . import approvals, livepolicy, verdicts
from . import guardsteps as guard
from .delegating import children_message
from .events import (
    Checkpoint,
    Event,
    Listener,
    ModelResponded,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    public_tool_name,
)
from .guardrails import GuardrailBinding
from .model import ModelClient, ModelRequest, ModelResponse, ToolDefinition
from .sanitize import normalise_response
from .state import Phase, RunConfig, RunResult, RunState
from .stepcalls import complete_unless_cancelled, loop_deadline
from .tooling import ToolBinding
from .toolsteps import complete_pending, fill_unanswered, run_calls
from .transcript import AssistantMessage, SystemMessage, UserMessage
from .verdicts import (
    AWAIT_APPROVAL,
    AWAIT_CHILDREN,
    CONTINUE,
    AwaitApproval,
    AwaitChildren,
    Continue,
    Finished,
    StepVerdict,
)


def initial_state(config: RunConfig) -> RunState:
    return RunState(items=[SystemMessage(config.system_prompt), UserMessage(config.user_message)])


async def run_agent(
    config: RunConfig,
    model: ModelClient,
    tools: Sequence[ToolBinding],
    *,
    listeners: Iterable[Listener] = (),
    state: RunState | None = None,
    fresh: bool | None = None,
    cancel: asyncio.Event | None = None,
    guardrails: Sequence[GuardrailBinding] = (),
) -> RunResult:
    """Run (or resume, given `state`) one agent to a terminal result. Never raises for
    anything the model or a tool does; cancellation of the calling task propagates.

    The loop updates `state` in place, so a caller that passes its own (`initial_state` and
    `fresh=True` for a new run) still knows the step, usage and tool calls reached when
    something unexpected raises out of the loop. `fresh` (default: `state is None`) says the
    run starts here: only then is its input screened (a resumed run did that at its start)."""
    fresh = state is None if fresh is None else fresh
    run = _Run(config, model, tools, listeners, state, cancel, guardrails)
    await run.emit(RunStarted(resumed_from_step=run.state.step))
    try:
        async with asyncio.timeout_at(loop_deadline(run.deadline)):
            return await run.act(await run.until_stopped(fresh))
    except TimeoutError:
        return await run.act(verdicts.timed_out(run.config.timeout))
    except LeaseLost:
        raise  # another execution owns the Task now: this one ends without a verdict
    except OrdoError as exc:  # a model call, Interrupted, a checkpoint, a policy re-read, ...
        return await run.act(verdicts.failed(exc))


class _Run:
    """One run: what it works with, and the steps that each return their verdict."""

    def __init__(
        self,
        config: RunConfig,
        model: ModelClient,
        tools: Sequence[ToolBinding],
        listeners: Iterable[Listener],
        state: RunState | None,
        cancel: asyncio.Event | None,
        guardrails: Sequence[GuardrailBinding],
    ) -> None:
        self.config = config
        """Narrowed at each policy re-read (livepolicy.py)."""
        self.model = model
        self.tools = tools
        self.sinks = tuple(listeners)
        self.bound = frozenset(t.name for t in tools)  # names that events may carry (events.py)
        self.state = state if state is not None else initial_state(config)
        self.cancel = cancel
        self.guardrails = guardrails
        self.deadline = (
            time.monotonic() + config.timeout - config.elapsed
            if config.timeout is not None
            else None
        )

    async def emit(self, event: Event) -> None:
        for sink in self.sinks:
            await sink(event)

    def cancel_requested(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    async def until_stopped(self, fresh: bool) -> AwaitApproval | AwaitChildren | Finished:
        """The opening, then steps until one stops the run."""
        verdict: StepVerdict = await self.opening(fresh)
        while isinstance(verdict, Continue):
            verdict = await self.step()
        return verdict

    async def opening(self, fresh: bool) -> StepVerdict:
        """Input guardrails (a fresh run), then the calls a restart left without results."""
        config, state = self.config, self.state
        if fresh and self.guardrails:
            violation = await guard.check_input(self.guardrails, config, state, self.emit)
            if violation is not None:
                return verdicts.guardrail_violation(violation)
        denial = await complete_pending(
            config, state, self.tools, self.emit, self.guardrails, self.deadline, self.cancel
        )
        if denial is not None:
            return verdicts.denied(denial, public_tool_name(denial.record.tool, self.bound))
        return self.waiting() if state.approvals or state.waiting_children else CONTINUE

    async def step(self) -> StepVerdict:
        """One model call and the tool calls it asked for."""
        state = self.state
        if self.cancel_requested():
            return verdicts.cancelled(state.step)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise TimeoutError  # also when nothing awaited yielded to the timer
        if (stop := await self.policy_boundary()) is not None:
            return stop
        if (stop := verdicts.out_of_steps(self.config, state)) is not None:
            return stop
        state.step += 1
        step = state.step
        await self.emit(StepStarted(step))
        response = await self.call_model()
        if response is None:  # cancelled while the model was thinking
            state.step -= 1  # that call never answered: it is not a step
            return verdicts.cancelled(state.step)
        if (stop := verdicts.over_budget(self.config, state)) is not None:
            return stop  # the over-budget response's calls do not run
        if not response.tool_calls:
            return await self.final_answer(response.text)
        if (stop := await self.policy_boundary()) is not None:
            return stop
        calls = response.tool_calls
        denial = await run_calls(
            calls,
            self.config,
            self.tools,
            state,
            self.emit,
            guardrails=self.guardrails,
            deadline=self.deadline,
            cancel=self.cancel,
        )
        if denial is not None:
            return verdicts.denied(denial, public_tool_name(denial.record.tool, self.bound), step)
        if state.approvals or state.waiting_children:
            return self.waiting()
        await self.emit(Checkpoint(state))
        await self.emit(StepFinished(state))
        return CONTINUE

    async def policy_boundary(self) -> Finished | None:
        """Re-read the policies (livepolicy.py); a suspension ends the run here."""
        self.config, suspended_by = await livepolicy.at_boundary(self.config)
        if suspended_by is None:
            return None
        return verdicts.suspended(suspended_by, self.state.step)

    async def call_model(self) -> ModelResponse | None:
        """The model's normalised response, in the history and the usage; None when a cancel
        request came first."""
        config, state = self.config, self.state
        offered = [
            t
            for t in self.tools
            if (t.builtin or t.name not in state.used_tools)
            and config.governance.offers(t.object_name, builtin=t.builtin)
        ]
        started = time.monotonic()
        request = ModelRequest(
            items=tuple(state.items),  # a snapshot: the history grows after the call
            tools=tuple(ToolDefinition(t.name, t.description, t.parameters) for t in offered),
            output_schema=config.output_schema,
            deadline=loop_deadline(self.deadline),
        )
        answer = await complete_unless_cancelled(self.model, request, self.cancel)
        if answer is None:
            return None
        response = normalise_response(answer, step=state.step, seen_ids=state.seen_ids)
        state.usage = state.usage + response.usage
        state.items.append(AssistantMessage(response.text, response.tool_calls))
        await self.emit(
            ModelResponded(
                state.step,
                response.usage,
                len(response.tool_calls),
                time.monotonic() - started,
                response.finish_reason,
                response.response_model,
            )
        )
        return response

    async def final_answer(self, text: str) -> Finished:
        """A text answer: the output guardrails, then the output schema."""
        if self.guardrails:
            text, violation = await guard.check_output(
                self.guardrails, self.config, text, self.state, self.emit
            )
            if violation is not None:
                return verdicts.guardrail_violation(violation)
        return await verdicts.answered(self.config, text)

    def waiting(self) -> AwaitApproval | AwaitChildren | Finished:
        """Calls wait for a human decision (that phase wins when both wait) or for child
        Tasks; a cancel request ends the run instead (the waiting calls are dropped)."""
        if not self.cancel_requested():
            return AWAIT_APPROVAL if self.state.approvals else AWAIT_CHILDREN
        self.state.approvals.clear()
        return verdicts.cancelled(self.state.step)

    async def act(self, verdict: AwaitApproval | AwaitChildren | Finished) -> RunResult:
        """The one place a verdict that stops the run takes effect."""
        state = self.state
        if isinstance(verdict, AwaitChildren):  # the run's clock keeps running meanwhile
            await self.emit(Checkpoint(state))
            message = children_message(state)
            return await self.result("AwaitingChildren", "AwaitingChildren", message)
        if isinstance(verdict, AwaitApproval):
            state.awaiting_since = self.config.clock()
            await self.emit(Checkpoint(state))
            message = approvals.awaiting_message(state)
            return await self.result("AwaitingApproval", "AwaitingApproval", message)
        if verdict.phase != "Succeeded":
            fill_unanswered(state)  # a run that stops mid-step answers the calls it left
        return await self.result(
            verdict.phase, verdict.reason, verdict.message, verdict.structured, verdict.error
        )

    async def result(
        self,
        phase: Phase,
        reason: Reason,
        message: str,
        structured: dict[str, Any] | None = None,
        error: OrdoError | None = None,
    ) -> RunResult:
        state = self.state
        last = state.items[-1]
        if phase == "Succeeded":
            out = last.text if isinstance(last, AssistantMessage) else ""
        elif guard.guards_output(self.guardrails):
            out = ""  # a partial answer never passed the output guardrails
        else:
            out = _last_text(state)
        result = RunResult(phase, reason, message, out, structured, state, error)
        await self.emit(RunFinished(result))
        return result


def _last_text(state: RunState) -> str:
    for item in reversed(state.items):
        if isinstance(item, AssistantMessage) and item.text:
            return item.text
    return ""
