"""A suspended Agent in `kubectl get agents` (issue 16 §1): the Agent's `Ready` verdict, wrapped.

When an AgentPolicy that selects the Agent has `spec.suspend: true`, the Agent is not Ready
(reason `Suspended`, naming the policy) and `status.suspendedBy` holds the policy's name (the
`SUSPENDED-BY` printer column); otherwise the wrapped verdict stands and `suspendedBy` is
cleared. Policies that cannot be read or parsed make the verdict `Unknown`
(`PolicyUnavailable`), as a Task of the Agent would fail. Enforcement never depends on this
status: runs read the policies themselves (runtime/policies.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...api import Agent
from ...errors import PolicyUnavailable
from ...runtime.policies import selecting_policies, suspending_policy
from ...runtime.store import ObjectStore
from .verdicts import Evaluator, Verdict

FIELD = "suspendedBy"


def with_suspension(inner: Evaluator) -> Evaluator:
    """`inner` (the Agent verdict), overridden while a selecting policy suspends the Agent."""

    async def verdict(body: dict[str, Any], store: ObjectStore) -> Verdict:
        agent = Agent.model_validate(body)
        try:
            policy = suspending_policy(await selecting_policies(store, agent))
        except PolicyUnavailable as exc:
            return Verdict("Unknown", "PolicyUnavailable", exc.message[:1024])
        if policy is not None:
            return Verdict(
                "False",
                "Suspended",
                f"suspended by AgentPolicy {policy!r} (spec.suspend): new Tasks fail "
                "AgentSuspended, running ones stop at their next step",
                {FIELD: policy},
            )
        found = await inner(body, store)
        return replace(found, fields={**found.fields, FIELD: None})

    return verdict
