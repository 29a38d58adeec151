"""The ownerReference that makes an object the Task's: garbage collection removes it with the
Task (the execution Lease, the checkpoint ConfigMap)."""

from __future__ import annotations

from typing import Any


def owner_reference(task: dict[str, Any]) -> dict[str, Any]:
    """A controller ownerReference to `task` (a Task object as the API returns it). Deletion of
    the owned object never waits for the Task (`blockOwnerDeletion: false`)."""
    meta = task["metadata"]
    return {
        "apiVersion": task["apiVersion"],
        "kind": "Task",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": False,
    }
