"""A remote A2A agent built from the a2a-sdk's own server classes (AgentExecutor,
DefaultRequestHandler, the SDK's card and JSON-RPC routes), served by uvicorn on 127.0.0.1 in
a thread: what an `a2a` Tool calls in the tests.

What it does with a message's text:
- `ECHO <text>`: completes with the artifact `echo: <text>`;
- `FAIL`: fails with the status message `remote trouble`;
- `BIG <n>`: completes with an artifact of n characters `x`;
- `SLOW`: works until cancelled (or `release()`d, then completes `slow done`).

It counts what arrived: `sends` (message ids, in order), `cancels`, and the metadata and
headers of each send (`metadata`, `headers`)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import uvicorn
from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    TaskState,
)
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send


class _Executor(AgentExecutor):
    def __init__(self, agent: RemoteAgentServer) -> None:
        self._agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None and context.task_id and context.context_id
        self._agent.sends.append(message.message_id)
        self._agent.metadata.append(MessageToDict(message.metadata))
        if context.current_task is None:
            submitted = new_task(
                context.task_id, context.context_id, TaskState.TASK_STATE_SUBMITTED
            )
            await event_queue.enqueue_event(submitted)
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        text = context.get_user_input()
        if text.startswith("ECHO "):
            await updater.add_artifact([Part(text=f"echo: {text[5:]}")])
            await updater.complete()
        elif text == "FAIL":
            await updater.failed(updater.new_agent_message([Part(text="remote trouble")]))
        elif text.startswith("BIG "):
            await updater.add_artifact([Part(text="x" * int(text[4:]))])
            await updater.complete()
        elif text == "SLOW":
            await updater.start_work()
            self._agent.working.set()
            while not self._agent.released.is_set():
                await asyncio.sleep(0.05)
            await updater.add_artifact([Part(text="slow done")])
            await updater.complete()
        else:
            await updater.reject()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        self._agent.cancels.append(context.task_id)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


class _Headers:
    """Records the request headers of every JSON-RPC POST."""

    def __init__(self, app: ASGIApp, seen: list[dict[str, str]]) -> None:
        self._app = app
        self._seen = seen

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            self._seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await self._app(scope, receive, send)


class RemoteAgentServer:
    """The SDK's server on a free loopback port; `url` is its base URL."""

    def __init__(self) -> None:
        self.sends: list[str] = []
        self.cancels: list[str] = []
        self.metadata: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.working = threading.Event()
        self.released = threading.Event()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def release(self) -> None:
        self.released.set()

    def __enter__(self) -> RemoteAgentServer:
        config = uvicorn.Config(_Placeholder(), host="127.0.0.1", port=0, log_level="warning")
        self._server = uvicorn.Server(config)
        started = threading.Event()

        def serve() -> None:
            assert self._server is not None
            self._server.config.app = _App(self)
            asyncio.run(self._run(started))

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        if not started.wait(20):
            raise RuntimeError("the remote A2A agent did not start")
        return self

    async def _run(self, started: threading.Event) -> None:
        assert self._server is not None
        config = self._server.config
        if not config.loaded:
            config.load()
        self._server.lifespan = config.lifespan_class(config)
        await self._server.startup()
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self._app_holder.set_url(self.url)  # type: ignore[attr-defined]
        started.set()
        await self._server.main_loop()
        await self._server.shutdown()

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)


class _Placeholder:
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("not loaded")


class _App:
    """The Starlette app, built once the port (in the card's interface URL) is known."""

    def __init__(self, agent: RemoteAgentServer) -> None:
        self._agent = agent
        self._app: ASGIApp | None = None
        agent._app_holder = self  # type: ignore[attr-defined]

    def set_url(self, url: str) -> None:
        card = AgentCard(
            name="remote",
            description="a test agent",
            version="1.0",
            supported_interfaces=[
                AgentInterface(protocol_binding="JSONRPC", url=url + "/rpc", protocol_version="1.0")
            ],
            skills=[AgentSkill(id="echo", name="echo", description="echoes", tags=["test"])],
            capabilities=AgentCapabilities(streaming=False),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
        )
        handler = DefaultRequestHandler(_Executor(self._agent), InMemoryTaskStore(), card)
        routes = [*create_agent_card_routes(card), *create_jsonrpc_routes(handler, "/rpc")]
        self._app = _Headers(Starlette(routes=routes), self._agent.headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            message = await receive()
            while message["type"] != "lifespan.shutdown":
                await send({"type": message["type"] + ".complete"})
                message = await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        assert self._app is not None
        await self._app(scope, receive, send)
