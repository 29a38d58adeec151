"""Wire tests: providers, tools and memory backends over real connections on 127.0.0.1.

Model servers and the MCP server come from `tests.support` (real HTTP, real wire formats, the
official SDKs on the client side; nothing is monkeypatched). Redis and PostgreSQL come from
`scripts/services start`, which exports ORDO_TEST_REDIS_URL and ORDO_TEST_POSTGRES_URL; tests
that need them are marked `services` and fail (in CI) or skip (locally) without them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `tests.support` must import however pytest is started
    sys.path.insert(0, str(ROOT))

from tests.support.anthropic_server import AnthropicServer  # noqa: E402
from tests.support.http_tool_server import HttpToolServer  # noqa: E402
from tests.support.mcp_server import McpTestServer  # noqa: E402
from tests.support.openai_server import OpenAIServer  # noqa: E402
from tests.support.scripted import Script  # noqa: E402


@pytest.fixture
def openai_server() -> Iterator[Callable[..., OpenAIServer]]:
    """`openai_server(script, **kw)` starts a scripted OpenAI server (stopped afterwards)."""
    started: list[OpenAIServer] = []

    def start(script: Script | None = None, **kw: Any) -> OpenAIServer:
        server = OpenAIServer(script, **kw).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def anthropic_server() -> Iterator[Callable[..., AnthropicServer]]:
    started: list[AnthropicServer] = []

    def start(script: Script | None = None, **kw: Any) -> AnthropicServer:
        server = AnthropicServer(script, **kw).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def http_tool_server() -> Iterator[HttpToolServer]:
    with HttpToolServer() as server:
        yield server


@pytest.fixture
def mcp_server() -> Iterator[McpTestServer]:
    with McpTestServer(require_token="mcp-token") as server:
        yield server
