"""The snapshot content hash covers the ToolPermissions that apply to the run's tools (issue 23
item 7), versioned so that the upgrade ends nothing that was running: a checkpoint written
before it carries a hash of the old formula (16 hex digits, no prefix) and is compared against
that formula; a `v2:` hash against the new one. A resume whose content changed ends
`Interrupted`, as before (operator/tasks/runner.py `_resume_state`)."""

from __future__ import annotations

from typing import Any

import pytest

from ordo.engine.state import RunState
from ordo.errors import Interrupted
from ordo.operator.tasks.checkpoint import SNAPSHOT_ANNOTATION
from ordo.operator.tasks.runner import Runner
from ordo.runtime.resolve import resolve
from ordo.runtime.snapshot import Snapshot
from support.engine_fakes import (
    DictStore,
    agent,
    memory,
    mock_endpoint,
    mock_tool,
    permission,
    role,
    task,
)

LEGACY = "634da1aec5aded25"
"""`content_hash` of `objects()` as ordo computed it before this change (at 2a2f841)."""


def objects(*extra: dict[str, Any]) -> DictStore:
    return DictStore(
        agent(tools=["search"], roles=["r"]),
        mock_endpoint(),
        mock_tool("search"),
        role("r", "tool:search:invoke"),
        permission("p", "search", "tool:search:invoke"),
        *extra,
    )


async def snapshot_of(store: DictStore) -> Snapshot:
    return await resolve(task(), store)


class Saved:
    """A checkpoint as `CheckpointStore.load` returns it: the state and its annotations."""

    def __init__(self, recorded: str | None) -> None:
        self.annotations = {} if recorded is None else {SNAPSHOT_ANNOTATION: recorded}

    async def load(self) -> tuple[RunState, dict[str, str]]:
        return RunState(step=1), self.annotations


async def resumes(snapshot: Snapshot, recorded: str | None) -> bool:
    try:
        await Runner._resume_state(Saved(recorded), snapshot, 1)  # type: ignore[arg-type]
    except Interrupted:
        return False
    return True


async def test_the_hash_is_versioned_and_stable() -> None:
    first = await snapshot_of(objects())
    assert first.content_hash.startswith("v2:") and len(first.content_hash) == 3 + 16
    assert (await snapshot_of(objects())).content_hash == first.content_hash


async def test_a_changed_tool_permission_changes_the_hash() -> None:
    first = await snapshot_of(objects())
    changed = await snapshot_of(objects(permission("p", "search", "tool:search:admin")))
    assert changed.content_hash != first.content_hash
    mode = await snapshot_of(objects(permission("p", "search", "tool:search:invoke", mode="any")))
    assert mode.content_hash != first.content_hash
    added = await snapshot_of(objects(permission("q", "search", "tool:search:invoke")))
    assert added.content_hash != first.content_hash


async def test_a_tool_permission_for_another_tool_does_not() -> None:
    first = await snapshot_of(objects())
    other = await snapshot_of(objects(permission("x", "unrelated", "tool:unrelated:invoke")))
    assert other.content_hash == first.content_hash


async def test_a_memory_tool_permission_counts() -> None:
    def with_memory(*extra: dict[str, Any]) -> DictStore:
        return DictStore(
            agent(tools=["search"], memory={"ref": "mem"}), mock_endpoint(), mock_tool("search"),
            memory(), *extra,
        )  # fmt: skip

    first = await snapshot_of(with_memory())
    gated = await snapshot_of(with_memory(permission("m", "memory.write", "memory:mem:write")))
    assert gated.content_hash != first.content_hash


async def test_a_checkpoint_from_before_the_upgrade_resumes() -> None:
    snapshot = await snapshot_of(objects())
    assert await resumes(snapshot, LEGACY)  # its content did not change: resumed
    assert await resumes(snapshot, snapshot.content_hash)
    assert await resumes(snapshot, None) and await resumes(snapshot, "")  # a takeover marker


async def test_a_changed_snapshot_is_still_detected_under_either_hash() -> None:
    before = await snapshot_of(objects())
    edited = await snapshot_of(objects(mock_tool("search", description="changed")))
    assert not await resumes(edited, LEGACY)  # old formula, changed content
    assert not await resumes(edited, before.content_hash)
    # Under the new hash a changed ToolPermission is a changed snapshot (the old formula
    # cannot see it: a pre-upgrade checkpoint is compared as it was then).
    stricter = await snapshot_of(objects(permission("p", "search", "tool:search:admin")))
    assert not await resumes(stricter, before.content_hash)
    assert await resumes(stricter, LEGACY)


@pytest.mark.parametrize("recorded", ["v3:634da1aec5aded25", "V2:x", "634DA1AEC5ADED25", "junk"])
async def test_a_hash_of_an_unknown_form_does_not_resume(recorded: str) -> None:
    assert not await resumes(await snapshot_of(objects()), recorded)
