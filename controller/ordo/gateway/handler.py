"""The A2A methods of one served Agent for one authenticated caller, on ordo Tasks: the
SDK's `RequestHandler`, which its JSON-RPC dispatcher (v1.0 and 0.3 names) calls.

Push notifications are not offered (the card says so): the gateway never calls out."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    InvalidParamsError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from ..operator.kube.client import ApiError, KubeClient
from . import tasks
from .follow import versions
from .reviews import Caller
from .traces import current_traceparent

MAX_PAGE = 100


class AgentTasks(RequestHandler):
    """A2A on the Tasks of Agent `agent` in `namespace`, as `caller`."""

    def __init__(
        self,
        kube: KubeClient,
        namespace: str,
        agent: str,
        caller: Caller,
        max_depth: int,
        on_created: Callable[[], None] = lambda: None,
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._agent = agent
        self._caller = caller
        self._max_depth = max_depth
        self._on_created = on_created
        """Called once per Task this handler creates (the gateway's metric)."""

    async def _read(self, name: str) -> dict[str, Any]:
        """The served Agent's Task `name` created through the gateway, or TaskNotFound."""
        obj = await self._kube.get("Task", self._namespace, name) if name else None
        labels = ((obj or {}).get("metadata") or {}).get("labels") or {}
        if obj is None or labels.get(tasks.AGENT_LABEL) != self._agent:
            raise TaskNotFoundError
        return obj

    async def _start(self, message: Message) -> dict[str, Any]:
        """Create the Task for `message`, or find the one an identical earlier send made."""
        if not message.message_id:
            raise InvalidParamsError(message="the message needs a messageId")
        if message.task_id:
            raise UnsupportedOperationError(
                message="an ordo Task takes one input: send a new message without taskId"
            )
        chain = tasks.caller_chain(message)
        why = tasks.refusal(self._agent, chain, self._max_depth)
        if why:
            raise InvalidParamsError(message=why)
        name = tasks.task_name(self._agent, self._caller, message.message_id)
        body = tasks.task_body(
            name, self._agent, self._caller, message, chain, current_traceparent()
        )
        try:
            created = await self._kube.create("Task", self._namespace, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            return await self._read(name)
        self._on_created()
        return created

    async def _follow(self, obj: dict[str, Any]) -> AsyncGenerator[Event, None]:
        """Status updates (state and step) until the Task stops or needs approval; the
        answer as an artifact before the final update."""
        name = obj["metadata"]["name"]
        seen = (tasks.task_state(obj), (obj.get("status") or {}).get("step"))
        if seen[0] in tasks.INTERRUPTED_STATES:
            return
        async for current in versions(self._kube, self._namespace, name, obj):
            state = tasks.task_state(current)
            now = (state, (current.get("status") or {}).get("step"))
            if now == seen:
                continue
            seen = now
            ctx = tasks.context_id(current)
            artifact = tasks.answer(current)
            if artifact is not None:
                yield TaskArtifactUpdateEvent(
                    task_id=name, context_id=ctx, artifact=artifact, last_chunk=True
                )
            yield TaskStatusUpdateEvent(
                task_id=name, context_id=ctx, status=tasks.status_of(current)
            )
            if state in tasks.INTERRUPTED_STATES:
                return

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        obj = await self._start(params.message)
        if params.configuration.return_immediately:
            return tasks.a2a_task(obj)
        last = obj
        name = obj["metadata"]["name"]
        if tasks.task_state(obj) not in tasks.INTERRUPTED_STATES:
            async for current in versions(self._kube, self._namespace, name, obj):
                last = current
                if tasks.task_state(current) in tasks.INTERRUPTED_STATES:
                    break
        return tasks.a2a_task(last)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        obj = await self._start(params.message)
        yield tasks.a2a_task(obj)
        async for event in self._follow(obj):
            yield event

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        obj = await self._read(params.id)
        yield tasks.a2a_task(obj)
        async for event in self._follow(obj):
            yield event

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        return tasks.a2a_task(await self._read(params.id))

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        items = await self._kube.list(
            "Task", self._namespace, label_selector=f"{tasks.AGENT_LABEL}={self._agent}"
        )
        found = [tasks.a2a_task(obj) for obj in items]
        if params.context_id:
            found = [t for t in found if t.context_id == params.context_id]
        if params.status != TaskState.TASK_STATE_UNSPECIFIED:
            found = [t for t in found if t.status.state == params.status]
        found.sort(key=lambda t: t.id)
        if params.page_token:
            found = [t for t in found if t.id > params.page_token]
        size = min(params.page_size or MAX_PAGE, MAX_PAGE)
        page = found[:size]
        more = len(found) > size
        return ListTasksResponse(
            tasks=page,
            next_page_token=page[-1].id if more and page else "",
            page_size=size,
            total_size=len(found),
        )

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        obj = await self._read(params.id)
        if tasks.task_state(obj) in tasks.FINAL_STATES:
            raise TaskNotCancelableError
        patched = await self._kube.patch(
            "Task", self._namespace, params.id, {"spec": {"cancel": True}}
        )
        return tasks.a2a_task(patched)

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise UnsupportedOperationError(message="there is no extended card")
