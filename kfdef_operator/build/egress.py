"""The one way out of a build whose kustomizations may name remote bases and URLs (``--no-remote-bases=false``).

kustomize fetches remote files itself and clones git repositories with ``git``, from inside the operator's pod: left
alone, it reaches what a tenant cannot (the operator's own ports on loopback, the cloud metadata service, the
cluster's services), and a ``file://`` clone reads the operator's own files (its git mirror of other tenants'
repositories). With remote bases allowed, the render helper sends every connection, its own and git's, through an
:class:`EgressProxy` of that build (``--remote-proxy``), and git speaks https and http only. The proxy applies the
address policy of source fetches (:class:`~kfdef_operator.source.network.NetworkPolicy`, settings
``KFDEF_ALLOWED_SOURCE_NETWORKS`` and ``KFDEF_CLUSTER_NETWORKS``): each name is resolved, every address checked, and
the connection made to a checked address; plain http only where sources may use it (``KFDEF_ALLOW_INSECURE_HTTP``).
It keeps what it refused, so that the build's error says why whatever kustomize or git made of the answer.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import urlsplit

from kfdef_operator.source.network import AddressRefused, NetworkPolicy
from kfdef_operator.source.options import FetchOptions

_MAX_HEAD = 64 * 1024
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class RemoteBases:
    """Remote bases and URLs allowed in kustomizations, fetched under ``networks`` (the address policy of source
    fetches), plain http only with ``allow_insecure_http``."""

    networks: NetworkPolicy = field(default_factory=NetworkPolicy)
    allow_insecure_http: bool = False
    connect_timeout: float = 10.0
    idle_timeout: float = 60.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, networks: NetworkPolicy | None = None
                 ) -> RemoteBases:
        """The source fetches' settings (``docs/sources.md#settings``), ``networks`` replacing their address policy
        when given; ``ValueError`` names a bad variable."""
        options = FetchOptions.from_env(environ)
        return cls(networks if networks is not None else options.networks, options.allow_insecure_http,
                   options.connect_timeout, options.read_timeout)

    def describe(self) -> str:
        allowed = ", ".join(str(n) for n in self.networks.allowed) or "public addresses only"
        return f"networks: {allowed}; plain http {'allowed' if self.allow_insecure_http else 'refused'}"


class EgressProxy:
    """An HTTP proxy on a loopback port for one build: ``CONNECT host:port`` (https) and absolute-form requests
    (plain http), each connected to an address ``remote`` allows, or answered ``403`` with the reason, which
    :attr:`refusals` keeps. A context manager: it serves from entry to exit."""

    def __init__(self, remote: RemoteBases) -> None:
        self.remote = remote
        self.refusals: list[str] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def __enter__(self) -> EgressProxy:
        threading.Thread(target=self._accept, daemon=True, name="egress-proxy").start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._listener.close()  # the accept loop ends; connections end with the build that made them

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True, name="egress-connection").start()

    def _serve(self, client: socket.socket) -> None:
        with client:
            client.settimeout(self.remote.idle_timeout)
            try:
                head, rest = _read_head(client)
                method, target, version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            except (OSError, ValueError):
                return
            try:
                if method == "CONNECT":
                    host, _, port = target.rpartition(":")
                    upstream = self._connect(host.strip("[]"), int(port))
                    client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                else:
                    upstream, head = self._plain_http(method, target, version, head)
                    upstream.sendall(head)
            except (Refused, ValueError) as refusal:
                self._refuse(client, str(refusal))
                return
            except OSError as error:  # allowed, but not reachable: kustomize or git reports it
                _answer(client, 502, f"cannot connect: {error}")
                return
            with upstream:
                if rest:
                    upstream.sendall(rest)
                _splice(client, upstream, self.remote.idle_timeout)

    def _plain_http(self, method: str, target: str, version: str, head: bytes) -> tuple[socket.socket, bytes]:
        """The connection and the rewritten request head (origin form, ``Connection: close``) for an
        absolute-form plain http request."""
        url = urlsplit(target)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"{method} {target}: the proxy forwards absolute http:// URLs and CONNECT only")
        if not self.remote.allow_insecure_http:
            raise Refused(f"plain http to {url.hostname} is refused (the operator's KFDEF_ALLOW_INSECURE_HTTP is "
                          "off); use https://")
        upstream = self._connect(url.hostname, url.port or 80)
        lines = [f"{method} {url.path or '/'}{'?' + url.query if url.query else ''} {version}".encode("latin-1")]
        for line in head.split(b"\r\n")[1:]:
            name = line.split(b":", 1)[0].strip().lower()
            if line and name not in (b"connection", b"proxy-connection", b"proxy-authorization", b"keep-alive"):
                lines.append(line)
        return upstream, b"\r\n".join([*lines, b"Connection: close", b"", b""])

    def _connect(self, host: str, port: int) -> socket.socket:
        """A connection to ``host``, made to one of its addresses after every one was checked."""
        try:
            addresses = self.remote.networks.resolve(host, port)
        except AddressRefused as refused:
            raise Refused(str(refused)) from None
        except OSError as error:
            raise OSError(f"{host} does not resolve: {error}") from None
        for address in addresses[:-1]:
            with contextlib.suppress(OSError):
                return socket.create_connection((str(address), port), timeout=self.remote.connect_timeout)
        return socket.create_connection((str(addresses[-1]), port), timeout=self.remote.connect_timeout)

    def _refuse(self, client: socket.socket, reason: str) -> None:
        with self._lock:
            self.refusals.append(reason)
        _answer(client, 403, reason)


def _answer(client: socket.socket, status: int, reason: str) -> None:
    """A final answer with ``reason`` as its reason phrase (one line: Go shows it for a failed CONNECT) and body."""
    phrase = " ".join(reason.split())[:500]
    body = reason.encode()
    with contextlib.suppress(OSError):
        client.sendall(f"HTTP/1.1 {status} {phrase}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                       "Connection: close\r\n\r\n".encode("latin-1", "replace") + body)


class Refused(Exception):
    """A connection the build may not make; the message says why."""


def _read_head(client: socket.socket) -> tuple[bytes, bytes]:
    """The request head (up to the blank line, which is kept) and what came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(_CHUNK)
        if not chunk or len(data) > _MAX_HEAD:
            raise ValueError("no complete request head")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head + b"\r\n\r\n", rest


def _splice(one: socket.socket, other: socket.socket, idle_timeout: float) -> None:
    """Copy bytes both ways until either side closes or nothing moves for ``idle_timeout`` seconds."""
    peers = {one: other, other: one}
    while True:
        readable, _, _ = select.select(list(peers), [], [], idle_timeout)
        if not readable:
            return
        for source in readable:
            try:
                data = source.recv(_CHUNK)
                if not data:
                    return
                peers[source].sendall(data)
            except OSError:
                return
