"""Per-step checkpoints of a running Task, in a ConfigMap the Task owns (so garbage
collection removes it with the Task). The transcript is gzip-compressed and sealed
(sealing.py: AES-256-GCM with the operator's key, bound to the Task) into `binaryData`; the
operator deletes the checkpoint when the Task ends.

Rollback: each sealed checkpoint carries a sequence number. Before a non-idempotent tool call
(and when a run parks for approvals) the operator records the sequence of the checkpoint it
just wrote in `status.checkpointSequence`, which the chart's user roles cannot patch; a
resuming execution refuses a checkpoint older than that, or one whose step is behind
`status.step` (progress is written only after a checkpoint of at least that step). So a
restored older copy cannot make a non-idempotent call run again; what it can still rewind
is the idempotent calls and model calls since the last anchor (docs/security.md).

Writes are fenced by the execution: the ConfigMap's annotation `ordo.dev/execution-id` names
the execution that owns it, every write is a JSON Patch whose first operation `test`s that
annotation, and a resuming execution takes the checkpoint over (rewrites the annotation,
conditional on the resourceVersion it read) before it resumes. A stale executor's write is
then refused (`Fenced`) instead of overwriting the newer execution's checkpoint, and the
newer execution never resumes from a checkpoint older than the stale executor's last write.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any, Protocol

from ...engine.events import Checkpoint, Event
from ...engine.state import RunState
from ...errors import Interrupted
from ..kube.client import ApiError, Fenced, KubeClient, patch_test_failed, pointer_token
from . import sealing
from .checkpointdata import KEY as KEY  # re-exported: the checkpoint's surface
from .checkpointdata import SNAPSHOT_ANNOTATION as SNAPSHOT_ANNOTATION
from .checkpointdata import CheckpointUnreadable as CheckpointUnreadable
from .checkpointdata import decode as decode
from .checkpointdata import encode as encode
from .checkpointdata import subject_of
from .lease import ExecutionLease
from .ownership import owner_reference
from .sealing import CheckpointUntrusted, Keyring

MAX_BYTES = 900_000
"""Largest compressed checkpoint; a ConfigMap holds at most 1 MiB (data and binaryData)."""
LABEL = "ordo.dev/checkpoint-of"
UID_LABEL = "ordo.dev/checkpoint-uid"
"""The Task's uid, so that the checkpoints of finished Tasks are deleted in batches by label
(reaper.py); checkpoints of earlier versions lack it and are deleted one by one."""
EXECUTION_ANNOTATION = "ordo.dev/execution-id"
SEQUENCE_STATUS = "checkpointSequence"
TAKEOVER_ATTEMPTS = 5


class CheckpointDeleter(Protocol):
    def delete_later(self, namespace: str, uid: str) -> None: ...


def name_for(task: dict[str, Any]) -> str:
    return name_for_uid(task["metadata"]["uid"])


def name_for_uid(uid: str) -> str:
    return f"ordo-checkpoint-{uid}"


class CheckpointTooLarge(Interrupted):
    """The compressed transcript exceeds what a ConfigMap can hold. Nothing was written: the
    previous checkpoint stays as it was. The run cannot be checkpointed any further, so it
    ends `Interrupted` (the message names sizes only)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"checkpoint of {size} bytes (compressed) exceeds the limit of {limit} bytes"
        )
        self.size = size
        self.limit = limit


