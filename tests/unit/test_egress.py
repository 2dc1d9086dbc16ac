"""The build's egress proxy (remote bases allowed): connections follow the source fetches' address policy, plain http
only where sources may use it, refusals kept and answered with the reason; what is allowed passes both ways."""

from __future__ import annotations

import ipaddress
import socket
import urllib.error
import urllib.request

import pytest

from kfdef_operator.build.egress import EgressProxy, RemoteBases
from kfdef_operator.source.network import NetworkPolicy
from tests.reliability.support import TarballServer

LOOPBACK = NetworkPolicy(allowed=(ipaddress.ip_network("127.0.0.1/32"),))


@pytest.fixture
def server():
    with TarballServer() as server:
        server.serve("/secret", b"internal-secret")
        yield server


def fetch(proxy: EgressProxy, url: str) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy.url, "https": proxy.url}))
    try:
        with opener.open(url, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def connect(proxy: EgressProxy, target: str) -> bytes:
    """The proxy's answer to ``CONNECT target``, up to its blank line."""
    with socket.create_connection(("127.0.0.1", int(proxy.url.rsplit(":", 1)[1])), timeout=10) as client:
        client.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = client.recv(4096)
            if not chunk:
                break
            answer += chunk
        return answer.split(b"\r\n\r\n")[0]


def test_internal_addresses_are_refused_as_for_sources(server):
    with EgressProxy(RemoteBases(allow_insecure_http=True)) as proxy:
        status, body = fetch(proxy, server.url("/secret"))
        refused = connect(proxy, f"127.0.0.1:{server.port}")
        metadata = connect(proxy, "169.254.169.254:80")
    assert status == 403 and b"internal-secret" not in body and b"an internal address (loopback)" in body
    assert refused.startswith(b"HTTP/1.1 403 127.0.0.1 is an internal address (loopback)")
    assert b"link-local, where cloud metadata services answer" in metadata
    assert not server.routes["/secret"].hits
    assert len(proxy.refusals) == 3 and "KFDEF_ALLOWED_SOURCE_NETWORKS" in proxy.refusals[0]


def test_what_the_operator_allows_passes(server):
    with EgressProxy(RemoteBases(LOOPBACK, allow_insecure_http=True)) as proxy:
        assert fetch(proxy, server.url("/secret")) == (200, b"internal-secret")
        assert connect(proxy, f"127.0.0.1:{server.port}") == b"HTTP/1.1 200 Connection established"
    assert len(server.routes["/secret"].hits) == 1 and proxy.refusals == []


def test_plain_http_only_where_sources_may_use_it(server):
    with EgressProxy(RemoteBases(LOOPBACK)) as proxy:
        status, body = fetch(proxy, server.url("/secret"))
    assert status == 403 and b"KFDEF_ALLOW_INSECURE_HTTP" in body and not server.routes["/secret"].hits


def test_an_allowed_address_that_does_not_answer_is_not_a_refusal():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        with EgressProxy(RemoteBases(LOOPBACK)) as proxy:
            answer = connect(proxy, f"127.0.0.1:{closed.getsockname()[1]}")
    assert answer.startswith(b"HTTP/1.1 502 cannot connect") and proxy.refusals == []
