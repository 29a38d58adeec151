"""Memory: a key/value and search store the agent reaches through built-in tools."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from .base import CelRule, OrdoModel, Resource, SecretKeyRef, StatusBase

MemoryProvider = Literal["in-memory", "redis", "postgres"]


class MemoryIngest(OrdoModel):
    """How `memory_ingest` splits long text."""

    chunk_size: Annotated[int, Field(ge=64, le=100_000)] = 1000
    """Characters per chunk."""
    chunk_overlap: Annotated[int, Field(ge=0, le=10_000)] = 100
    """Characters shared by consecutive chunks."""


class MemorySpec(OrdoModel):
    """Desired state of a Memory."""

    provider: MemoryProvider
    """`in-memory` (per operator process), `redis` or `postgres`."""
    url: (
        Annotated[str, Field(pattern=r"^(redis|rediss|postgres|postgresql)://", max_length=2048)]
        | None
    ) = None
    """Connection URL without the password, e.g. redis://redis:6379/0 or postgresql://ordo@pg/ordo."""
    secret_ref: SecretKeyRef | None = None
    """Secret key holding the password. The Secret must carry the label
    `ordo.dev/credential: "true"`; its annotation `ordo.dev/allowed-hosts`, if any, must list
    the URL's host (docs/security.md#secrets)."""
    prefix: (
        Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[-a-zA-Z0-9_.:/]+$")] | None
    ) = None
    """Key prefix that isolates this memory; default `<namespace>/<name>`."""
    ingest: Annotated[MemoryIngest, Field(json_schema_extra={"default": {}})] = Field(
        default_factory=MemoryIngest
    )
    """Chunking of `memory_ingest`."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="self.provider == 'in-memory' || has(self.url)",
            message="spec.url is required for redis and postgres",
            check=lambda s: s.provider == "in-memory" or s.url is not None,
        ),
        CelRule(
            rule="self.ingest.chunkOverlap < self.ingest.chunkSize",
            message="spec.ingest.chunkOverlap must be smaller than chunkSize",
            check=lambda s: s.ingest.chunk_overlap < s.ingest.chunk_size,
        ),
    )


class Memory(Resource):
    """A memory store."""

    kind: Literal["Memory"] = "Memory"
    spec: MemorySpec
    status: StatusBase | None = None
