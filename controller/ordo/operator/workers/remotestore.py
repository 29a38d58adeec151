"""An ObjectStore (runtime/store.py) whose reads are served by the control process over the
worker pipe (protocol.py): the child's runs see the operator's watch-fed cache and the run's
Secret-once store. A failed read comes back as the error it was: a StoreError (NotSynced and
the like) stays a StoreError, so fail-closed reads stay fail-closed, and an ApiError stays
an ApiError (a transient one is retried by the job, as in one process)."""

from __future__ import annotations

import asyncio
import builtins
import itertools
from collections.abc import Callable
from typing import Any

from ...credentials import CredentialRefused, Destination, Release
from ...runtime.store import DescribesSecrets, ObjectStore, StoreError
from ..kube.client import ApiError
from .protocol import Message


class RemoteStore:
    """The store of one run in a worker child: `send` writes a read request to control
    (which adds the run's id), `answer` takes control's `got`."""

    def __init__(self, send: Callable[[Message], None]) -> None:
        self._send = send
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}

    async def _ask(self, message: Message) -> Any:
        rid = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = future
        try:
            self._send({**message, "rid": rid})
            return await future
        finally:
            self._waiting.pop(rid, None)

    def answer(self, message: Message) -> None:
        """A `got` message from control."""
        future = self._waiting.get(int(message["rid"]))
        if future is None or future.done():
            return
        if "apiError" in message:
            status, reason, text = message["apiError"]
            future.set_exception(ApiError(int(status), str(reason), str(text)))
        elif "error" in message:
            future.set_exception(StoreError(str(message["error"])))
        elif "refused" in message:
            future.set_exception(CredentialRefused(str(message["refused"])))
        else:
            future.set_result(message.get("value"))

    def fail_all(self, why: str) -> None:
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(StoreError(why))

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        value = await self._ask({"type": "get", "kind": kind, "namespace": namespace, "name": name})
        return value if isinstance(value, dict) else None

    async def list(self, kind: str, namespace: str) -> builtins.list[dict[str, Any]]:
        value = await self._ask({"type": "list", "kind": kind, "namespace": namespace})
        return builtins.list(value or [])

    async def credential(
        self, namespace: str, name: str, key: str, dest: Destination | None
    ) -> Release:
        """Control releases the value (its store decides, for `dest`), or refuses."""
        where = None if dest is None else [dest.host, dest.port]
        value = await self._ask(
            {"type": "secret", "namespace": namespace, "name": name, "key": key, "dest": where}
        )
        if not isinstance(value, dict):
            return Release(None)
        text = value.get("value")
        return Release(
            text if isinstance(text, str) else None,
            value.get("warning"),
            value.get("violation"),
        )

    async def secret_keys(self, namespace: str, name: str) -> builtins.list[str] | None:
        """The Secret's key names (never values), or None when it does not exist; [""] when
        control's store cannot tell (fetch.credential's plain message)."""
        value = await self._ask({"type": "keys", "namespace": namespace, "name": name})
        return None if value is None else [str(k) for k in value]

    def secret_hint(self, name: str, key: str) -> str:
        """The operator's stores (KubeStore, CachedStore) have no hint to add in a cluster."""
        return ""


READS = frozenset({"get", "list", "secret", "keys"})
"""The message types `serve` answers."""


async def serve(store: ObjectStore, message: Message) -> Message:
    """Control side: the `got` answer to a child's store read (carrying the run's `id`)."""
    answer: Message = {"type": "got", "rid": message["rid"]}
    if "id" in message:
        answer["id"] = message["id"]
    try:
        kind = message["type"]
        if kind == "get":
            answer["value"] = await store.get(
                message["kind"], message["namespace"], message["name"]
            )
        elif kind == "list":
            answer["value"] = await store.list(message["kind"], message["namespace"])
        elif kind == "keys":
            if isinstance(store, DescribesSecrets):
                answer["value"] = await store.secret_keys(message["namespace"], message["name"])
            else:
                answer["value"] = [""]
        else:
            where = message.get("dest")
            dest = None if where is None else Destination(str(where[0]), where[1])
            released = await store.credential(
                message["namespace"], message["name"], message["key"], dest
            )
            answer["value"] = {
                "value": released.value,
                "warning": released.warning,
                "violation": released.violation,
            }
    except CredentialRefused as refusal:
        answer["refused"] = refusal.message
    except StoreError as error:
        answer["error"] = str(error) or type(error).__name__
    except ApiError as error:
        text, prefix = str(error), f"{error.status} {error.api_reason}: "
        answer["apiError"] = [error.status, error.api_reason, text.removeprefix(prefix)]
    except Exception as error:  # fail closed: the read failed, whatever the reason
        answer["error"] = f"the read failed in the control process ({type(error).__name__})"
    return answer
