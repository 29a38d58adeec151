"""A TaskWebhook's `Ready` (operator/readiness/webhooks.py): its Secret key usable (an
unlabelled Secret reads as missing, the same message), its template's Agent present."""

from __future__ import annotations

from typing import Any

from tests.support.engine_fakes import NS, DictStore, agent

from ordo.operator.readiness import reconciler as readiness


def hook() -> dict[str, Any]:
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "TaskWebhook",
        "metadata": {"name": "issues", "namespace": NS},
        "spec": {
            "auth": {"profile": "GitHub", "secretRef": {"name": "hook", "key": "secret"}},
            "taskTemplate": {"spec": {"agentRef": "triager"}},
        },
    }


def unlabelled() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hook", "namespace": NS},
        "data": {"secret": "c2VjcmV0"},
    }


async def test_ready_when_the_secret_is_usable_and_the_agent_exists() -> None:
    evaluate = readiness.EVALUATORS["TaskWebhook"]
    store = DictStore(hook(), agent(name="triager"), secrets={("hook", "secret"): "s3cret"})
    verdict = await evaluate(hook(), store)
    assert (verdict.status, verdict.reason) == ("True", "Configured")
    assert verdict.message == f"GitHub deliveries at /hooks/{NS}/issues"

    missing_agent = DictStore(hook(), secrets={("hook", "secret"): "s3cret"})
    verdict = await evaluate(hook(), missing_agent)
    assert (verdict.status, verdict.reason) == ("False", "MissingReferences")
    assert verdict.message == "not found: Agent/triager"


async def test_a_missing_and_an_unlabelled_secret_read_the_same() -> None:
    evaluate = readiness.EVALUATORS["TaskWebhook"]
    missing = await evaluate(hook(), DictStore(hook(), agent(name="triager")))
    store = DictStore(hook(), agent(name="triager"))
    store.secret_bodies["hook"] = unlabelled()
    not_opted_in = await evaluate(hook(), store)
    assert (missing.reason, missing.message) == (not_opted_in.reason, not_opted_in.message)
    assert missing.reason == "SecretNotFound" and "s3cret" not in missing.message
    assert "TaskWebhook" in readiness.DEPENDENTS["Agent"]
