"""Secret metadata for test fixtures: every Secret a test gives ordo is opted in
(`ordo.dev/credential: "true"`) and allows only the hosts the test sends it to
(docs/security.md#secrets)."""

from __future__ import annotations

from typing import Any

from ordo.credentials import ALLOWED_HOSTS_ANNOTATION, CREDENTIAL_LABEL, destination

LOOPBACK = "127.0.0.1, localhost, [::1]"
"""Where the tests' recording servers listen (any port)."""


def opted_in(metadata: dict[str, Any], hosts: str = LOOPBACK) -> dict[str, Any]:
    """`metadata` with the credential label and `hosts` as its allowed hosts."""
    return {
        **metadata,
        "labels": {**(metadata.get("labels") or {}), CREDENTIAL_LABEL: "true"},
        "annotations": {**(metadata.get("annotations") or {}), ALLOWED_HOSTS_ANNOTATION: hosts},
    }


def host_of(url: str) -> str:
    """The allowed-hosts entry for exactly `url`'s host and port."""
    dest = destination(url)
    assert dest is not None, url
    return str(dest)
