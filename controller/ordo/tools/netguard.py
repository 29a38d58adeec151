"""The SSRF guard of network tools: no link-local or cloud-metadata destinations.

A tool's URL comes from a Tool object, but the place it reaches is decided by DNS at call
time. Before each request the host name is resolved and EVERY address is checked; one bad
address refuses the call. The tools then connect to the checked addresses themselves (the
`Host` header and TLS server name stay the original host: `http.py`, and `mcp_transport.py`
under the MCP client), so a DNS answer that changes between the check and the connection (DNS
rebinding) cannot slip through.

Refused unless the Tool sets `allowPrivateNetwork: true`:
- link-local networks 169.254.0.0/16 and fe80::/10 (this covers 169.254.169.254, the AWS,
  GCP, Azure, OpenStack and DigitalOcean metadata address, and 169.254.170.2, ECS task
  metadata);
- cloud metadata addresses outside those ranges: fd00:ec2::254 (AWS IMDS over IPv6),
  100.100.100.200 (Alibaba Cloud);
- metadata host names: metadata.google.internal, metadata.goog;
- IPv6 forms that reach an IPv4 address through a translator or relay: NAT64 (64:ff9b::/96,
  and 64:ff9b:1::/48 read with the /96 layout DNS64 uses), 6to4 (2002::/16), Teredo
  (2001::/32: its server and its client), IPv4-compatible (::a.b.c.d) and IPv4-translated
  (::ffff:0:a.b.c.d), unless every IPv4 address they embed is public (`is_global`). The
  translator delivers them in its own network, where a private or loopback address is
  something else than in the operator's (the gateway's own services, its metadata), and these
  forms are never valid for a non-public address (RFC 6052 3.1, RFC 3056 2).
An IPv4-mapped address (::ffff:a.b.c.d) is that IPv4 address on a dual-stack socket and gets
its verdict. Loopback and private ranges (127/8, ::1, 10/8, 172.16/12, 192.168/16, fc00::/7)
stay allowed, also IPv4-mapped: in-cluster tools live there.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

LINK_LOCAL_NETWORKS = (
    ipaddress.ip_network("169.254.0.0/16"),
    ipaddress.ip_network("fe80::/10"),
)
METADATA_ADDRESSES = frozenset(
    {
        ipaddress.ip_address("169.254.169.254"),
        ipaddress.ip_address("fd00:ec2::254"),
        ipaddress.ip_address("100.100.100.200"),
    }
)
METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata.goog"})
NAT64_NETWORKS = (
    ipaddress.ip_network("64:ff9b::/96"),
    ipaddress.ip_network("64:ff9b:1::/48"),
)
IPV4_TRANSLATED_NETWORK = ipaddress.ip_network("::ffff:0:0:0/96")


class BlockedDestination(Exception):
    """The destination is refused; the message names the rule, not the URL."""


@dataclass(frozen=True, slots=True)
class Destination:
    host: str
    """The host name as written in the URL."""
    addresses: tuple[IPAddress, ...]
    """Every address the host resolved to, all checked."""


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[str, tuple[ipaddress.IPv4Address, ...]]:
    """The translated form `address` is written in and the IPv4 addresses it reaches
    (`("", ())` for an address that embeds none). IPv4-mapped is not a translated form."""
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if any(address in network for network in NAT64_NETWORKS):
        return "a NAT64 address", (low32,)
    if address.sixtofour is not None:
        return "a 6to4 address", (address.sixtofour,)
    if address.teredo is not None:
        return "a Teredo address", address.teredo
    if address in IPV4_TRANSLATED_NETWORK:
        return "an IPv4-translated address", (low32,)
    if int(address) >> 32 == 0 and int(address) > 1:  # not :: (unspecified) or ::1 (loopback)
        return "an IPv4-compatible address", (low32,)
    return "", ()


def address_problem(address: IPAddress) -> str | None:
    """Why `address` is refused, or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id:
        address = ipaddress.IPv6Address(str(address).split("%")[0])
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        else:
            form, embedded = embedded_ipv4(address)
            for v4 in embedded:
                problem = address_problem(v4) or (None if v4.is_global else "a non-public address")
                if problem:
                    return f"{form} embedding {problem}"
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if any(address in network for network in LINK_LOCAL_NETWORKS):
        return "a link-local address"
    return None


async def resolve(host: str, port: int) -> tuple[IPAddress, ...]:
    """Every address `host` resolves to (an IP literal resolves to itself)."""
    literal = host.strip("[]")
    try:
        return (ipaddress.ip_address(literal.split("%")[0]),)
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(literal, port, type=socket.SOCK_STREAM)
    seen: dict[str, IPAddress] = {}
    for _family, _type, _proto, _name, sockaddr in infos:
        text = str(sockaddr[0]).split("%")[0]
        seen.setdefault(text, ipaddress.ip_address(text))
    return tuple(seen.values())


async def check(host: str, port: int, *, allow_private_network: bool = False) -> Destination:
    """Resolve `host` and check every address. Raises BlockedDestination, or OSError when
    the name does not resolve."""
    name = host.strip("[]").rstrip(".").lower()
    if not allow_private_network and name in METADATA_HOSTS:
        raise BlockedDestination(
            "the destination is a cloud metadata host (set allowPrivateNetwork to allow it)"
        )
    addresses = await resolve(name, port)
    if not addresses:
        raise OSError("the host name did not resolve to any address")
    if not allow_private_network:
        for address in addresses:
            problem = address_problem(address)
            if problem:
                raise BlockedDestination(
                    f"the destination resolves to {problem} (set allowPrivateNetwork to allow it)"
                )
    return Destination(name, addresses)
