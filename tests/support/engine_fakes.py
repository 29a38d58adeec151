"""Fakes for engine tests: a scripted ModelClient, counting tool executors, an in-memory
object store and builders of manifest bodies.

Everything here is real engine API (ModelClient protocol, ToolBinding, ObjectStore); nothing
is monkeypatched.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ordo.credentials import (
    CREDENTIAL_LABEL,
    Destination,
    Policy,
    Release,
    release,
    visible_keys,
)
from ordo.engine.governance import Governance
from ordo.engine.model import ModelRequest, ModelResponse
from ordo.engine.state import RunConfig, RunState
from ordo.engine.tooling import ToolBinding, ToolFailure, ToolOutput
from ordo.engine.transcript import AssistantMessage, Item, ToolCall, ToolResult, Usage
from ordo.errors import StoreError

NS = "default"

# --------------------------------------------------------------------------------------
# Model


def call(name: str, call_id: str, **arguments: Any) -> ToolCall:
    """A tool call with parsed arguments."""
    return ToolCall(call_id, name, arguments, json.dumps(arguments))


def bad_call(name: str, call_id: str) -> ToolCall:
    """A call whose arguments did not parse as a JSON object."""
    return ToolCall(call_id, name, None, "{not json")


def answer(text: str, usage: Usage | None = None) -> ModelResponse:
    return ModelResponse(text=text, usage=usage or Usage(1, 1), finish_reason="stop")


def tools_turn(*calls: ToolCall, text: str = "", usage: Usage | None = None) -> ModelResponse:
    return ModelResponse(
        text=text, tool_calls=tuple(calls), usage=usage or Usage(1, 1), finish_reason="tool_calls"
    )


Turn = ModelResponse | Callable[[ModelRequest, int], Awaitable[ModelResponse] | ModelResponse]


@dataclass(frozen=True)
class SeenRequest:
    """A copy of what one model call received (the engine's list may change afterwards)."""

    items: tuple[Item, ...]
    tools: tuple[str, ...]
    output_schema: dict[str, Any] | None

    @property
    def tool_names(self) -> set[str]:
        return set(self.tools)


class ScriptedModel:
    """A ModelClient whose N-th call answers with `turns[N]` (a ModelResponse, or a callable
    of (request, call index) returning one, possibly async). Past the script it answers
    `after` (default: a text answer "done")."""

    provider = "scripted"
    model = "scripted-1"

    def __init__(self, turns: Sequence[Turn] = (), *, after: Turn | None = None) -> None:
        self.turns = list(turns)
        self.after = after if after is not None else answer("done")
        self.requests: list[SeenRequest] = []

    @property
    def calls(self) -> int:
        return len(self.requests)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        index = len(self.requests)
        self.requests.append(
            SeenRequest(
                tuple(request.items), tuple(t.name for t in request.tools), request.output_schema
            )
        )
        turn = self.turns[index] if index < len(self.turns) else self.after
        if isinstance(turn, ModelResponse):
            return turn
        out = turn(request, index)
        if asyncio.iscoroutine(out):
            out = await out
        assert isinstance(out, ModelResponse)
        return out


class ModelFactory:
    """A model factory for `execute` that counts the models it makes and their calls."""

    def __init__(self, make: Callable[[Any], Any]) -> None:
        self._make = make
        self.models: list[Any] = []

    def __call__(self, snapshot: Any) -> Any:
        model = self._make(snapshot)
        self.models.append(model)
        return model

    @property
    def calls(self) -> int:
        return sum(len(m.requests) for m in self.models)


# --------------------------------------------------------------------------------------
# Tools


class CountingExecutor:
    """Records every call (its arguments). `result` is returned; `fail` raises ToolFailure;
    `hang` waits forever (until cancelled)."""

    def __init__(self, result: str = "ok", *, fail: str | None = None, hang: bool = False) -> None:
        self.result = result
        self.fail = fail
        self.hang = hang
        self.seen: list[dict[str, Any]] = []

    @property
    def calls(self) -> int:
        return len(self.seen)

    async def __call__(self, arguments: dict[str, Any]) -> ToolOutput:
        self.seen.append(dict(arguments))
        if self.hang:
            await asyncio.Event().wait()
        if self.fail is not None:
            raise ToolFailure(self.fail)
        return ToolOutput(self.result)


OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}
QUERY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"q": {"type": "string"}},
    "required": ["q"],
}


