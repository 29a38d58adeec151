"""Model providers behind the engine's ModelClient seam."""

from __future__ import annotations

from ..api import ModelEndpoint
from ..credentials import NOWHERE, Destination, destination
from ..engine.model import ModelClient

DEFAULT_BASE_URLS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
    "ollama": "http://localhost:11434/v1",
}
"""Where a provider's requests go without `spec.baseUrl` (the SDKs are always given one)."""


def endpoint_destination(endpoint: ModelEndpoint) -> Destination | None:
    """Where the endpoint's API key is sent: its baseUrl's host, else the provider's default
    (NOWHERE for mock; None when there is neither: no Secret allows that)."""
    spec = endpoint.spec
    if spec.provider == "mock":
        return NOWHERE
    url = spec.base_url or DEFAULT_BASE_URLS.get(spec.provider)
    return destination(url) if url else None


def build_model_client(endpoint: ModelEndpoint, api_key: str | None) -> ModelClient:
    """The client for one ModelEndpoint."""
    provider = endpoint.spec.provider
    if provider == "mock":
        from .mock import MockModelClient

        return MockModelClient(endpoint)
    if provider == "anthropic":
        from .anthropic_provider import AnthropicModelClient

        return AnthropicModelClient(endpoint, api_key)
    if provider in ("openai", "openai-compatible", "azure-openai", "ollama"):
        from .openai_provider import OpenAIModelClient

        return OpenAIModelClient(endpoint, api_key)
    raise ValueError(f"unknown provider {provider!r}")
