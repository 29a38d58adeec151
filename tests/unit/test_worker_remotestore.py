"""RemoteStore over the worker protocol: reads answered by `serve` from a real store,
errors stay StoreErrors (fail closed)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ordo.credentials import CredentialRefused, Destination, Release
from ordo.operator.workers import protocol, remotestore
from ordo.runtime.store import StoreError


class DictStore:
    def __init__(self) -> None:
        self.objects = {("Agent", "ns", "a"): {"kind": "Agent", "metadata": {"name": "a"}}}

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "Broken":
            raise StoreError("cache not synced")
        return self.objects.get((kind, namespace, name))

    async def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        return [v for (k, n, _), v in self.objects.items() if (k, n) == (kind, namespace)]

    async def credential(
        self, namespace: str, name: str, key: str, dest: Destination | None
    ) -> Release:
        if dest is not None and dest.host == "evil.example":
            raise CredentialRefused(f"Secret {name!r} may not be sent to {dest}")
        if (name, key) == ("s", "k"):
            return Release("v", "a warning", "host") if dest is None else Release("v")
        return Release(None)


async def test_reads_round_trip_through_the_wire_format() -> None:
    store = DictStore()
    remote: remotestore.RemoteStore

    def send(message: protocol.Message) -> None:
        wire = protocol.decode(protocol.encode(message).rstrip(b"\n"))

        async def answer() -> None:
            got = await remotestore.serve(store, wire)
            remote.answer(protocol.decode(protocol.encode(got)))

        asyncio.get_running_loop().create_task(answer())

    remote = remotestore.RemoteStore(send)
    assert await remote.get("Agent", "ns", "a") == store.objects[("Agent", "ns", "a")]
    assert await remote.get("Agent", "ns", "missing") is None
    assert [o["metadata"]["name"] for o in await remote.list("Agent", "ns")] == ["a"]
    here = Destination("api.example.com", 443)
    assert await remote.credential("ns", "s", "k", here) == Release("v")
    assert await remote.credential("ns", "s", "k", None) == Release("v", "a warning", "host")
    assert await remote.credential("ns", "s", "other", here) == Release(None)
    with pytest.raises(CredentialRefused, match=r"evil\.example:443"):
        await remote.credential("ns", "s", "k", Destination("evil.example", 443))
    with pytest.raises(StoreError, match="cache not synced"):
        await remote.get("Broken", "ns", "a")


def test_decode_refuses_a_message_without_type() -> None:
    with pytest.raises(ValueError):
        protocol.decode(b'{"id": 1}')