class CheckpointStore:
    """The checkpoint of one Task, written by one execution (`execution_id`).

    `lease`, if given, is checked after every successful save: the engine saves right before
    a non-idempotent tool call, so the call starts only while the lease is live."""

    def __init__(
        self,
        client: KubeClient,
        task: dict[str, Any],
        execution_id: str,
        snapshot_hash: str = "",
        *,
        lease: ExecutionLease | None = None,
        keyring: Keyring | None = None,
    ) -> None:
        self._client = client
        self._task = task
        self._ns = task["metadata"].get("namespace", "default")
        self._name = name_for(task)
        self._execution_id = execution_id
        self._lease = lease
        self._keyring = keyring or sealing.current()
        self._subject = subject_of(task)
        self.sequence = 0
        """The sequence number of the newest checkpoint written or loaded."""
        self.anchored = int((task.get("status") or {}).get(SEQUENCE_STATUS) or 0)
        """The sequence the Task's status records: no older checkpoint is ever resumed."""
        self.snapshot_hash = snapshot_hash
        self._owned = False
        """The ConfigMap exists and carries our execution id."""
        self._rv: str | None = None
        """The resourceVersion our last write (or take-over read) returned: the precondition
        of `delete()`, which then needs no read."""
        self.touched = False
        """This store created, wrote or took over the checkpoint (or tried to): only then can
        there be one of ours to delete."""
        self.writes = 0
        self.labelled = False
        """The checkpoint we own carries `UID_LABEL` (we created it): a batched delete by
        label (reaper.py) finds it."""

    def _object(self, payload: bytes | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self._name,
                "namespace": self._ns,
                "labels": {
                    LABEL: self._task["metadata"]["name"][:63],
                    UID_LABEL: self._task["metadata"]["uid"],
                    "app.kubernetes.io/managed-by": "ordo",
                },
                "annotations": {
                    EXECUTION_ANNOTATION: self._execution_id,
                    SNAPSHOT_ANNOTATION: self.snapshot_hash,
                },
                "ownerReferences": [owner_reference(self._task)],
            },
        }
        if payload is not None:
            body["binaryData"] = {KEY: base64.b64encode(payload).decode()}
        return body

    async def save(self, state: RunState, *, anchor: bool = False) -> None:
        """Write `state`. Raises `CheckpointTooLarge` (nothing written, the previous checkpoint
        kept), `Fenced` if another execution owns the checkpoint, or `ApiError`. With
        `anchor`, record its sequence in the Task's status too (`anchor()`)."""
        await self.save_encoded(encode(state), anchor=anchor)

    async def save_encoded(self, encoded: bytes, *, anchor: bool = False) -> None:
        """`save` of a state already encoded (`encode`)."""
        subject = dataclasses.replace(self._subject, snapshot=self.snapshot_hash)
        payload = self._keyring.seal(encoded, subject, self.sequence + 1)
        if len(payload) > MAX_BYTES:
            raise CheckpointTooLarge(len(payload), MAX_BYTES)
        self.touched = True
        await self._write(payload)
        self.sequence += 1
        if anchor:
            await self.anchor()

    async def anchor(self) -> None:
        """Record the sequence of the checkpoint last written in `status.checkpointSequence`
        (fenced by the execution): from now on no older checkpoint of this Task is resumed.
        Written before every non-idempotent tool call starts."""
        await self._client.patch_status_fenced(
            "Task",
            self._ns,
            self._task["metadata"]["name"],
            self._execution_id,
            {SEQUENCE_STATUS: self.sequence},
        )
        self.anchored = self.sequence

    async def _write(self, payload: bytes) -> None:
        if not self._owned and await self._create(payload):
            self.writes += 1
            return
        fence = "/metadata/annotations/" + pointer_token(EXECUTION_ANNOTATION)
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": fence, "value": self._execution_id},
            {
                "op": "add",
                "path": "/metadata/annotations/" + pointer_token(SNAPSHOT_ANNOTATION),
                "value": self.snapshot_hash,
            },
            {
                "op": "add",
                "path": "/binaryData",
                "value": {KEY: base64.b64encode(payload).decode()},
            },
        ]
        try:
            # Idempotent: the ops never change the annotation they test.
            written = await self._client.patch_json(
                "ConfigMap", self._ns, self._name, ops, idempotent=True
            )
        except ApiError as exc:
            if exc.not_found or patch_test_failed(exc, fence):
                # Another execution's annotation, or deleted under us (the run ended
                # elsewhere): either way it is not ours to write.
                self._owned = False
                raise Fenced("ConfigMap", self._name) from None
            raise
        self._rv = _resource_version(written)
        self.writes += 1

    async def _create(self, payload: bytes) -> bool:
        """Create the checkpoint. True if created with `payload`; False if it exists and is
        ours (write it with a patch). Raises `Fenced` if another execution owns it."""
        for _ in range(TAKEOVER_ATTEMPTS):
            try:
                created = await self._client.create("ConfigMap", self._ns, self._object(payload))
                self._owned = self.labelled = True
                self._rv = _resource_version(created)
                return True
            except ApiError as exc:
                if not (exc.conflict or exc.transient):
                    raise
                # Exists, or the create may have been applied: see whose it is.
            current = await self._client.get("ConfigMap", self._ns, self._name)
            if current is None:
                continue
            owner = (current["metadata"].get("annotations") or {}).get(EXECUTION_ANNOTATION)
            if owner != self._execution_id:
                raise Fenced("ConfigMap", self._name)
            self._owned = True
            self.labelled = _labelled(current)
            self._rv = _resource_version(current)
            return False
        raise ApiError(0, "TransportError", "checkpoint create did not settle")

    async def load(self) -> tuple[RunState, dict[str, str]] | None:
        """Take the checkpoint over for this execution and return its state and annotations
        (as the previous execution wrote them: `ordo.dev/snapshot-hash`, ...).

        Returns None only when no checkpoint exists; it then creates an empty one owned by
        this execution, so a stale executor cannot create one afterwards. After this call
        every write of an earlier execution is refused (`Fenced`), so the state returned is
        the last one any earlier execution wrote. Raises `CheckpointUntrusted` if the
        checkpoint is unsealed, does not verify or is older than the status records (also
        when it is gone but the status records one), `CheckpointUnreadable` (an
        `Interrupted`) if it verifies but cannot be decoded, `ApiError` if the API fails."""
        self.touched = True
        for _ in range(TAKEOVER_ATTEMPTS):
            body = await self._client.get("ConfigMap", self._ns, self._name)
            if body is None:
                self._verified(None)
                try:
                    marker = await self._client.create("ConfigMap", self._ns, self._object(None))
                except ApiError as exc:
                    if exc.conflict or exc.transient:
                        continue  # someone created it meanwhile, or maybe we did: read again
                    raise
                self._owned = self.labelled = True
                self._rv = _resource_version(marker)
                return None
            annotations: dict[str, str] = dict(body["metadata"].get("annotations") or {})
            state = self._verified(decode(body, self._subject, self._keyring))
            self._rv = _resource_version(body)
            if annotations.get(EXECUTION_ANNOTATION) != self._execution_id:
                adopted = dict(body)
                adopted["metadata"] = dict(
                    body["metadata"],
                    annotations={**annotations, EXECUTION_ANNOTATION: self._execution_id},
                    labels={
                        **(body["metadata"].get("labels") or {}),
                        UID_LABEL: self._task["metadata"]["uid"],
                    },
                )
                try:
                    # Conditional on the resourceVersion read: a write in between is a 409.
                    replaced = await self._client.replace(
                        "ConfigMap", self._ns, self._name, adopted
                    )
                except ApiError as exc:
                    if exc.conflict or exc.not_found or exc.transient:
                        continue
                    raise
                self._rv = _resource_version(replaced)
                body = replaced or adopted
            self._owned = True
            self.labelled = _labelled(body)
            return None if state is None else (state, annotations)
        raise ApiError(409, "Conflict", "the checkpoint kept changing while being taken over")

    def _verified(self, loaded: tuple[int, RunState] | None) -> RunState | None:
        """The state of a checkpoint that verified, if the Task's status does not say it is
        older than one written before (a restored copy, or one deleted). Raises
        `CheckpointUntrusted`."""
        if loaded is None:
            if self.anchored:
                raise CheckpointUntrusted(
                    f"the checkpoint is gone, but the Task's status records checkpoint "
                    f"{self.anchored} (written before a tool call with side effects)"
                )
            return None
        sequence, state = loaded
        step = int((self._task.get("status") or {}).get("step") or 0)
        if sequence < self.anchored or state.step < step:
            raise CheckpointUntrusted(
                f"the checkpoint is older than the Task's status records (checkpoint "
                f"{sequence} at step {state.step}; status: checkpoint {self.anchored}, step "
                f"{step}): an earlier copy was restored"
            )
        self.sequence = sequence
        return state

    def release_to(self, reaper: CheckpointDeleter) -> bool:
        """Hand the deletion of the checkpoint to `reaper` (a batched delete by label) if this
        execution created it, so that it carries the label; False otherwise (the caller
        deletes it with `delete()`). Only for a Task whose terminal status is written: nobody
        writes its checkpoint any more, so no precondition is needed."""
        if not (self._owned and self.labelled):
            return False
        self._owned = False
        self._rv = None
        reaper.delete_later(self._ns, self._task["metadata"]["uid"])
        return True

    async def delete(self) -> bool:
        """Delete the checkpoint if this execution owns it (conditional on the resourceVersion
        of our last write, else on the one read). False if it is absent or another execution
        owns it (it is left alone)."""
        known, self._rv = self._rv, None
        if known is not None and self._owned:
            self._owned = False
            try:
                await self._client.delete("ConfigMap", self._ns, self._name, resource_version=known)
                return True
            except ApiError as exc:
                if not exc.conflict:
                    raise
                # Changed since our last write (taken over): decide on a fresh read.
        body = await self._client.get("ConfigMap", self._ns, self._name)
        self._owned = False
        if body is None:
            return False
        owner = (body["metadata"].get("annotations") or {}).get(EXECUTION_ANNOTATION)
        if owner != self._execution_id:
            return False
        try:
            await self._client.delete(
                "ConfigMap",
                self._ns,
                self._name,
                resource_version=body["metadata"]["resourceVersion"],
            )
        except ApiError as exc:
            if exc.conflict:
                return False
            raise
        return True

    async def __call__(self, event: Event) -> None:
        if isinstance(event, Checkpoint):
            await self.save(event.state)
            if self._lease is not None:
                self._lease.check()


def _labelled(body: dict[str, Any]) -> bool:
    return UID_LABEL in ((body.get("metadata") or {}).get("labels") or {})


def _resource_version(body: dict[str, Any] | None) -> str | None:
    if not body:
        return None
    value = (body.get("metadata") or {}).get("resourceVersion")
    return str(value) if value else None