@dataclass
class Toolbox:
    """ToolBindings plus their counting executors, by model-visible name."""

    bindings: list[ToolBinding] = field(default_factory=list)
    executors: dict[str, CountingExecutor] = field(default_factory=dict)

    def add(
        self,
        name: str,
        *,
        object_name: str | None = None,
        schema: dict[str, Any] | None = None,
        builtin: bool = False,
        idempotent: bool = False,
        timeout: float | None = None,
        executor: CountingExecutor | None = None,
    ) -> Toolbox:
        ex = executor or CountingExecutor(f"result of {name}")
        self.executors[name] = ex
        self.bindings.append(
            ToolBinding(
                name=name,
                object_name=object_name or name,
                description=f"the {name} tool",
                parameters=schema if schema is not None else OBJECT_SCHEMA,
                executor=ex,
                builtin=builtin,
                idempotent=idempotent,
                timeout=timeout,
            )
        )
        return self

    def calls(self, name: str) -> int:
        return self.executors[name].calls

    @property
    def total_calls(self) -> int:
        return sum(e.calls for e in self.executors.values())


def toolbox(*names: str, builtins: Iterable[str] = ()) -> Toolbox:
    box = Toolbox()
    for n in names:
        box.add(n)
    for n in builtins:
        box.add(n, builtin=True)
    return box


def open_governance(*tools: str) -> Governance:
    """Every listed tool allowed, no roles, no permissions, no policies."""
    return Governance(candidate_tools=frozenset(tools))


def run_config(governance: Governance, **kw: Any) -> RunConfig:
    kw.setdefault("timeout", None)
    return RunConfig(
        system_prompt="You are a test agent.", user_message="do it", governance=governance, **kw
    )


# --------------------------------------------------------------------------------------
# Transcript checks


def tool_calls_of(state: RunState) -> list[ToolCall]:
    return [c for i in state.items if isinstance(i, AssistantMessage) for c in i.tool_calls]


def results_of(state: RunState) -> list[ToolResult]:
    return [i for i in state.items if isinstance(i, ToolResult)]


def assert_one_result_per_call(state: RunState) -> None:
    """Every tool call has exactly one ToolResult, every result answers a call, and results
    come after their call and before the next assistant message."""
    calls = tool_calls_of(state)
    ids = [c.id for c in calls]
    assert len(ids) == len(set(ids)), f"duplicate call ids {ids}"
    results = [r.call_id for r in results_of(state)]
    assert sorted(results) == sorted(ids), f"calls {ids} vs results {results}"
    pending: set[str] = set()
    for item in state.items:
        if isinstance(item, AssistantMessage):
            assert not pending, f"unanswered before next model turn: {pending}"
            pending = {c.id for c in item.tool_calls}
        elif isinstance(item, ToolResult):
            assert item.call_id in pending, f"result {item.call_id} without a pending call"
            pending.discard(item.call_id)
    assert not pending, f"unanswered: {pending}"


def result_for(state: RunState, call_id: str) -> ToolResult:
    (found,) = [r for r in results_of(state) if r.call_id == call_id]
    return found


# --------------------------------------------------------------------------------------
# Object store and manifests


