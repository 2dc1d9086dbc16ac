"""Which network addresses a source may be fetched from.

The operator fetches a KfDef's sources from inside the cluster, where it can reach what the KfDef's author
usually cannot: loopback (the operator's own ports), link-local addresses (the cloud metadata service at
169.254.169.254 hands out node credentials), private networks, the cluster's service and pod networks. A fetch
that would connect to such an *internal* address is refused unless the operator's admin allows that network
(``KFDEF_ALLOWED_SOURCE_NETWORKS``, e.g. an internal mirror's range). The cluster's own networks, when given
(``KFDEF_CLUSTER_NETWORKS``), are refused even inside an allowed network.

Checks are made on the addresses a name resolves to, and the connection is then made to exactly those
addresses (resolve, check, pin), so a DNS answer that changes between the check and the connection
(DNS rebinding) cannot lead anywhere else. IPv6 addresses that embed an IPv4 address (IPv4-mapped,
IPv4-compatible, 6to4, NAT64) are judged by the embedded address as well.
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_SHARED = ipaddress.ip_network("100.64.0.0/10")        # carrier-grade NAT (RFC 6598): not global, not "private"
_NAT64 = ipaddress.ip_network("64:ff9b::/96")          # well-known NAT64 prefix (RFC 6052)
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")        # deprecated ::a.b.c.d form

#: Every address: what ``KFDEF_ALLOWED_SOURCE_NETWORKS=any`` stands for (the CLI's policy: the user's own network).
ANY = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))


class AddressRefused(Exception):
    """A connection to an internal address was about to be made; the message says which and why."""


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (IPv4-mapped, IPv4-compatible, 6to4, NAT64), else None."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def internal_reason(address: IPAddress) -> str | None:
    """Why ``address`` is internal (not a public unicast address), or None for a public one."""
    embedded = embedded_ipv4(address)
    if embedded is not None:
        reason = internal_reason(embedded)
        return f"{reason}, as IPv4 {embedded} inside IPv6" if reason else None
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local, where cloud metadata services answer"
    if address.is_multicast:
        return "multicast"
    if address.is_private:
        return "private"
    if address in _SHARED:
        return "shared address space (carrier-grade NAT)"
    if address.is_reserved or not address.is_global:
        return "reserved"
    return None


def parse_networks(text: str, setting: str) -> tuple[IPNetwork, ...]:
    """Networks from a comma or space separated list of CIDRs or addresses; ``any`` means every address.

    Raises ValueError naming ``setting`` for anything else.
    """
    networks: list[IPNetwork] = []
    for item in text.replace(",", " ").split():
        if item.lower() == "any":
            networks += ANY
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{setting}: {item!r} is not a network (CIDR such as 10.20.0.0/16) nor an "
                             "address") from None
    return tuple(networks)


@dataclass(frozen=True)
class NetworkPolicy:
    """Internal addresses are refused unless inside ``allowed``; ``cluster`` networks are always refused."""

    allowed: tuple[IPNetwork, ...] = ()
    cluster: tuple[IPNetwork, ...] = ()

    def refusal(self, address: IPAddress) -> str | None:
        """What ``address`` is, if a connection to it is refused (e.g. "an internal address (loopback)"); None if
        it is allowed."""
        judged = [address] + [e for e in [embedded_ipv4(address)] if e is not None]
        for candidate in judged:
            for network in self.cluster:
                if candidate.version == network.version and candidate in network:
                    return f"in the cluster network {network} (KFDEF_CLUSTER_NETWORKS)"
        reason = internal_reason(address)
        if reason is None or any(c.version == n.version and c in n for c in judged for n in self.allowed):
            return None
        return f"an internal address ({reason})"

    def check(self, host: str, addresses: Iterable[IPAddress]) -> None:
        """Raise :class:`AddressRefused` if any of the addresses ``host`` resolved to is refused.

        All of them are judged, not only the one a connection would use first: a name answering with one public
        and one internal address is refused as a whole.
        """
        for address in addresses:
            refusal = self.refusal(address)
            if refusal:
                subject = f"{host} is" if _is_literal(host, address) else f"{host} resolves to {address},"
                raise AddressRefused(f"{subject} {refusal}; sources are fetched from public addresses only, unless "
                                     "the operator's KFDEF_ALLOWED_SOURCE_NETWORKS allows the network")

    def vet_proxied(self, url: str, port: int) -> None:
        """For a URL a proxy fetches: refuse it if its host resolves here to a refused address. The proxy resolves
        the name again (best effort: the proxy's own rules must guard its network); a name that does not resolve
        here is left to the proxy."""
        try:
            self.resolve(urlsplit(url).hostname or "", port)
        except socket.gaierror:
            pass

    def resolve(self, host: str, port: int) -> list[IPAddress]:
        """The addresses of ``host`` (a name or a literal), checked; raises :class:`AddressRefused` or
        ``socket.gaierror``."""
        addresses: list[IPAddress] = []
        for *_, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])  # drop an IPv6 zone index
            if address not in addresses:
                addresses.append(address)
        self.check(host, addresses)
        return addresses


def _is_literal(host: str, address: IPAddress) -> bool:
    """Whether ``host`` is ``address`` written out (in any of its forms), not a name."""
    try:
        return ipaddress.ip_address(host.strip("[]")) == address
    except ValueError:
        return False


def uses_proxy(url: str) -> bool:
    """Whether the environment's proxy settings (``HTTPS_PROXY``, ``NO_PROXY``...) send ``url`` through a proxy."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    return parts.scheme in proxies and not urllib.request.proxy_bypass(parts.hostname or "")
