"""The bounded loop of a Task's job (operator/lifecycle/job.py) and how a run ends
(runner.py): only failures consume attempts (transient API failures, a claim that did not
settle, an abandoned run), waiting (references, caches, approvals) does not; a run whose
lease is lost ends `Abandoned` before its next side effect and writes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any

import pytest

from ordo.operator.kube.cache import NotSynced
from ordo.operator.kube.client import ApiError
from ordo.operator.lifecycle import job as job_mod
from ordo.operator.lifecycle.job import Done, Job, Step, Unsynced, attempts
from ordo.operator.tasks import runner as runner_mod
from ordo.operator.tasks.claim import Claim, NotSettled
from ordo.operator.tasks.references import Missing
from ordo.operator.tasks.runner import Abandoned, Parked, Runner


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_mod, "RETRY_FIRST_SECONDS", 0.001)
    monkeypatch.setattr(job_mod, "RETRY_MAX_SECONDS", 0.001)


Outcome = Step | Exception | Callable[[], Step]


async def run(outcomes: list[Outcome]) -> tuple[int, list[Exception], Job]:
    """Run the loop over `outcomes` (one per attempt; Done after the last): attempts made,
    the errors given up on, the job."""
    job = Job()
    made = 0
    given_up: list[Exception] = []

    async def attempt() -> Step:
        nonlocal made
        made += 1
        if made > len(outcomes):
            return Done()
        outcome = outcomes[made - 1]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome() if callable(outcome) else outcome

    async def give_up(exc: Exception) -> None:
        given_up.append(exc)

    await attempts(job, attempt, give_up)
    return made, given_up, job


def transient() -> ApiError:
    return ApiError(503, "ServiceUnavailable", "m")


async def test_transient_failures_are_retried_up_to_the_bound_then_left_for_the_sweep() -> None:
    made, given_up, _ = await run([transient() for _ in range(10)])
    assert made == job_mod.RETRY_ATTEMPTS == 6
    assert len(given_up) == 1 and given_up[0].transient  # give_up logs, writes nothing
    made, given_up, _ = await run([transient() for _ in range(5)])
    assert made == 6 and given_up == []


async def test_a_claim_that_did_not_settle_or_an_abandoned_run_counts_as_a_failure() -> None:
    made, given_up, _ = await run([NotSettled("claim") for _ in range(10)])
    assert made == 6 and given_up == []
    made, given_up, _ = await run([Abandoned("lease lost") for _ in range(10)])
    assert made == 6 and given_up == []
    mixed: list[Outcome] = [transient(), NotSettled("claim"), Abandoned("x")] * 3
    made, _, _ = await run(mixed)
    assert made == 6


async def test_waiting_consumes_no_attempt() -> None:
    waits: list[Outcome] = [Missing(0.001), Unsynced(), NotSynced("Agent", "ns")] * 10
    made, given_up, _ = await run([*waits, *[transient() for _ in range(5)]])
    assert made == 36 and given_up == []


async def test_a_run_parked_for_approvals_waits_for_them_without_consuming_attempts() -> None:
    made, given_up, job = await run([*[transient() for _ in range(5)], *[Parked()] * 20])
    assert made == 26 and given_up == [] and job.awaiting


async def test_anything_else_ends_the_task_at_once() -> None:
    invalid = ApiError(422, "Invalid", "m")
    made, given_up, _ = await run([invalid])
    assert made == 1 and given_up == [invalid]
    bug = RuntimeError("bug")
    made, given_up, _ = await run([transient(), bug])
    assert made == 2 and given_up == [bug]


async def test_a_cancelled_job_ends_quietly() -> None:
    def cancelled() -> Step:
        raise asyncio.CancelledError

    made, given_up, _ = await run([cancelled, transient()])
    assert made == 1 and given_up == []


def claimed_run(
    monkeypatch: pytest.MonkeyPatch, execute: Callable[..., Any], lease: LosingLease
) -> Coroutine[Any, Any, Any]:
    """`Runner.run` of a claimed Task whose run is `execute` and whose lease is `lease`."""
    monkeypatch.setattr(runner_mod, "execute", execute)
    body = {"metadata": {"name": "t", "namespace": "ns", "uid": "u"}, "status": {}}
    claim = Claim(body, "e-1", lease, resuming=False)  # type: ignore[arg-type]
    runner = Runner(SimpleNamespace(client=None), None, None, None)  # type: ignore[arg-type]
    task: Any = SimpleNamespace(spec=SimpleNamespace(agent_ref="a", team_ref=None))
    return runner.run(claim, task, asyncio.Event())


class LosingLease:
    """A lease whose renewer reports it lost after `after` seconds."""

    def __init__(self, after: float) -> None:
        self.after = after
        self.released: list[bool] = []

    async def keep(self, on_lost: Callable[[], None]) -> None:
        await asyncio.sleep(self.after)
        on_lost()

    async def release(self, *, write: bool = True) -> None:
        self.released.append(write)


async def test_a_run_whose_lease_is_lost_is_abandoned_before_its_next_side_effect(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    effects: list[str] = []

    async def execute(*_: Any, **__: Any) -> Any:
        effects.append("first step")
        await asyncio.sleep(0.2)  # the lease is lost meanwhile
        effects.append("tool call")
        raise AssertionError("not reached")

    lease = LosingLease(0.02)
    result = await claimed_run(monkeypatch, execute, lease)
    assert result == Abandoned("the execution lease was lost")
    assert effects == ["first step"]
    assert lease.released == [True]  # released for a successor; no outcome written


async def test_a_shutdown_during_a_run_propagates_and_releases_the_lease(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = asyncio.Event()

    async def execute(*_: Any, **__: Any) -> Any:
        started.set()
        await asyncio.sleep(10)

    lease = LosingLease(10)
    outer = asyncio.create_task(claimed_run(monkeypatch, execute, lease))
    await started.wait()
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert lease.released == [True]
