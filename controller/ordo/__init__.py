"""ordo: run governed LLM agents declared as Kubernetes custom resources.

The public face for embedding ordo or testing agents (what `ordo run` and the operator use):

    from ordo import ManifestStore, Task, execute, load_manifests

    mset = load_manifests(["examples/quickstart/"])
    store = ManifestStore(mset)
    for _, obj in mset.objects:
        if isinstance(obj, Task):
            outcome = await execute(obj, store)
            print(outcome.phase, outcome.reason, outcome.status().output)

A model for tests: a `mock` ModelEndpoint with a scripted reply list (`MockModelClient`), or
any object implementing `ModelClient` passed as `execute(..., model_factory=...)`.
Everything else is internal and may change between releases.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .api import (
    Agent,
    AgentPolicy,
    AgentRole,
    Memory,
    ModelEndpoint,
    Task,
    TaskStatus,
    Tool,
    ToolPermission,
)
from .api.manifests import ManifestSet
from .api.manifests import load as load_manifests
from .api.task import REASONS, Reason
from .api.usage import Usage
from .cli.local import ManifestStore
from .engine.model import ModelClient, ModelRequest, ModelResponse
from .engine.transcript import ToolCall
from .errors import OrdoError
from .providers.mock import MockModelClient
from .runtime import ObjectStore, TaskOutcome, execute

__all__ = [
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
]
