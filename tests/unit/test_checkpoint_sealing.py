"""Sealed checkpoints (issue 26 part 2): AES-256-GCM bound to the Task, a keyring with key ids
for rotation, the anchor in the Task's status against a restored older copy, and the upgrade
path (an unsealed checkpoint of an earlier version is never used)."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

import httpx
import kopf
import pytest

from ordo.engine.state import RunState
from ordo.engine.transcript import AssistantMessage, UserMessage
from ordo.operator.kube.client import KubeClient
from ordo.operator.main import install_checkpoint_key
from ordo.operator.tasks import sealing
from ordo.operator.tasks.checkpoint import KEY, CheckpointStore, decode, encode
from ordo.operator.tasks.sealing import (
    HEADER_BYTES,
    CheckpointUntrusted,
    KeyFileError,
    Keyring,
    Subject,
)
from ordo.operator.workers.children import WorkerSettings, config_message

CANARY = "canary-7f3a-transcript"
TASK = Subject("team-a", "deploy", "uid-1")


def key(n: int) -> bytes:
    return bytes([n]) * 32


def state(step: int = 1) -> RunState:
    return RunState(items=[UserMessage(CANARY), AssistantMessage(CANARY)], step=step)


def body_of(blob: bytes) -> dict[str, Any]:
    return {"binaryData": {KEY: base64.b64encode(blob).decode()}}


def test_sealed_checkpoint_round_trips_and_hides_the_transcript() -> None:
    ring = Keyring([key(1)])
    blob = ring.seal(encode(state()), TASK, 3)
    assert CANARY.encode() in gzip.decompress(encode(state()))  # the plaintext holds it
    assert CANARY.encode() not in blob
    assert ring.open(blob, TASK)[1] == encode(state())
    loaded = decode(body_of(blob), TASK, ring)
    assert loaded is not None and loaded[0] == 3 and loaded[1].to_dict() == state().to_dict()


@pytest.mark.parametrize("position", [0, 12, HEADER_BYTES - 1, HEADER_BYTES, -1])
def test_a_changed_byte_anywhere_is_refused(position: int) -> None:
    ring = Keyring([key(1)])
    blob = bytearray(ring.seal(encode(state()), TASK, 1))
    blob[position] ^= 0x01
    with pytest.raises(CheckpointUntrusted) as refused:
        decode(body_of(bytes(blob)), TASK, ring)
    assert refused.value.reason == "CheckpointUntrusted" and CANARY not in str(refused.value)


def test_a_changed_sequence_number_is_refused() -> None:
    ring = Keyring([key(1)])
    blob = bytearray(ring.seal(encode(state()), TASK, 1))
    blob[HEADER_BYTES - 12 - 1] = 9  # the low byte of the sequence, before the nonce
    with pytest.raises(CheckpointUntrusted, match="does not verify"):
        decode(body_of(bytes(blob)), TASK, ring)


@pytest.mark.parametrize(
    "other",
    [
        Subject("team-b", "deploy", "uid-1"),
        Subject("team-a", "other", "uid-1"),
        Subject("team-a", "deploy", "uid-2"),
    ],
    ids=["namespace", "name", "uid"],
)
def test_a_ciphertext_moved_to_another_task_is_refused(other: Subject) -> None:
    ring = Keyring([key(1)])
    blob = ring.seal(encode(state()), TASK, 1)
    with pytest.raises(CheckpointUntrusted, match="another Task"):
        decode(body_of(blob), other, ring)


@pytest.mark.parametrize("keep", [0, 5, HEADER_BYTES, HEADER_BYTES + 15])
def test_a_truncated_checkpoint_is_refused(keep: int) -> None:
    ring = Keyring([key(1)])
    blob = ring.seal(encode(state()), TASK, 1)
    with pytest.raises(CheckpointUntrusted):
        decode(body_of(blob[:keep]), TASK, ring)


def test_a_wrong_key_is_refused_and_named_by_id_only() -> None:
    blob = Keyring([key(1)]).seal(encode(state()), TASK, 1)
    with pytest.raises(CheckpointUntrusted) as refused:
        decode(body_of(blob), TASK, Keyring([key(2)]))
    assert sealing.key_id(key(1)).hex() in str(refused.value)
    assert refused.value.reason == "CheckpointUntrusted"
    # A process with only a key of its own (no key file, a Job pod) ends it Interrupted.
    with pytest.raises(CheckpointUntrusted) as own:
        decode(body_of(blob), TASK, Keyring([key(2)], ephemeral=True))
    assert own.value.reason == "Interrupted"


def test_key_rotation_opens_old_checkpoints_and_seals_with_the_new_key() -> None:
    old = Keyring([key(1)])
    rotated = Keyring([key(2), key(1)])
    before = old.seal(encode(state()), TASK, 1)
    assert decode(body_of(before), TASK, rotated) is not None
    after = rotated.seal(encode(state()), TASK, 2)
    assert after[len(sealing.MAGIC) : len(sealing.MAGIC) + 8] == sealing.key_id(key(2))
    assert decode(body_of(after), TASK, Keyring([key(2)])) is not None
    with pytest.raises(CheckpointUntrusted):
        decode(body_of(after), TASK, old)
    assert (
        sealing.restore(sealing.export(rotated), ephemeral=False)
        .seal(b"x", TASK, 1)
        .startswith(sealing.MAGIC + sealing.key_id(key(2)))
    )


def test_unsealed_checkpoints_of_earlier_versions_are_refused() -> None:
    plain = encode(state())
    for legacy in (
        {"binaryData": {"state.json.gz": base64.b64encode(plain).decode()}},
        {"data": {"state.json": json.dumps(state().to_dict())}},
        body_of(plain),  # gzip where a sealed checkpoint belongs
    ):
        with pytest.raises(CheckpointUntrusted) as refused:
            decode(legacy, TASK, Keyring([key(1)]))
        assert refused.value.reason == "CheckpointUntrusted"


def test_key_file_format(tmp_path: Path) -> None:
    path = tmp_path / "keyring"
    k1, k2 = base64.b64encode(key(1)).decode(), base64.b64encode(key(2)).decode()
    path.write_text(f"# rotated 2026-12\n{k2}\n\n{k1}  # the old one\n")
    ring = sealing.load(path)
    assert ring.seal(b"x", TASK, 1).startswith(sealing.MAGIC + sealing.key_id(key(2)))
    assert not ring.ephemeral
    for text, problem in [
        ("", "no key"),
        ("not base64!\n", "line 1: not base64"),
        (base64.b64encode(b"short").decode(), "must be 32 bytes, this one has 5"),
    ]:
        path.write_text(text)
        with pytest.raises(KeyFileError, match=problem):
            sealing.load(path)
    with pytest.raises(KeyFileError, match="missing"):
        sealing.load(tmp_path / "missing")


# -- the store: anchors in the Task's status -------------------------------------------------


class Api:
    """An in-process API server for one checkpoint ConfigMap and the Task's status."""

    def __init__(self, configmap: dict[str, Any] | None) -> None:
        self.configmap = configmap
        self.status_patches: list[list[dict[str, Any]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/status"):
            self.status_patches.append(json.loads(request.content))
            return httpx.Response(200, json={"metadata": {"name": "deploy"}})
        if request.method == "GET":
            if self.configmap is None:
                return httpx.Response(
                    404, json={"kind": "Status", "code": 404, "reason": "NotFound"}
                )
            return httpx.Response(200, json=self.configmap)
        if request.method == "POST":
            self.configmap = json.loads(request.content)
            self.configmap["metadata"]["resourceVersion"] = "1"
            return httpx.Response(201, json=self.configmap)
        assert request.method == "PATCH" and self.configmap is not None
        for op in json.loads(request.content):
            if op["path"] == "/binaryData":
                self.configmap["binaryData"] = op["value"]
        return httpx.Response(200, json=self.configmap)


def task(**status: Any) -> dict[str, Any]:
    meta = {"namespace": TASK.namespace, "name": TASK.name, "uid": TASK.uid}
    return {
        "apiVersion": "ordo.dev/v1alpha1",
        "kind": "Task",
        "metadata": meta,
        "status": {"executionId": "e2", **status},
    }


def configmap(blob: bytes | None) -> dict[str, Any]:
    meta = {
        "name": "ordo-checkpoint-uid-1",
        "namespace": TASK.namespace,
        "resourceVersion": "7",
        "annotations": {"ordo.dev/execution-id": "e2"},
        "labels": {"ordo.dev/checkpoint-uid": TASK.uid},
    }
    return {"metadata": meta, **(body_of(blob) if blob is not None else {})}


def store(api: Api, body: dict[str, Any], ring: Keyring) -> CheckpointStore:
    client = KubeClient(
        kopf.ConnectionInfo(server="https://kube.invalid"),
        wrap_transport=lambda _real: httpx.MockTransport(api),
        backoff=0.001,
    )
    return CheckpointStore(client, body, "e2", keyring=ring)


async def test_an_anchored_save_records_its_sequence_in_the_status() -> None:
    ring = Keyring([key(1)])
    api = Api(None)
    checkpoints = store(api, task(), ring)
    await checkpoints.save(state())
    await checkpoints.save(state(), anchor=True)
    assert checkpoints.sequence == 2 and checkpoints.anchored == 2
    assert api.status_patches == [
        [
            {"op": "test", "path": "/status/executionId", "value": "e2"},
            {"op": "add", "path": "/status/checkpointSequence", "value": 2},
        ]
    ]
    assert api.configmap is not None
    blob = base64.b64decode(api.configmap["binaryData"][KEY])
    assert CANARY.encode() not in blob and ring.open(blob, TASK)[0] == 2


async def test_a_restored_older_copy_is_refused() -> None:
    ring = Keyring([key(1)])
    older = ring.seal(encode(state(step=2)), TASK, 4)
    with pytest.raises(CheckpointUntrusted, match="earlier copy was restored"):
        await store(Api(configmap(older)), task(checkpointSequence=5), ring).load()
    with pytest.raises(CheckpointUntrusted, match="step 2"):
        await store(Api(configmap(older)), task(checkpointSequence=4, step=3), ring).load()
    loaded = await store(Api(configmap(older)), task(checkpointSequence=4, step=2), ring).load()
    assert loaded is not None and loaded[0].step == 2


async def test_a_deleted_checkpoint_is_refused_once_one_was_anchored() -> None:
    ring = Keyring([key(1)])
    with pytest.raises(CheckpointUntrusted, match="is gone"):
        await store(Api(None), task(checkpointSequence=1), ring).load()
    with pytest.raises(CheckpointUntrusted, match="is gone"):
        await store(Api(configmap(None)), task(checkpointSequence=1), ring).load()
    assert await store(Api(None), task(), ring).load() is None  # nothing ran: a fresh start


async def test_resumed_writes_continue_the_sequence() -> None:
    ring = Keyring([key(1)])
    api = Api(configmap(ring.seal(encode(state()), TASK, 6)))
    checkpoints = store(api, task(checkpointSequence=6), ring)
    assert await checkpoints.load() is not None
    assert checkpoints.sequence == 6
    await checkpoints.save(state(), anchor=True)
    assert api.status_patches[-1][-1]["value"] == 7


# -- the process keyring: the operator's flag, its worker processes ---------------------------


def test_the_operator_installs_its_key_file_and_hands_it_to_its_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sealing, "_current", None)  # this test's keyring, not the session's
    bad = tmp_path / "bad"
    bad.write_text("not a key\n")
    assert not install_checkpoint_key(str(bad))
    assert f"checkpoint key file {bad}, line 1: not base64" in caplog.text
    assert "not a key" not in caplog.text.replace(f"{bad}", "")
    good = tmp_path / "good"
    good.write_text(base64.b64encode(key(3)).decode() + "\n")
    assert install_checkpoint_key(str(good))
    sealed = sealing.current().seal(b"x", TASK, 1)
    message = config_message(WorkerSettings(), 1.0, 10.0)
    child = sealing.restore(message["checkpointKeys"], ephemeral=message["checkpointKeysEphemeral"])
    assert child.open(sealed, TASK) == (1, b"x") and not child.ephemeral


def test_without_a_key_file_the_process_seals_with_a_key_of_its_own(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sealing, "_current", None)
    assert install_checkpoint_key("")
    assert "no checkpoint keyring" in caplog.text
    assert sealing.current().ephemeral and sealing.current() is sealing.current()
    assert config_message(WorkerSettings(), 1.0, 10.0)["checkpointKeysEphemeral"] is True


def test_the_snapshot_hash_annotation_is_bound_to_the_checkpoint() -> None:
    """The annotation decides whether a run may resume under the objects as they are now: an
    editor who changed the Agent cannot make the run resume by rewriting it."""
    ring = Keyring([key(1)])
    blob = ring.seal(encode(state()), Subject(TASK.namespace, TASK.name, TASK.uid, "v2:aa"), 1)
    body = {**body_of(blob), "metadata": {"annotations": {"ordo.dev/snapshot-hash": "v2:aa"}}}
    assert decode(body, TASK, ring) is not None
    body["metadata"]["annotations"]["ordo.dev/snapshot-hash"] = "v2:bb"
    with pytest.raises(CheckpointUntrusted, match="does not verify"):
        decode(body, TASK, ring)
