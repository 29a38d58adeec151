"""The SSRF guard sees an IPv4 address through every IPv6 form that embeds it (issue 23).

Table-driven: each IPv4 address is written in every form a resolver could answer with, and
the guard's verdict is checked against the rule in `netguard`'s docstring:
- IPv4-mapped (`::ffff:a.b.c.d`) is that IPv4 address on a dual-stack socket: the same verdict
  as the address itself (link-local and metadata refused, loopback and private allowed);
- the translated forms (NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4 `2002::/16`,
  IPv4-compatible `::a.b.c.d`, IPv4-translated `::ffff:0:a.b.c.d`, Teredo `2001::/32`) reach
  the IPv4 address through a translator or relay, in that translator's network: refused unless
  the embedded address is a public one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import pytest

from ordo.tools import netguard

V4 = ipaddress.IPv4Address


def nat64(v4: V4) -> str:
    return str(ipaddress.IPv6Address((0x64FF9B << 96) | int(v4)))


def nat64_local(v4: V4) -> str:
    # The local-use prefix 64:ff9b:1::/48 (RFC 8215), with the /96 layout DNS64 uses.
    return str(ipaddress.IPv6Address((0x0064FF9B0001 << 80) | int(v4)))


def sixtofour(v4: V4) -> str:
    return str(ipaddress.IPv6Address((0x2002 << 112) | (int(v4) << 80) | 1))


def compatible(v4: V4) -> str:
    return f"::{v4}"


def translated(v4: V4) -> str:
    return f"::ffff:0:{v4}"


def teredo_server(v4: V4) -> str:
    # 2001:0:<server>:<flags>:<port ^ ffff>:<client ^ ffffffff>, with a public client.
    client = int(V4("9.9.9.9")) ^ 0xFFFFFFFF
    return str(
        ipaddress.IPv6Address((0x20010000 << 96) | (int(v4) << 64) | (0xFFFF << 32) | client)
    )


def teredo_client(v4: V4) -> str:
    server = int(V4("8.8.8.8"))
    return str(
        ipaddress.IPv6Address(
            (0x20010000 << 96) | (server << 64) | (0xFFFF << 32) | (int(v4) ^ 0xFFFFFFFF)
        )
    )


def mapped(v4: V4) -> str:
    return f"::ffff:{v4}"


TRANSLATED: dict[str, Callable[[V4], str]] = {
    "NAT64": nat64,
    "NAT64 local-use": nat64_local,
    "6to4": sixtofour,
    "IPv4-compatible": compatible,
    "IPv4-translated": translated,
    "Teredo server": teredo_server,
    "Teredo client": teredo_client,
}

METADATA_OR_LINK_LOCAL = ["169.254.169.254", "169.254.170.2", "169.254.1.1", "100.100.100.200"]
PRIVATE_OR_LOOPBACK = [
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "127.0.0.1",
    "100.64.0.1",
    "0.1.2.3",
]
PUBLIC = ["8.8.8.8", "93.184.216.34", "1.1.1.1"]


def verdict(address: str) -> str | None:
    return netguard.address_problem(ipaddress.ip_address(address))


@pytest.mark.parametrize("form", TRANSLATED)
@pytest.mark.parametrize("v4", METADATA_OR_LINK_LOCAL + PRIVATE_OR_LOOPBACK)
def test_a_translated_form_of_a_non_public_address_is_refused(form: str, v4: str) -> None:
    address = TRANSLATED[form](V4(v4))
    problem = verdict(address)
    assert problem is not None, f"{form} {address} ({v4}) passed the guard"
    assert form.split()[0] in problem


@pytest.mark.parametrize("form", TRANSLATED)
@pytest.mark.parametrize("v4", PUBLIC)
def test_a_translated_form_of_a_public_address_is_allowed(form: str, v4: str) -> None:
    assert verdict(TRANSLATED[form](V4(v4))) is None


@pytest.mark.parametrize("v4", METADATA_OR_LINK_LOCAL)
def test_the_ipv4_mapped_form_of_metadata_is_refused_like_the_address(v4: str) -> None:
    assert verdict(v4) is not None
    assert verdict(mapped(V4(v4))) == verdict(v4)


@pytest.mark.parametrize("v4", PRIVATE_OR_LOOPBACK + PUBLIC)
def test_the_ipv4_mapped_form_of_an_allowed_address_is_allowed_like_it(v4: str) -> None:
    # A dual-stack socket connects to exactly that IPv4 address: in-cluster tools live there.
    assert verdict(v4) is None
    assert verdict(mapped(V4(v4))) is None


@pytest.mark.parametrize(
    "address", ["::1", "::", "fd12::1", "2001:db8::1", "2606:4700::1111", "64:ff9c::a9fe:a9fe"]
)
def test_ipv6_addresses_that_embed_nothing_keep_their_own_verdict(address: str) -> None:
    assert verdict(address) is None


@pytest.mark.parametrize(
    "address",
    ["fe80::1%eth0", "fd00:ec2::254", "fe80::a9fe:a9fe", "64:ff9b::a9fe:a9fe%2"],
)
def test_ipv6_link_local_and_metadata_are_refused(address: str) -> None:
    assert verdict(address) is not None


async def test_the_check_refuses_a_translated_form_written_as_a_literal() -> None:
    with pytest.raises(netguard.BlockedDestination, match="NAT64"):
        await netguard.check("[64:ff9b::a9fe:a9fe]", 80)
    with pytest.raises(netguard.BlockedDestination, match="6to4"):
        await netguard.check(sixtofour(V4("10.0.0.1")), 80)
