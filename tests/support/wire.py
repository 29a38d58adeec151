"""Builders for wire tests: ModelEndpoints, Tools, run configs and script steps."""

from __future__ import annotations

import os
from typing import Any

import pytest

from ordo.api import ModelEndpoint, Tool
from ordo.engine.governance import Governance
from ordo.engine.state import RunConfig
from ordo.engine.tooling import ResolvedTool

from .scripted import Step

CANARY = "sk-canary-XYZ"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def service_url(variable: str) -> str:
    """The URL of a service from the environment; without it, fail in CI and skip locally."""
    url = os.environ.get(variable)
    if url:
        return url
    message = f'{variable} is not set: start the services with eval "$(scripts/services start)"'
    if in_ci():
        pytest.fail(message + " (CI must provide them)")
    pytest.skip(message)


# -- model endpoints ------------------------------------------------------------------------


def endpoint(provider: str, base_url: str | None, **spec: Any) -> ModelEndpoint:
    """A ModelEndpoint with fast retries (10ms backoff) unless given."""
    body: dict[str, Any] = {
        "provider": provider,
        "model": spec.pop("model", "claude-test" if provider == "anthropic" else "gpt-test"),
        "timeout": spec.pop("timeout", "5s"),
        "retry": spec.pop("retry", {"maxAttempts": 3, "backoff": "10ms"}),
        **spec,
    }
    if base_url is not None:
        body["baseUrl"] = base_url
    if provider in ("openai", "anthropic", "azure-openai"):
        body.setdefault("credentials", {"secretRef": {"name": "model-key", "key": "api-key"}})
    return ModelEndpoint.model_validate(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "ModelEndpoint",
            "metadata": {"name": "model", "namespace": "wire"},
            "spec": body,
        }
    )


def tool(name: str, spec: dict[str, Any]) -> Tool:
    return Tool.model_validate(
        {
            "apiVersion": "ordo.dev/v1alpha1",
            "kind": "Tool",
            "metadata": {"name": name, "namespace": "wire"},
            "spec": spec,
        }
    )


def resolved(name: str, spec: dict[str, Any], secret: str | None = None) -> ResolvedTool:
    return ResolvedTool(tool(name, spec), name.replace(".", "_"), secret)


def run_config(
    tools: list[str], *, system: str = "You are a wire test agent.", **kw: Any
) -> RunConfig:
    kw.setdefault("timeout", 30.0)
    return RunConfig(
        system_prompt=system,
        user_message=kw.pop("user", "do the thing"),
        governance=Governance(candidate_tools=frozenset(tools)),
        **kw,
    )


def text(value: str) -> Step:
    return {"text": value}


def calls(*items: tuple[str, dict[str, Any]] | dict[str, Any]) -> Step:
    out = []
    for item in items:
        if isinstance(item, tuple):
            out.append({"name": item[0], "arguments": item[1]})
        else:
            out.append(item)
    return {"tool_calls": out}
