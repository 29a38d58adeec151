"""The A2A agent card of a served Agent, generated from its `spec.a2a` and its name: one
JSON-RPC endpoint at `/a2a/<namespace>/<agent>` (A2A 1.0, and 0.3 through the SDK's
compatibility mode), bearer tokens (Kubernetes identities), no push notifications."""

from __future__ import annotations

from typing import Any

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
)

SCHEME = "kubernetes"
MODES = ["text/plain", "application/json"]


def served(agent: dict[str, Any] | None) -> bool:
    """Whether the Agent object opted in (`spec.a2a.enabled: true`)."""
    a2a = ((agent or {}).get("spec") or {}).get("a2a") or {}
    return a2a.get("enabled") is True


def agent_card(agent: dict[str, Any], url: str) -> AgentCard:
    """The card of a served `agent` whose JSON-RPC endpoint is `url`."""
    meta = agent.get("metadata") or {}
    name = str(meta.get("name"))
    a2a = (agent.get("spec") or {}).get("a2a") or {}
    description = a2a.get("description") or (
        f"The ordo Agent {name} in namespace {meta.get('namespace')}."
    )
    card = AgentCard(
        name=name,
        description=description,
        version=str(meta.get("generation") or 1),
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version=version)
            for version in ("1.0", "0.3")
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=MODES,
        default_output_modes=MODES,
        skills=[
            AgentSkill(
                id=skill["name"],
                name=skill["name"],
                description=skill.get("description") or skill["name"],
                tags=skill.get("tags") or [],
            )
            for skill in a2a.get("skills") or []
        ],
    )
    card.security_schemes[SCHEME].CopyFrom(
        SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(
                scheme="Bearer",
                bearer_format="JWT",
                description="A Kubernetes token of the caller (kubectl create token), "
                "checked with a TokenReview; RBAC on ordo.dev tasks decides each method.",
            )
        )
    )
    requirement = SecurityRequirement()
    requirement.schemes[SCHEME].SetInParent()
    card.security_requirements.append(requirement)
    return card
