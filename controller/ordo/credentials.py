"""The one choke point between a Secret and the network (issue 26, docs/security.md "Secrets").

A Secret is a credential ordo may use only when its owner opted in: the label
`ordo.dev/credential: "true"`. With the annotation `ordo.dev/allowed-hosts` it may only go to
the hosts listed there; without it, to any host. Stores never hand out a Secret value: they
call `release` with the destination the value is for (`Destination`, the host and effective
port of the URL it will be sent to), and get the value only when the Secret allows that
destination. Under the `Enforce` policy an unlabelled Secret reads exactly like a missing one
(no key listing, no "exists" answer) and a host the Secret does not allow raises
`CredentialRefused` before anything is sent; under `Warn` (migration) both are returned with
a warning and sent.

Allowed-hosts entries, comma-separated: `host`, `host:port`, `*.suffix` or `*.suffix:port`,
`[v6]` / `[v6]:port` (a bare IPv6 literal without brackets is read as an address, no port).
- Host names compare case-insensitively, without a trailing dot, in their IDNA (punycode)
  form: `Bücher.example` and `xn--bcher-kva.example` are the same host.
- `*.example.com` matches exactly one more label (`a.example.com`, not `a.b.example.com` and
  not `example.com`), as a TLS certificate wildcard does; the suffix needs two labels
  (`*.com` is refused). A wildcard never matches an IP address.
- IP literals compare as addresses (`[::1]` is `[0:0::1]`).
- Without a port an entry allows every port of that host; with one, only the URL's effective
  port (its explicit port, else the scheme's default: http 80, https 443, redis 6379,
  postgres 5432).
- An entry that does not parse allows nothing (fail closed); so does an empty annotation.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

CREDENTIAL_LABEL = "ordo.dev/credential"
"""The label (value "true") by which a Secret's owner lets ordo use it."""
ALLOWED_HOSTS_ANNOTATION = "ordo.dev/allowed-hosts"
"""The annotation listing where ordo may send the Secret's values."""

Policy = Literal["Enforce", "Warn"]
POLICIES: tuple[Policy, ...] = ("Enforce", "Warn")

Violation = Literal["unlabelled", "host"]
"""What a Warn-mode warning is about (the `kind` of `ordo_credential_violations_total`)."""

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "redis": 6379, "rediss": 6379}
DEFAULT_PORTS |= {"postgres": 5432, "postgresql": 5432}
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")
"""Characters a URL given a credential may not contain (parsers disagree on them)."""


