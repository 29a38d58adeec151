"""Per-step checkpoints of a running Task, in a ConfigMap the Task owns (so garbage
collection removes it with the Task). The transcript is gzip-compressed; the operator
deletes the checkpoint when the Task ends."""

from __future__ import annotations

import base64
import gzip
import json
from typing import Any

from ..engine.events import Checkpoint, Event
from ..engine.state import RunState
from .kube import ApiError, KubeClient

MAX_BYTES = 900_000
LABEL = "ordo.dev/checkpoint-of"


def name_for(task: dict[str, Any]) -> str:
    return f"ordo-checkpoint-{task['metadata']['uid']}"


class CheckpointTooLarge(Exception):
    pass


class CheckpointStore:
    def __init__(
        self, client: KubeClient, task: dict[str, Any], execution_id: str, snapshot_hash: str = ""
    ) -> None:
        self._client = client
        self._task = task
        self._ns = task["metadata"].get("namespace", "default")
        self._name = name_for(task)
        self._execution_id = execution_id
        self.snapshot_hash = snapshot_hash
        self._exists: bool | None = None
        self.writes = 0
        self.too_large = False

    def _body(self, state: RunState) -> dict[str, Any]:
        payload = gzip.compress(json.dumps(state.to_dict(), separators=(",", ":")).encode())
        if len(payload) > MAX_BYTES:
            raise CheckpointTooLarge(f"checkpoint of {len(payload)} bytes exceeds {MAX_BYTES}")
        meta = self._task["metadata"]
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self._name,
                "namespace": self._ns,
                "labels": {LABEL: meta["name"][:63], "app.kubernetes.io/managed-by": "ordo"},
                "annotations": {
                    "ordo.dev/execution-id": self._execution_id,
                    "ordo.dev/snapshot-hash": self.snapshot_hash,
                },
                "ownerReferences": [
                    {
                        "apiVersion": self._task["apiVersion"],
                        "kind": "Task",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": False,
                    }
                ],
            },
            "binaryData": {"state.json.gz": base64.b64encode(payload).decode()},
        }

    async def save(self, state: RunState) -> None:
        if self.too_large:
            return
        try:
            body = self._body(state)
        except CheckpointTooLarge:
            self.too_large = True
            await self.delete()  # a stale checkpoint must not be resumed from
            return
        self.writes += 1
        if self._exists:
            await self._client.replace("ConfigMap", self._ns, self._name, body)
            return
        try:
            await self._client.create("ConfigMap", self._ns, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            await self._client.replace("ConfigMap", self._ns, self._name, body)
        self._exists = True

    async def load(self) -> tuple[RunState, dict[str, str]] | None:
        body = await self._client.get("ConfigMap", self._ns, self._name)
        if body is None:
            self._exists = False
            return None
        self._exists = True
        raw = base64.b64decode((body.get("binaryData") or {})["state.json.gz"])
        state = RunState.from_dict(json.loads(gzip.decompress(raw)))
        return state, (body["metadata"].get("annotations") or {})

    async def delete(self) -> None:
        await self._client.delete("ConfigMap", self._ns, self._name)
        self._exists = False

    async def __call__(self, event: Event) -> None:
        if isinstance(event, Checkpoint):
            await self.save(event.state)
