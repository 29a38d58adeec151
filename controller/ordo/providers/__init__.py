"""Model providers behind the engine's ModelClient seam."""

from __future__ import annotations

from ..api import ModelEndpoint
from ..engine.model import ModelClient


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
