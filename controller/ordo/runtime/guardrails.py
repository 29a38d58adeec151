"""Guardrails of a run: resolved with the snapshot (before any model call) and wired to live
checks when the run starts.

Resolution, in order (each failure ends the Task before any model call):
1. every Guardrail an AgentPolicy that selects the Agent requires (`requiredGuardrails`) is
   listed in the Agent's `spec.guardrails`, else `GuardrailMissing` naming both;
2. every listed Guardrail exists and parses, else `GuardrailMissing` (missing or unreadable)
   or `InvalidSpec` (e.g. a pattern RE2 cannot compile);
3. an http Guardrail's Secret exists (`SecretNotFound`); a model Guardrail's ModelEndpoint
   exists (`ModelEndpointNotFound`), has its Secret, and its model is allowed by every
   selecting policy's `allowedModels` (`ModelNotAllowed`), as for the Agent's own model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..api import Agent, AgentPolicy, ModelEndpoint
from ..api.guardrail import Guardrail
from ..credentials import destination
from ..engine.guardrails import GuardrailBinding, GuardrailCheck, ModelJudge, PatternCheck
from ..errors import ResolutionError
from ..providers import endpoint_destination
from . import fetch
from . import policies as policy_mod
from .store import ObjectStore


@dataclass(frozen=True)
class ResolvedGuardrail:
    """A Guardrail as resolved for one run, with what its check needs."""

    guardrail: Guardrail
    secret: str | None = None
    """http: the Secret value sent as the bearer token."""
    endpoint: ModelEndpoint | None = None
    """model: the judge's ModelEndpoint."""
    api_key: str | None = None
    """model: the judge endpoint's credential."""

    @property
    def name(self) -> str:
        return self.guardrail.name


def missing_required(agent: Agent, policies: Sequence[AgentPolicy]) -> list[tuple[str, str]]:
    """(guardrail, policy) for every required Guardrail the Agent does not list."""
    declared = set(agent.spec.guardrails or [])
    return [
        (name, policy.name)
        for policy in policies
        for name in policy.spec.required_guardrails or []
        if name not in declared
    ]


async def _resolve_one(
    store: ObjectStore, namespace: str, name: str, policies: Sequence[AgentPolicy]
) -> ResolvedGuardrail:
    what = f"Guardrail {name!r}"
    guardrail = await fetch.get(store, Guardrail, namespace, name, "GuardrailMissing", what)
    spec = guardrail.spec
    if spec.http is not None and spec.http.secret_ref is not None:
        ref = spec.http.secret_ref
        secret = await fetch.credential(
            store, namespace, ref.name, ref.key, what, destination(spec.http.url)
        )
        return ResolvedGuardrail(guardrail, secret=secret)
    if spec.model is not None:
        endpoint = await fetch.get(
            store,
            ModelEndpoint,
            namespace,
            spec.model.model_ref,
            "ModelEndpointNotFound",
            f"ModelEndpoint {spec.model.model_ref!r} of {what}",
        )
        policy_mod.check_model_allowed(list(policies), endpoint)
        api_key = None
        if endpoint.spec.credentials is not None:
            ref = endpoint.spec.credentials.secret_ref
            api_key = await fetch.credential(
                store,
                namespace,
                ref.name,
                ref.key,
                f"ModelEndpoint {endpoint.name!r}",
                endpoint_destination(endpoint),
            )
        return ResolvedGuardrail(guardrail, endpoint=endpoint, api_key=api_key)
    return ResolvedGuardrail(guardrail)


async def resolve_guardrails(
    store: ObjectStore, agent: Agent, policies: Sequence[AgentPolicy]
) -> tuple[ResolvedGuardrail, ...]:
    """The Agent's guardrails, in its order, or ResolutionError (see the module docstring)."""
    missing = missing_required(agent, policies)
    if missing:
        listed = ", ".join(f"{g!r} (AgentPolicy {p!r})" for g, p in missing[:10])
        raise ResolutionError(
            "GuardrailMissing",
            f"Agent {agent.name!r} does not list required guardrail(s) {listed} in spec.guardrails",
        )
    return tuple(
        [
            await _resolve_one(store, agent.namespace, n, policies)
            for n in agent.spec.guardrails or []
        ]
    )


def content(resolved: Sequence[ResolvedGuardrail]) -> list[dict[str, Any]]:
    """What the snapshot hash covers of the guardrails (specs, never Secret values)."""
    return [
        {
            "name": r.name,
            "spec": r.guardrail.spec.to_dict(),
            "endpoint": r.endpoint.spec.to_dict() if r.endpoint else None,
        }
        for r in resolved
    ]


def guardrail_bindings(
    resolved: Sequence[ResolvedGuardrail],
) -> tuple[list[GuardrailBinding], list[Any]]:
    """Live checks for the resolved guardrails; also the clients to close afterwards."""
    from ..providers import build_model_client
    from ..tools.guardcheck import HttpGuardCheck

    bindings: list[GuardrailBinding] = []
    closers: list[Any] = []
    for r in resolved:
        spec = r.guardrail.spec
        check: GuardrailCheck
        if spec.pattern is not None:
            try:
                check = PatternCheck(spec.pattern)
            except ValueError as exc:
                raise ResolutionError("InvalidSpec", f"Guardrail {r.name!r}: {exc}") from None
        elif spec.http is not None:
            check = HttpGuardCheck(r.name, spec.http, r.secret)
        elif spec.model is not None and r.endpoint is not None:
            client = build_model_client(r.endpoint, r.api_key)
            closers.append(client)
            check = ModelJudge(client, spec.model.instructions, spec.model.max_calls_per_task)
        else:  # the API model forbids it; stay closed regardless
            raise ResolutionError("InvalidSpec", f"Guardrail {r.name!r} has no check settings")
        bindings.append(GuardrailBinding(r.name, frozenset(spec.points), check))
    return bindings, closers
