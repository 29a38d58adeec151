"""The run service between the engine and the two front ends (`ordo run`, the operator):
resolve a Task through an ObjectStore, merge policies and limits, assemble the prompt, wire
providers/tools/memory, and run it with one `execute()` that returns the `api` TaskStatus."""

from __future__ import annotations

from .execute import Prepare, Prepared, execute
from .outcome import TaskOutcome, internal_error
from .resolve import resolve
from .snapshot import Snapshot
from .store import ObjectStore
from .wiring import ModelFactory, default_model_factory

__all__ = [
    "ModelFactory",
    "ObjectStore",
    "Prepare",
    "Prepared",
    "Snapshot",
    "TaskOutcome",
    "default_model_factory",
    "execute",
    "internal_error",
    "resolve",
]
