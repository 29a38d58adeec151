"""A suspended Agent shows in `kubectl get agents` (issue 16 §1): the Agent's Ready verdict
(operator/readiness/suspension.py, registered by operator/readiness/reconciler.py) over an
in-memory store."""

from __future__ import annotations

from ordo.operator.readiness import reconciler as readiness
from support.engine_fakes import DictStore, agent, mock_endpoint, policy


async def agent_verdict(store: DictStore) -> readiness.Verdict:
    body = agent(labels={"tier": "intern"})
    store.put(body)
    return await readiness.EVALUATORS["Agent"](body, store)


async def test_a_suspended_agent_is_not_ready_and_names_the_policy() -> None:
    verdict = await agent_verdict(DictStore(mock_endpoint(), policy("freeze", suspend=True)))
    assert (verdict.status, verdict.reason) == ("False", "Suspended")
    assert "'freeze'" in verdict.message
    assert verdict.fields == {"suspendedBy": "freeze"}


async def test_unsuspended_the_reference_verdict_stands_and_suspended_by_is_cleared() -> None:
    store = DictStore(mock_endpoint(), policy("freeze", suspend=False))
    verdict = await agent_verdict(store)
    assert (verdict.status, verdict.reason) == ("True", "Resolved")
    assert verdict.fields == {"suspendedBy": None}  # a merge patch removes the field


async def test_a_suspending_policy_that_does_not_select_the_agent_does_not_count() -> None:
    other = policy("freeze", suspend=True, agentSelector={"matchLabels": {"tier": "admin"}})
    verdict = await agent_verdict(DictStore(mock_endpoint(), other))
    assert verdict.status == "True"


async def test_unreadable_policies_make_the_verdict_unknown() -> None:
    verdict = await agent_verdict(DictStore(mock_endpoint(), fail_list=["AgentPolicy"]))
    assert (verdict.status, verdict.reason) == ("Unknown", "PolicyUnavailable")


def test_a_policy_change_re_evaluates_the_agents() -> None:
    assert "Agent" in readiness.DEPENDENTS["AgentPolicy"]
