"""`execute(..., snapshot=...)`: a Task the caller already resolved (the operator's scheduler,
for its GitOps pre-check) is run as is, without reading its references a second time."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ordo.runtime import execute, resolve
from support.engine_fakes import (
    DictStore,
    ModelFactory,
    ScriptedModel,
    agent,
    answer,
    mock_endpoint,
    mock_tool,
    task,
)


class CountingStore(DictStore):
    """A DictStore that counts its reads by kind."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        super().__init__(*objects)
        self.gets: Counter[str] = Counter()
        self.lists: Counter[str] = Counter()

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets[kind] += 1
        return await super().get(kind, namespace, name)

    async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        self.lists[kind] += 1
        return await super().list(kind, namespace)


def store() -> CountingStore:
    return CountingStore(agent(tools=["search"]), mock_endpoint(), mock_tool("search"))


def factory() -> ModelFactory:
    return ModelFactory(lambda snapshot: ScriptedModel([answer("ok")]))


async def test_a_given_snapshot_is_not_resolved_again() -> None:
    objects, the_task = store(), task()
    snapshot = await resolve(the_task, objects)
    resolved_reads = +objects.gets
    assert resolved_reads["Agent"] == 1 and resolved_reads["ModelEndpoint"] == 1
    objects.gets.clear()

    outcome = await execute(the_task, objects, model_factory=factory(), snapshot=snapshot)

    assert (outcome.phase, outcome.reason) == ("Succeeded", "Succeeded")
    assert outcome.snapshot is snapshot
    # Only the step boundary's policy re-read (AgentPolicy lists) touches the store.
    assert objects.gets["Agent"] == 0
    assert objects.gets["ModelEndpoint"] == 0
    assert objects.gets["Tool"] == 0


async def test_without_a_snapshot_execute_resolves_once() -> None:
    objects = store()
    outcome = await execute(task(), objects, model_factory=factory())
    assert outcome.phase == "Succeeded"
    assert outcome.snapshot is not None
    assert (objects.gets["Agent"], objects.gets["ModelEndpoint"], objects.gets["Tool"]) == (1, 1, 1)


async def test_a_given_snapshot_is_what_the_run_uses() -> None:
    """The store changed after the caller resolved: the run follows the caller's snapshot
    (the Agent it saw), not the store's newer content."""
    objects, the_task = store(), task()
    snapshot = await resolve(the_task, objects)
    objects.put(agent(tools=["search"], modelRef="gone"))  # would be ModelEndpointNotFound

    outcome = await execute(the_task, objects, model_factory=factory(), snapshot=snapshot)

    assert (outcome.phase, outcome.reason) == ("Succeeded", "Succeeded")
    assert outcome.status().to_dict()["snapshotHash"] == snapshot.content_hash
