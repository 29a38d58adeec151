"""The public face of the `ordo` package: what `__all__` promises exists, and works."""

from __future__ import annotations

import asyncio
from pathlib import Path

import ordo

EXPECTED = {
    "REASONS",
    "Agent",
    "AgentPolicy",
    "AgentRole",
    "ManifestSet",
    "ManifestStore",
    "Memory",
    "MockModelClient",
    "ModelClient",
    "ModelEndpoint",
    "ModelRequest",
    "ModelResponse",
    "ObjectStore",
    "OrdoError",
    "Reason",
    "Task",
    "TaskOutcome",
    "TaskStatus",
    "Tool",
    "ToolCall",
    "ToolPermission",
    "Usage",
    "__version__",
    "execute",
    "load_manifests",
}
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_all_is_the_documented_public_face_and_every_name_exists() -> None:
    assert set(ordo.__all__) == EXPECTED
    assert len(ordo.__all__) == len(set(ordo.__all__))
    for name in ordo.__all__:
        assert hasattr(ordo, name), name


def test_the_docstring_example_runs_the_quickstart() -> None:
    async def main() -> list[tuple[str, str]]:
        mset = ordo.load_manifests([str(EXAMPLES / "quickstart")])
        store = ordo.ManifestStore(mset, environ={})
        results = []
        for _, obj in mset.objects:
            if isinstance(obj, ordo.Task):
                outcome = await ordo.execute(obj, store)
                assert isinstance(outcome.status(), ordo.TaskStatus)
                results.append((outcome.phase, outcome.reason))
        return results

    results = asyncio.run(main())
    assert results and all(r == ("Succeeded", "Succeeded") for r in results)


def test_every_reason_of_an_error_is_a_documented_reason() -> None:
    assert ordo.OrdoError("x").reason in ordo.REASONS
