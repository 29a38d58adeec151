"""Sealed checkpoints: AES-256-GCM with a keyring only the operator holds (docs/security.md).

A sealed checkpoint is `header || ciphertext`, the header being `MAGIC`, the key id (8 bytes),
the checkpoint's sequence number (8 bytes, big-endian) and the nonce (12 bytes). The associated
data is the header and the Task's namespace, name and uid, so a ciphertext moved to another
Task, or with its sequence number changed, does not verify. The sequence number is what the
operator anchors in the Task's status (`status.checkpointSequence`), which the chart's user
roles cannot patch: a restored older ciphertext of the same Task is refused (checkpoint.py).

The keyring file (`--checkpoint-key-file`, the chart mounts it from a Secret in the release
namespace) holds one base64-encoded 32-byte key per line; `#` starts a comment. The first key
seals; every key opens, so a rotation prepends a new key and drops the old one once no Task
that ran before the rotation is still running. A process without a key file seals with an
ephemeral key of its own (`ephemeral()`): what it writes, no other process can open.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ...errors import OrdoError
from ...reasons import Reason

MAGIC = b"ordo-ckpt\x01"
KEY_BYTES = 32
KEY_ID_BYTES = 8
NONCE_BYTES = 12
_HEADER = struct.Struct(f">{len(MAGIC)}s{KEY_ID_BYTES}sQ{NONCE_BYTES}s")
HEADER_BYTES = _HEADER.size


class CheckpointUntrusted(OrdoError):
    """A checkpoint does not verify (tampered, truncated, sealed for another Task, older than
    the Task's status records) or is not sealed at all (written before the upgrade): nothing
    in it is used. The message names the cause, never the content."""

    default_reason: ClassVar[Reason] = "CheckpointUntrusted"


class KeyFileError(ValueError):
    """The keyring file cannot be used; the message names the file and what to fix."""


def key_id(key: bytes) -> bytes:
    return hashlib.sha256(b"ordo-checkpoint-key-id\x00" + key).digest()[:KEY_ID_BYTES]


@dataclass(frozen=True)
class Subject:
    """The Task a checkpoint belongs to, and the content hash of what it runs (the
    checkpoint's `ordo.dev/snapshot-hash` annotation, which decides whether it may resume):
    all bound into the associated data."""

    namespace: str
    name: str
    uid: str
    snapshot: str = ""

    def aad(self, header: bytes) -> bytes:
        parts = [self.namespace, self.name, self.uid, self.snapshot]
        return b"\x00".join([header, *(p.encode() for p in parts)])


class Keyring:
    """The keys that open checkpoints; the first one seals."""

    def __init__(self, keys: list[bytes], *, ephemeral: bool = False) -> None:
        if not keys or any(len(k) != KEY_BYTES for k in keys):
            raise KeyFileError(f"a keyring needs at least one key of {KEY_BYTES} bytes")
        self._keys = {key_id(k): k for k in keys}
        self._sealing = key_id(keys[0])
        self.ephemeral = ephemeral
        """The process made up its key: checkpoints of other processes cannot be opened."""

    def seal(self, plaintext: bytes, subject: Subject, sequence: int) -> bytes:
        header = _HEADER.pack(MAGIC, self._sealing, sequence, os.urandom(NONCE_BYTES))
        key = AESGCM(self._keys[self._sealing])
        return header + key.encrypt(header[-NONCE_BYTES:], plaintext, subject.aad(header))

    def open(self, blob: bytes, subject: Subject) -> tuple[int, bytes]:
        """The sequence number and plaintext of `blob`. Raises `CheckpointUntrusted`."""
        if len(blob) < HEADER_BYTES + 16 or not blob.startswith(MAGIC):
            raise CheckpointUntrusted("the checkpoint is not sealed, or is truncated")
        header = blob[:HEADER_BYTES]
        _, kid, sequence, nonce = _HEADER.unpack(header)
        key = self._keys.get(kid)
        if key is None and self.ephemeral:
            # Expected after a restart without a key file, or in a replacement Job pod: not a
            # forgery, but the run cannot resume safely (as with a lost checkpoint).
            raise CheckpointUntrusted(
                f"the checkpoint is sealed with key {kid.hex()}; this process has only a key "
                "of its own (no --checkpoint-key-file, or a Job-mode pod), so it cannot resume "
                "what another process wrote",
                reason="Interrupted",
            )
        if key is None:
            raise CheckpointUntrusted(
                f"the checkpoint is sealed with key {kid.hex()}, which is not in this "
                "operator's keyring (was a key removed too early, or the key Secret replaced?)"
            )
        try:
            return sequence, AESGCM(key).decrypt(nonce, blob[HEADER_BYTES:], subject.aad(header))
        except InvalidTag:
            raise CheckpointUntrusted(
                "the checkpoint does not verify: it was changed, truncated or copied from "
                "another Task"
            ) from None


def parse(text: str, source: str) -> Keyring:
    """The keyring in `text` (see the module docstring); `source` names it in errors."""
    keys: list[bytes] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            key = base64.b64decode(line, validate=True)
        except binascii.Error:
            raise KeyFileError(f"{source}, line {number}: not base64") from None
        if len(key) != KEY_BYTES:
            raise KeyFileError(
                f"{source}, line {number}: a key must be {KEY_BYTES} bytes, this one has "
                f"{len(key)} (make one with `head -c 32 /dev/urandom | base64`)"
            )
        keys.append(key)
    if not keys:
        raise KeyFileError(f"{source}: no key (one base64-encoded 32-byte key per line)")
    return Keyring(keys)


def load(path: str | Path) -> Keyring:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise KeyFileError(f"checkpoint key file {path}: {exc.strerror}") from None
    return parse(text, f"checkpoint key file {path}")


def ephemeral() -> Keyring:
    return Keyring([os.urandom(KEY_BYTES)], ephemeral=True)


def export(keyring: Keyring) -> list[str]:
    """The keys, sealing key first, base64: how the control process hands its keyring to its
    worker processes (over their stdin pipe, never a file or an argument)."""
    ordered = [keyring._keys[keyring._sealing]]
    ordered += [k for kid, k in keyring._keys.items() if kid != keyring._sealing]
    return [base64.b64encode(k).decode() for k in ordered]


def restore(keys: list[str], *, ephemeral: bool) -> Keyring:
    return Keyring([base64.b64decode(k) for k in keys], ephemeral=ephemeral)


_current: Keyring | None = None


def install(keyring: Keyring) -> None:
    """Make `keyring` the one this process seals and opens checkpoints with."""
    global _current
    _current = keyring


def current() -> Keyring:
    """The process's keyring: the installed one, else an ephemeral one made on first use."""
    global _current
    if _current is None:
        _current = ephemeral()
    return _current