class CredentialRefused(Exception):
    """A Secret does not allow the destination it was about to be sent to (Enforce). The
    message names the Secret and host:port, never a value or the Secret's allowed hosts."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Destination:
    """Where a credential is about to be sent: a normalised host and its effective port."""

    host: str
    port: int | None

    def __str__(self) -> str:
        if not self.host:
            return "nowhere"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


NOWHERE = Destination("", None)
"""The destination of a value that is never sent (the mock provider, in-memory Memory)."""


def normal_host(host: str) -> str | None:
    """`host` lower-cased, without brackets or one trailing dot, IP literals in canonical form,
    names in IDNA ASCII form; None when it is not a valid host."""
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    host = host.removesuffix(".")
    try:
        ascii_host = host.encode("idna").decode("ascii").lower()
    except (UnicodeError, ValueError):
        return None
    labels = ascii_host.split(".")
    if not ascii_host or len(ascii_host) > 253 or not all(_LABEL.match(x) for x in labels):
        return None
    return ascii_host


def destination(url: str) -> Destination | None:
    """The destination of `url` (host and effective port), or None when the URL is one a
    credential must not be sent to: no host, characters parsers disagree on, a bad port."""
    if _UNSAFE.search(url) or url.count("@") > 1:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = normal_host(parts.hostname or "")
    if host is None:
        return None
    return Destination(host, port if port is not None else DEFAULT_PORTS.get(parts.scheme.lower()))


@dataclass(frozen=True, slots=True)
class HostPattern:
    host: str
    """Normalised host; for a wildcard, the suffix after `*.`."""
    wildcard: bool
    port: int | None

    def matches(self, dest: Destination) -> bool:
        if self.port is not None and dest.port != self.port:
            return False
        if not self.wildcard:
            return dest.host == self.host
        if _is_ip(dest.host):
            return False
        head, dot, rest = dest.host.partition(".")
        return bool(head) and bool(dot) and rest == self.host


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _split_port(entry: str) -> tuple[str, int | None] | None:
    if entry.startswith("["):
        host, _, rest = entry.partition("]")
        host += "]"
        if not rest:
            return host, None
        if not rest.startswith(":"):
            return None
        text = rest[1:]
    elif entry.count(":") > 1:  # a bare IPv6 literal: no port
        return entry, None
    elif ":" in entry:
        host, _, text = entry.partition(":")
    else:
        return entry, None
    if not text.isascii() or not text.isdigit() or not 0 < int(text) < 65536:
        return None
    return host, int(text)


def parse_entry(entry: str) -> HostPattern | None:
    """One allowed-hosts entry, or None when it does not parse (see the module docstring)."""
    split = _split_port(entry.strip())
    if split is None:
        return None
    host, port = split
    wildcard = host.startswith("*.")
    name = normal_host(host[2:] if wildcard else host)
    if name is None or "*" in name:
        return None
    if wildcard and (_is_ip(name) or "." not in name):
        return None
    return HostPattern(name, wildcard, port)


def parse_allowed_hosts(text: str) -> tuple[tuple[HostPattern, ...], list[str]]:
    """The patterns of an annotation value, and the entries that did not parse."""
    patterns: list[HostPattern] = []
    bad: list[str] = []
    for entry in text.split(","):
        if not entry.strip():
            continue
        pattern = parse_entry(entry)
        if pattern is None:
            bad.append(entry.strip())
        else:
            patterns.append(pattern)
    return tuple(patterns), bad


def host_allowed(text: str, dest: Destination) -> bool:
    """Whether the annotation value `text` allows `dest`."""
    patterns, _ = parse_allowed_hosts(text)
    return any(p.matches(dest) for p in patterns)


# -- the choke point -------------------------------------------------------------------------


def opted_in(body: Mapping[str, Any]) -> bool:
    labels = (body.get("metadata") or {}).get("labels") or {}
    return str(labels.get(CREDENTIAL_LABEL, "")).lower() == "true"


def allowed_hosts(body: Mapping[str, Any]) -> str | None:
    """The Secret's allowed-hosts annotation, or None when it has none (any host)."""
    value = ((body.get("metadata") or {}).get("annotations") or {}).get(ALLOWED_HOSTS_ANNOTATION)
    return None if value is None else str(value)


def _values(body: Mapping[str, Any]) -> dict[str, str]:
    values: dict[str, str] = {}
    for key, encoded in (body.get("data") or {}).items():
        try:
            values[str(key)] = base64.b64decode(str(encoded), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            continue  # not text: not a credential ordo can send
    for key, text in (body.get("stringData") or {}).items():
        values[str(key)] = str(text)
    return values


@dataclass(frozen=True, slots=True)
class Release:
    """What `release` hands out: the value (None: no such Secret or key, or, enforced, a
    Secret not opted in: the same answer) and, under Warn, why Enforce would refuse."""

    value: str | None
    warning: str | None = None
    violation: Violation | None = None


def release(
    body: Mapping[str, Any] | None,
    name: str,
    key: str,
    dest: Destination | None,
    policy: Policy,
) -> Release:
    """The value of key `key` of Secret `name` (its object `body`, None when it does not
    exist) for sending to `dest` (NOWHERE: never sent; None: a URL `destination` could not
    read, which no Secret allows), under `policy`. Raises CredentialRefused (Enforce) when the
    Secret does not allow `dest`."""
    if body is None:
        return Release(None)
    warning: str | None = None
    violation: Violation | None = None
    if not opted_in(body):
        if policy == "Enforce":
            return Release(None)
        warning = f"Secret {name!r} is not labelled {CREDENTIAL_LABEL}=true"
        violation = "unlabelled"
    value = _values(body).get(key)
    if value is None:
        return Release(None, warning, violation)
    hosts = allowed_hosts(body)
    refusal = None
    if dest is None:
        refusal = f"Secret {name!r} may not be sent to a URL that names no plain host"
    elif dest != NOWHERE and hosts is not None and not host_allowed(hosts, dest):
        refusal = (
            f"Secret {name!r} may not be sent to {dest}: its {ALLOWED_HOSTS_ANNOTATION} "
            "annotation does not list that host"
        )
    if refusal is not None:
        if policy == "Enforce":
            raise CredentialRefused(refusal)
        warning, violation = refusal if warning is None else f"{warning}; {refusal}", "host"
    return Release(value, warning, violation)


def visible_keys(body: Mapping[str, Any] | None, policy: Policy) -> list[str] | None:
    """The key names (never values) a message may list: None for a missing Secret and, under
    Enforce, for one not opted in (it must read like a missing one)."""
    if body is None or (policy == "Enforce" and not opted_in(body)):
        return None
    return sorted(_values(body))
