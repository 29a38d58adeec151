"""Delivery signatures of the two TaskWebhook profiles (docs/triggers.md#webhooks).

- HMAC (Stripe-style): header `Ordo-Signature: t=<unix seconds>,v1=<hex>` where `<hex>` is the
  HMAC-SHA256, keyed with the Secret, of `<t>.<body>`. The timestamp is signed, so a captured
  delivery is refused once it is older (or newer) than the tolerance. Several `v1=` entries
  may be sent (a sender rotating its secret); one matching is enough.
- GitHub: header `X-Hub-Signature-256: sha256=<hex>`, the HMAC-SHA256 of the body. GitHub
  signs no timestamp: its replay protection is the dedupe on `X-GitHub-Delivery`.

`verify_*` return the signature that matched (the delivery's key when no dedupe header is
configured) or None; every comparison is constant-time, and a failure says nothing about
why (the caller answers 401 with no detail).
"""

from __future__ import annotations

import hashlib
import hmac

MAX_HEADER = 1024
"""A longer signature header is refused unparsed."""
_HEX_LEN = 64


def _mac(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign_hmac(secret: str, timestamp: int, body: bytes) -> str:
    """The HMAC profile's header value for `body` sent at `timestamp` (unix seconds)."""
    return f"t={timestamp},v1={_mac(secret, str(timestamp).encode() + b'.' + body)}"


def sign_github(secret: str, body: bytes) -> str:
    """The GitHub profile's `X-Hub-Signature-256` value for `body`."""
    return "sha256=" + _mac(secret, body)


def _hmac_parts(header: str) -> tuple[int, list[str]] | None:
    timestamp: int | None = None
    signatures: list[str] = []
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        if key == "t" and value.isascii() and value.isdigit() and len(value) <= 12:
            timestamp = int(value)
        elif key == "v1" and len(value) == _HEX_LEN:
            signatures.append(value.lower())
    if timestamp is None or not signatures:
        return None
    return timestamp, signatures


def verify_hmac(
    header: str | None, secret: str, body: bytes, now: float, tolerance: float
) -> str | None:
    """The matching `v1` signature of an HMAC-profile delivery whose timestamp is within
    `tolerance` seconds of `now`, else None."""
    if not header or len(header) > MAX_HEADER:
        return None
    parts = _hmac_parts(header)
    if parts is None:
        return None
    timestamp, signatures = parts
    if abs(now - timestamp) > tolerance:
        return None
    expected = _mac(secret, str(timestamp).encode() + b"." + body)
    matched = None
    for signature in signatures:  # compare them all: the time taken says nothing
        if hmac.compare_digest(signature.encode(), expected.encode()):
            matched = signature
    return matched


def verify_github(header: str | None, secret: str, body: bytes) -> str | None:
    """The signature of a GitHub-profile delivery when it matches, else None."""
    if not header or len(header) > MAX_HEADER:
        return None
    scheme, _, signature = header.strip().partition("=")
    if scheme != "sha256" or len(signature) != _HEX_LEN:
        return None
    expected = _mac(secret, body)
    signature = signature.lower()
    return signature if hmac.compare_digest(signature.encode(), expected.encode()) else None