class DictStore:
    """An ObjectStore over manifest bodies. `fail_list` / `fail_get` name kinds whose reads
    raise StoreError (an API error); `secrets` maps (name, key) to a value (an opted-in
    Secret that allows any host), `secret_bodies` a Secret name to its whole object (labels
    and annotations as given); both are released through `credentials.release`."""

    def __init__(
        self,
        *objects: dict[str, Any],
        secrets: dict[tuple[str, str], str] | None = None,
        fail_list: Iterable[str] = (),
        fail_get: Iterable[str] = (),
    ) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        for body in objects:
            self.put(body)
        self.secrets = dict(secrets or {})
        self.secret_bodies: dict[str, dict[str, Any]] = {}
        self.policy: Policy = "Enforce"
        self.fail_list = set(fail_list)
        self.fail_get = set(fail_get)

    def put(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        self.objects[(body["kind"], meta.get("namespace", NS), meta["name"])] = body

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind in self.fail_get:
            raise StoreError(
                f"get {kind}: 503 the server is currently unable to handle the request"
            )
        body = self.objects.get((kind, namespace, name))
        return copy.deepcopy(body) if body is not None else None

    async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        if kind in self.fail_list:
            raise StoreError(f"list {kind}: 403 forbidden")
        return [
            copy.deepcopy(b)
            for (k, ns, _), b in self.objects.items()
            if k == kind and ns == namespace
        ]

    async def credential(
        self, namespace: str, name: str, key: str, dest: Destination | None
    ) -> Release:
        return release(self._secret(namespace, name), name, key, dest, self.policy)

    def _secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        body = self.secret_bodies.get(name) or self.objects.get(("Secret", namespace, name))
        if body is None and any(n == name for n, _ in self.secrets):
            values = {k: v for (n, k), v in self.secrets.items() if n == name}
            body = {"metadata": {"name": name, "labels": {CREDENTIAL_LABEL: "true"}}}
            body["stringData"] = values
        return body

    async def secret_keys(self, namespace: str, name: str) -> list[str] | None:
        return visible_keys(self._secret(namespace, name), self.policy)

    def secret_hint(self, name: str, key: str) -> str:
        return ""


def obj(
    kind: str,
    name: str,
    spec: dict[str, Any],
    *,
    labels: dict[str, str] | None = None,
    namespace: str = NS,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "generation": 1}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "ordo.dev/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}


def agent(
    name: str = "agent", *, labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    spec.setdefault("modelRef", "model")
    return obj("Agent", name, spec, labels=labels)


def endpoint(name: str = "model", **spec: Any) -> dict[str, Any]:
    spec.setdefault("provider", "mock")
    return obj("ModelEndpoint", name, spec)


def mock_endpoint(
    name: str = "model", turns: list[dict[str, Any]] | None = None, **spec: Any
) -> dict[str, Any]:
    if turns is not None:
        spec["mock"] = {"turns": turns}
    return endpoint(name, provider="mock", **spec)


def mock_tool(name: str, result: Any = None, **spec: Any) -> dict[str, Any]:
    spec.setdefault("type", "mock")
    spec.setdefault("description", f"the {name} tool")
    if result is not None:
        spec["mock"] = {"result": result}
    return obj("Tool", name, spec)


def role(name: str, *permissions: str) -> dict[str, Any]:
    return obj("AgentRole", name, {"permissions": list(permissions)})


def permission(name: str, tool: str, *required: str, mode: str = "all") -> dict[str, Any]:
    return obj(
        "ToolPermission",
        name,
        {"toolRef": tool, "requiredPermissions": list(required), "matchMode": mode},
    )


def policy(name: str, **spec: Any) -> dict[str, Any]:
    return obj("AgentPolicy", name, spec)


def memory(name: str = "mem", **spec: Any) -> dict[str, Any]:
    spec.setdefault("provider", "in-memory")
    return obj("Memory", name, spec)


def task_body(name: str = "task", **spec: Any) -> dict[str, Any]:
    spec.setdefault("agentRef", "agent")
    spec.setdefault("input", "hello")
    return obj("Task", name, spec)


def task(name: str = "task", **spec: Any) -> Any:
    from ordo.api import Task

    return Task.model_validate(task_body(name, **spec))


def turn_calls(*calls: tuple[str, dict[str, Any]], text: str | None = None) -> dict[str, Any]:
    """A mock-provider turn with tool calls (manifest form)."""
    t: dict[str, Any] = {"toolCalls": [{"tool": n, "arguments": a} for n, a in calls]}
    if text is not None:
        t["text"] = text
    return t
