"""What a checkpoint ConfigMap holds: the run's state as gzip-compressed JSON, sealed
(sealing.py) under `binaryData[state.sealed]`; and how it is read back, verified first.

Checkpoints of earlier versions (unsealed: gzip under `binaryData[state.json.gz]`, JSON under
`data[state.json]`) are never used: anyone who could edit ConfigMaps could have written them.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import gzip
import json
import zlib
from typing import Any

from ...engine.state import RunState
from ...errors import Interrupted
from . import sealing
from .sealing import CheckpointUntrusted, Keyring, Subject

MAX_STATE_BYTES = 64 * 1024 * 1024
"""Largest uncompressed checkpoint this process will inflate."""
SNAPSHOT_ANNOTATION = "ordo.dev/snapshot-hash"
"""The content hash of the resolved objects the run used: authenticated with the state."""
KEY = "state.sealed"
LEGACY_KEYS = ("state.json.gz", "state.json")
"""Unsealed checkpoints of earlier versions (gzip in `binaryData`, JSON in `data`): never
used, the Task ends `CheckpointUntrusted`."""


class CheckpointUnreadable(Interrupted):
    """A checkpoint exists but cannot be decoded: the run cannot resume safely."""


def encode(state: RunState) -> bytes:
    """The gzip-compressed JSON of `state` (deterministic: no timestamp in the header)."""
    raw = json.dumps(state.to_dict(), separators=(",", ":")).encode()
    return gzip.compress(raw, compresslevel=6, mtime=0)


def subject_of(task: dict[str, Any]) -> Subject:
    meta = task["metadata"]
    return Subject(meta.get("namespace", "default"), meta["name"], meta["uid"])


def decode(
    body: dict[str, Any], subject: Subject, keyring: Keyring | None = None
) -> tuple[int, RunState] | None:
    """The sequence number and state of a checkpoint ConfigMap, None if it holds none (a
    takeover marker). Raises `CheckpointUntrusted` if it is unsealed (an earlier version's)
    or does not verify for `subject`, `CheckpointUnreadable` if it verifies but cannot be
    decoded."""
    binary = (body.get("binaryData") or {}).get(KEY)
    if binary is None:
        held = {**(body.get("data") or {}), **(body.get("binaryData") or {})}
        if any(key in held for key in LEGACY_KEYS):
            raise CheckpointUntrusted(
                "the checkpoint was written unsealed (before the operator sealed checkpoints): "
                "it is not used, as it could have been changed"
            )
        return None
    try:
        blob = base64.b64decode(binary, validate=True)
    except binascii.Error:
        raise CheckpointUntrusted("the checkpoint is not valid base64") from None
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    bound = dataclasses.replace(subject, snapshot=annotations.get(SNAPSHOT_ANNOTATION, ""))
    sequence, payload = (keyring or sealing.current()).open(blob, bound)
    try:
        inflater = zlib.decompressobj(wbits=31)  # gzip, bounded (no zip bomb)
        raw = inflater.decompress(payload, MAX_STATE_BYTES)
        if inflater.unconsumed_tail:
            raise CheckpointUnreadable(f"checkpoint inflates to more than {MAX_STATE_BYTES} bytes")
        return sequence, RunState.from_dict(json.loads(raw))
    except CheckpointUnreadable:
        raise
    except (zlib.error, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointUnreadable(f"checkpoint cannot be decoded ({type(exc).__name__})") from None
