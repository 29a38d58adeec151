"""AgentRole and ToolPermission: who may invoke which tool."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import Name, OrdoModel, Permission, Resource, StatusBase, UniqueItems

MatchMode = Literal["all", "any"]


class AgentRoleSpec(OrdoModel):
    """Desired state of an AgentRole."""

    description: Annotated[str, Field(max_length=4096)] | None = None
    """What the role is for."""
    permissions: Annotated[
        list[Permission],
        Field(max_length=256, json_schema_extra={"x-kubernetes-list-type": "set"}),
        UniqueItems,
    ]
    """Permissions granted, e.g. `tool:web-search:invoke`."""


class AgentRoleStatus(StatusBase):
    """Observed state: `Ready`, and how many Agents hold the role."""

    agents: Annotated[int, Field(ge=0)] | None = None
    """How many Agents in the namespace list this role in `spec.roles` (the `Ready` message names a few)."""


class AgentRole(Resource):
    """A named set of permissions an Agent can hold."""

    kind: Literal["AgentRole"] = "AgentRole"
    spec: AgentRoleSpec
    status: AgentRoleStatus | None = None


class ToolPermissionSpec(OrdoModel):
    """Desired state of a ToolPermission."""

    tool_ref: Name
    """The Tool this permission guards."""
    required_permissions: Annotated[
        list[Permission],
        Field(min_length=1, max_length=64, json_schema_extra={"x-kubernetes-list-type": "set"}),
        UniqueItems,
    ]
    """Permissions an Agent's roles must grant to invoke the tool."""
    match_mode: MatchMode = "all"
    """`all`: every permission is needed; `any`: one is enough."""
    description: Annotated[str, Field(max_length=4096)] | None = None
    """Why the tool is guarded."""


class ToolPermission(Resource):
    """The permissions an Agent needs to invoke a Tool."""

    kind: Literal["ToolPermission"] = "ToolPermission"
    spec: ToolPermissionSpec
    status: StatusBase | None = None
