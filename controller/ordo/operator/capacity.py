"""The scheduler's capacity (`--max-concurrent-tasks`): waiting for a slot, and telling the
Task it waits (`Scheduled=False/WaitingForCapacity`) while it does."""

from __future__ import annotations

import asyncio
from typing import Any

from .conditions import set_condition
from .kube import KubeClient


async def acquire(capacity: asyncio.Semaphore, cancel: asyncio.Event) -> bool:
    """Wait for capacity, or for a cancel request (which needs no capacity). True when a slot
    was taken (the caller releases it)."""
    if cancel.is_set():
        return False
    acquiring = asyncio.ensure_future(capacity.acquire())
    cancelled = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait({acquiring, cancelled}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        cancelled.cancel()
        if not acquiring.done():
            acquiring.cancel()
    return acquiring.done() and not acquiring.cancelled()


async def mark_waiting(client: KubeClient, body: dict[str, Any], limit: int) -> None:
    """Mark a Pending (or new) Task as waiting for one of the `limit` slots."""
    if (body.get("status") or {}).get("phase") not in (None, "Pending"):
        return
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    conditions = set_condition(
        (body.get("status") or {}).get("conditions"),
        "Scheduled",
        "False",
        "WaitingForCapacity",
        f"{limit} Task(s) are running, the limit of this operator (--max-concurrent-tasks {limit})",
    )
    await client.patch(
        "Task",
        namespace,
        name,
        {"status": {"phase": "Pending", "conditions": conditions}},
        status=True,
    )
