"""Which addresses a source may be fetched from: classification, the policy's settings, name resolution."""

from __future__ import annotations

import ipaddress
import re

import pytest

from kfdef_operator.source.network import AddressRefused, NetworkPolicy, internal_reason, parse_networks


@pytest.mark.parametrize("address, reason", [
    ("8.8.8.8", None), ("2606:4700:4700::1111", None), ("::ffff:8.8.8.8", None), ("64:ff9b::808:808", None),
    ("127.0.0.1", "loopback"), ("127.9.9.9", "loopback"), ("::1", "loopback"),
    ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
    ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("192.168.1.1", "private"), ("fd00:ec2::254", "private"),
    ("100.64.0.1", "shared address space"), ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("224.0.0.1", "multicast"), ("ff02::1", "multicast"), ("192.0.2.1", "private"),
    # IPv6 forms carrying an internal IPv4 address: mapped, compatible, 6to4, NAT64
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "link-local"), ("::127.0.0.1", "loopback"),
    ("2002:a9fe:a9fe::", "link-local"), ("64:ff9b::a9fe:a9fe", "link-local"),
])
def test_internal_addresses_are_classified(address, reason):
    found = internal_reason(ipaddress.ip_address(address))
    if reason is None:
        assert found is None, f"{address} is public, not {found}"
    else:
        assert found is not None and found.startswith(reason), f"{address}: {found!r}, expected {reason!r}"


def test_allowed_networks_open_internal_addresses_but_never_the_cluster_networks():
    policy = NetworkPolicy(allowed=parse_networks("127.0.0.0/8, 10.0.0.0/8", "A"),
                           cluster=parse_networks("10.96.0.0/12 100.200.0.0/16", "C"))
    allowed = lambda text: policy.refusal(ipaddress.ip_address(text)) is None  # noqa: E731
    assert allowed("127.0.0.1") and allowed("::ffff:127.0.0.1") and allowed("10.1.2.3") and allowed("8.8.8.8")
    assert not allowed("192.168.1.1") and not allowed("169.254.169.254") and not allowed("::1")
    assert policy.refusal(ipaddress.ip_address("10.96.0.1")) == \
        "in the cluster network 10.96.0.0/12 (KFDEF_CLUSTER_NETWORKS)"
    assert not allowed("100.200.3.4") and not allowed("::ffff:10.96.0.10")  # a cluster network even if public


def test_any_allows_every_address_and_bad_settings_name_the_variable():
    policy = NetworkPolicy(allowed=parse_networks("any", "A"))
    assert all(policy.refusal(ipaddress.ip_address(a)) is None for a in ("127.0.0.1", "169.254.169.254", "::1"))
    with pytest.raises(ValueError, match="KFDEF_ALLOWED_SOURCE_NETWORKS: '10.0.0.0/33' is not a network"):
        parse_networks("10.0.0.0/33", "KFDEF_ALLOWED_SOURCE_NETWORKS")


def test_a_name_with_one_internal_address_is_refused_as_a_whole():
    addresses = [ipaddress.ip_address("93.184.215.14"), ipaddress.ip_address("10.0.0.5")]
    with pytest.raises(AddressRefused, match=r"^mirror\.example resolves to 10\.0\.0\.5, an internal address "
                                             r"\(private\); .*KFDEF_ALLOWED_SOURCE_NETWORKS"):
        NetworkPolicy().check("mirror.example", addresses)
    NetworkPolicy().check("public.example", addresses[:1])


def test_a_literal_address_is_named_as_written():
    expected = ("::ffff:169.254.169.254 is an internal address (link-local, where cloud metadata services answer, as "
                "IPv4 169.254.169.254 inside IPv6)")
    with pytest.raises(AddressRefused, match="^" + re.escape(expected)):
        NetworkPolicy().resolve("::ffff:169.254.169.254", 80)


def test_names_are_judged_by_what_they_resolve_to():
    with pytest.raises(AddressRefused, match="localhost resolves to"):
        NetworkPolicy().resolve("localhost", 443)
    assert NetworkPolicy(allowed=parse_networks("127.0.0.0/8 ::1", "A")).resolve("127.0.0.1", 443) == \
        [ipaddress.ip_address("127.0.0.1")]
