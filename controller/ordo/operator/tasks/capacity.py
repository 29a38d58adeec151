"""The scheduler's capacity (`--max-concurrent-tasks`): waiting for a slot, and telling the
Task it waits (`Scheduled=False/WaitingForCapacity`) while it does.

A new Task is not reserved while it waits here (scheduler.py): another replica with a free
slot may take it meanwhile, and the wait then ends without a slot (`TAKEN`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Literal

from ..kube.client import ApiError, KubeClient
from . import taskstatus

SLOT: Literal["slot"] = "slot"
CANCELLED: Literal["cancelled"] = "cancelled"
TAKEN: Literal["taken"] = "taken"
Wait = Literal["slot", "cancelled", "taken"]


async def acquire(
    capacity: asyncio.Semaphore,
    cancel: asyncio.Event,
    wake: asyncio.Event | None = None,
    taken: Callable[[], bool] | None = None,
) -> Wait:
    """Wait for a slot (`SLOT`: the caller releases it), for a cancel request, which needs
    no slot (`CANCELLED`), or, with `wake` and `taken`, until `taken()` is true when `wake`
    is set: the Task was taken by another process (`TAKEN`, no slot held)."""
    acquiring = asyncio.ensure_future(capacity.acquire())
    result: Wait = CANCELLED
    try:
        while True:
            if taken is not None and taken():
                result = TAKEN
                return result
            if acquiring.done():
                result = SLOT
                return result
            if cancel.is_set():
                return CANCELLED
            waits: set[asyncio.Future[Any]] = {acquiring, asyncio.ensure_future(cancel.wait())}
            if wake is not None:
                wake.clear()
                waits.add(asyncio.ensure_future(wake.wait()))
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits - {acquiring}:
                    w.cancel()
    finally:
        if not acquiring.done():
            acquiring.cancel()
        elif result != SLOT and not acquiring.cancelled():
            capacity.release()  # acquired just as the wait ended otherwise: hand it back


async def mark_waiting(client: KubeClient, body: dict[str, Any], limit: int) -> None:
    """Mark a Pending (or new) Task as waiting for one of the `limit` slots, conditional on
    its resourceVersion: a Task another process changed meanwhile (reserved, marked, claimed)
    is left as it is, and one already marked is not written again."""
    status = body.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Scheduled" and condition.get("reason") == "WaitingForCapacity":
            return
    meta = body["metadata"]
    try:
        await taskstatus.merge(
            client,
            meta["namespace"],
            meta["name"],
            taskstatus.waiting_for_capacity(body, limit),
            resource_version=meta["resourceVersion"],
        )
    except ApiError as exc:
        if not (exc.conflict or exc.not_found):
            raise
