"""Live policy: a run re-reads its governance at each step boundary (before each model call
and before each batch of tool calls), through a hook the runtime injects.

The engine stays pure: the hook (`RunConfig.policy_refresh`) is any async callable returning a
`PolicyUpdate`; the runtime's re-reads AgentPolicies, AgentRoles and ToolPermissions through
its ObjectStore (runtime/policies.py). What comes back only narrows the run:

- governance: a call must be allowed by the fresh governance *and* the start-time one;
- `maxSteps`, the token budget: the smaller value applies, a larger one is ignored;
- `onToolDenied`: `Fail` once any re-read says `Fail`;
- `suspend`: the run stops (`Failed/AgentSuspended`) at this boundary.

Fail closed: a hook that raises a ResolutionError ends the run with its reason
(`PolicyUnavailable` when the policies cannot be listed or parsed); any other exception ends
it `PolicyUnavailable` too, naming only the exception type (its text may carry anything).
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import PolicyUnavailable, ResolutionError
from .governance import PolicyRefresh, PolicyUpdate
from .state import RunConfig

__all__ = ["PolicyRefresh", "PolicyUpdate", "at_boundary", "narrowed", "stopped"]


def _smaller(current: int | None, fresh: int | None) -> int | None:
    if fresh is None:
        return current
    return fresh if current is None else min(current, fresh)


def narrowed(config: RunConfig, update: PolicyUpdate) -> RunConfig:
    """`config` with `update` applied, narrowing only."""
    fail = "Fail" in (config.on_tool_denied, update.on_tool_denied)
    return replace(
        config,
        governance=config.governance.narrowed_by(update.governance),
        max_steps=min(config.max_steps, update.max_steps or config.max_steps),
        token_budget=_smaller(config.token_budget, update.token_budget),
        on_tool_denied="Fail" if fail else config.on_tool_denied,
    )


async def at_boundary(config: RunConfig) -> tuple[RunConfig, str | None]:
    """Re-read the policies (if the run has a hook): the narrowed config, and the suspending
    policy if the Agent is suspended now. Raises an OrdoError when it cannot decide."""
    if config.policy_refresh is None:
        return config, None
    try:
        update = await config.policy_refresh()
    except ResolutionError:  # PolicyUnavailable, or a policy cap that became invalid
        raise
    except Exception as exc:
        raise PolicyUnavailable(
            f"the run's policies could not be re-read ({type(exc).__name__}); the run fails closed"
        ) from None
    return narrowed(config, update), update.suspended_by


def stopped(policy: str, step: int) -> str:
    """The message of a run a suspension stopped."""
    return (
        f"AgentPolicy {policy!r} suspends the Agent (spec.suspend); the run stopped after "
        f"{step} step(s)"
    )
