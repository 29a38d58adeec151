"""ModelEndpoint: where and how to call a model."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from .base import (
    CelRule,
    Duration,
    JsonObject,
    OrdoModel,
    PositiveDuration,
    Resource,
    SecretKeyRef,
    StatusBase,
)

Provider = Literal["openai", "anthropic", "openai-compatible", "azure-openai", "ollama", "mock"]
KEYED_PROVIDERS = ("openai", "anthropic", "azure-openai")
"""Providers that cannot be called without an API key."""


class Credentials(OrdoModel):
    """Where the API key comes from."""

    secret_ref: SecretKeyRef
    """The Secret key holding the API key. The Secret must carry the label
    `ordo.dev/credential: "true"`; its annotation `ordo.dev/allowed-hosts`, if any, must list
    the host of baseUrl (or of the provider's default) (docs/security.md#secrets)."""


class ModelOptions(OrdoModel):
    """Sampling and provider options sent with every request."""

    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    """Sampling temperature."""
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    """Nucleus sampling."""
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """Most output tokens per model call (Anthropic requires one; default 1024 there)."""
    deployment: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """azure-openai: the deployment name (default: `model`)."""
    api_version: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    """azure-openai: the `api-version` query parameter."""


class Retry(OrdoModel):
    """Retries of one model call on 429, 5xx and connection errors."""

    max_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    """Total attempts, including the first."""
    backoff: PositiveDuration = "1s"
    """First backoff; doubles each attempt, `Retry-After` wins when the server sends it."""


class MockToolCall(OrdoModel):
    """A tool call the mock model makes."""

    tool: Annotated[str, Field(min_length=1, max_length=64)]
    """The tool name as the model sees it (a Tool's name, or `memory_read`, ...)."""
    arguments: JsonObject | None = None
    """The arguments, as a JSON object."""


class MockUsage(OrdoModel):
    """Token usage the mock reports for a turn (estimated from text length when unset)."""

    input_tokens: Annotated[int, Field(ge=0)] | None = None
    """Prompt tokens reported for this turn."""
    output_tokens: Annotated[int, Field(ge=0)] | None = None
    """Completion tokens reported for this turn."""


class MockTurn(OrdoModel):
    """One scripted model response."""

    text: Annotated[str, Field(max_length=262144)] | None = None
    """Assistant text. A turn with text and no tool calls is a final answer."""
    tool_calls: Annotated[list[MockToolCall], Field(max_length=64)] | None = None
    """Tool calls requested in this turn."""
    delay: Duration | None = None
    """Wait this long before answering (to exercise timeouts)."""
    busy: Annotated[float, Field(gt=0, le=30)] | None = None
    """Compute this many seconds before answering without yielding, as a pathological input
    can make a run do (to exercise worker isolation: with `--workers`, only this run's
    worker stalls and is replaced; at most 30)."""
    usage: MockUsage | None = None
    """Reported token usage."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="has(self.text) || has(self.toolCalls)",
            message="a mock turn needs text or toolCalls",
            check=lambda t: t.text is not None or t.tool_calls is not None,
        ),
    )


class MockScript(OrdoModel):
    """Scripted responses of the `mock` provider, one per model call, in order. When the script
    is unset or used up the mock calls each offered tool once, then answers with a summary."""

    turns: Annotated[list[MockTurn], Field(max_length=1000)] | None = None
    """The responses: the first answers the run's first model call, and so on."""


class ModelEndpointSpec(OrdoModel):
    """Desired state of a ModelEndpoint."""

    provider: Provider
    """Wire protocol: `openai`, `anthropic`, `openai-compatible`, `azure-openai`, `ollama` or `mock`."""
    base_url: Annotated[str, Field(pattern=r"^https?://", max_length=2048)] | None = None
    """API base URL; defaults per provider (ollama: http://localhost:11434/v1)."""
    model: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    """Model name sent to the provider; required except for `mock`."""
    credentials: Credentials | None = None
    """API key source; required for openai, anthropic and azure-openai."""
    options: ModelOptions | None = None
    """Request options."""
    timeout: PositiveDuration = "60s"
    """Per-attempt deadline of one model call (also bounded by the Task deadline)."""
    retry: Annotated[Retry, Field(json_schema_extra={"default": {}})] = Field(default_factory=Retry)
    """Retry policy."""
    mock: MockScript | None = None
    """Scripted replies; only for provider `mock`."""
    extra_body: JsonObject | None = None
    """Extra JSON merged into each request body (provider-specific parameters)."""

    cel_rules: ClassVar[tuple[CelRule, ...]] = (
        CelRule(
            rule="self.provider == 'mock' || has(self.model)",
            message="spec.model is required for every provider except mock",
            check=lambda s: s.provider == "mock" or s.model is not None,
        ),
        CelRule(
            rule="!(self.provider in ['openai', 'anthropic', 'azure-openai']) || has(self.credentials)",
            message="spec.credentials.secretRef is required for openai, anthropic and azure-openai",
            check=lambda s: s.provider not in KEYED_PROVIDERS or s.credentials is not None,
        ),
        CelRule(
            rule="self.provider != 'azure-openai' || has(self.baseUrl)",
            message="spec.baseUrl is required for azure-openai (https://<resource>.openai.azure.com)",
            check=lambda s: s.provider != "azure-openai" or s.base_url is not None,
        ),
        CelRule(
            rule="!has(self.mock) || self.provider == 'mock'",
            message="spec.mock is only valid with provider mock",
            check=lambda s: s.mock is None or s.provider == "mock",
        ),
    )

    def effective_model(self) -> str:
        return self.model or "mock"

    def option(self, name: str, default: Any = None) -> Any:
        value = getattr(self.options, name, None) if self.options else None
        return default if value is None else value


class ModelEndpointStatus(StatusBase):
    """Observed state: `Ready` says whether the credentials Secret and key exist."""


class ModelEndpoint(Resource):
    """A model provider endpoint and the model to call."""

    kind: Literal["ModelEndpoint"] = "ModelEndpoint"
    spec: ModelEndpointSpec
    status: ModelEndpointStatus | None = None
