"""Deleting the checkpoints of finished Tasks in batches: one `deletecollection` request per
namespace and flush (by the checkpoints' `ordo.dev/checkpoint-uid` label) instead of one
DELETE per Task (issue 14: API requests per Task).

A checkpoint is handed over only after its Task's terminal status is written, so nothing
writes it any more and the delete needs no precondition. What a flush fails to delete (the
API down, RBAC without `deletecollection`) is deleted one by one; what is still left (the
operator stopped before its flush) goes with its Task, which owns it."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from ..kube.client import ApiError, KubeClient
from .checkpoint import UID_LABEL, name_for_uid

FLUSH_SECONDS = 1.0
"""How long a finished Task's checkpoint may wait for its batch."""
MAX_BATCH = 100
"""Uids per request (the label selector is in the URL: about 40 bytes per uid)."""
log = logging.getLogger("ordo.operator")


class CheckpointReaper:
    def __init__(
        self,
        client: KubeClient,
        *,
        flush_seconds: float = FLUSH_SECONDS,
        max_batch: int = MAX_BATCH,
    ) -> None:
        self._client = client
        self._flush_seconds = flush_seconds
        self._max_batch = max_batch
        self._pending: dict[str, list[str]] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._flushing = False

    def delete_later(self, namespace: str, uid: str) -> None:
        """Delete the checkpoint of the finished Task `uid` with the next batch."""
        self._pending.setdefault(namespace, []).append(uid)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_soon(), name="ordo-checkpoint-reaper")

    async def _flush_soon(self) -> None:
        self._sleeping = True
        try:
            await asyncio.sleep(self._flush_seconds)
        finally:
            self._flushing = False
        await self.flush()

    async def flush(self) -> None:
        """Delete every checkpoint handed over so far."""
        self._flushing = True
        try:
            while self._pending:
                namespace, uids = self._pending.popitem()
                for i in range(0, len(uids), self._max_batch):
                    await self._delete(namespace, uids[i : i + self._max_batch])
        finally:
            self._flushing = False

    async def close(self) -> None:
        """Flush what is pending (at shutdown); the flusher is not left running."""
        flusher = self._flusher
        if flusher is not None and not flusher.done():
            if not self._flushing:
                flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher  # a flush under way finishes (what it popped is not lost)
        await self.flush()

    async def _delete(self, namespace: str, uids: list[str]) -> None:
        selector = f"{UID_LABEL} in ({','.join(sorted(set(uids)))})"
        try:
            await self._client.delete_collection("ConfigMap", namespace, selector)
            return
        except ApiError as exc:
            log.warning(
                "checkpoints could not be deleted in one request; deleting them one by one",
                extra={"ordo": {"errorStatus": exc.status, "errorReason": exc.api_reason}},
            )
        for uid in uids:
            try:
                await self._client.delete("ConfigMap", namespace, name_for_uid(uid))
            except ApiError:
                log.warning("checkpoint could not be deleted; the Task's deletion will remove it")
