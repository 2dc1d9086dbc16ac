"""HTTP(S) tarball sources, fetched with ``requests`` under the fetch's trust rules and deadline.

- ``http://`` is refused unless ``FetchOptions.allow_insecure_http``, on the first hop and on every redirect
  (an https source redirecting to http would drop TLS).
- Redirects are followed by hand, at most ``max_redirects``, each hop checked like the first.
- Every connection is made by :class:`_GuardedAdapter`: the host's addresses are checked against the network
  policy and the socket connects to exactly those (no DNS rebinding). A connection to a proxy from the
  environment (``HTTPS_PROXY``...) is the admin's choice and not checked; the target's name is then checked as
  far as it resolves here, and the proxy resolves it again.
- The deadline bounds every wait (connect and read timeouts are shortened to what is left) and shuts the
  sockets down when it passes, so a server trickling one byte a second cannot hold the fetch.
- Proxy variables and netrc are honoured; ``FetchOptions.ca_bundle`` adds a CA bundle for TLS interception
  proxies and private servers. An unchanged archive is revalidated with a conditional GET (304).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError

from kfdef_operator.api.kfdef import Repo
from kfdef_operator.backoff import exponential
from kfdef_operator.source.cache import CacheFull, SourceCache, remove_path
from kfdef_operator.source.deadline import Deadline
from kfdef_operator.source.errors import SourceError, redact_uri, scrub
from kfdef_operator.source.network import AddressRefused, NetworkPolicy, uses_proxy
from kfdef_operator.source.options import FetchOptions

log = logging.getLogger(__name__)

_CHUNK = 1024 * 1024


# --- guarded connections ----------------------------------------------------------------------------------

@dataclass
class _Guard:
    """The policy and deadline of the fetch running in this context, and duplicates of its sockets."""

    policy: NetworkPolicy
    deadline: Deadline
    sockets: list[socket.socket] = field(default_factory=list)

    def track(self, sock: socket.socket) -> None:
        # A duplicate descriptor: TLS wrapping detaches the original socket object, and shutting the socket
        # down through any descriptor wakes a read blocked on it.
        duplicate = sock.dup()
        self.sockets.append(duplicate)
        self.deadline.on_expiry(lambda: duplicate.shutdown(socket.SHUT_RDWR))


_GUARD: ContextVar[_Guard | None] = ContextVar("kfdef_fetch_guard", default=None)


class _GuardedConnectionMixin:
    """Connects only to addresses the policy allows, pinned to what was checked."""

    proxy: Any
    port: int
    _dns_host: str

    def _new_conn(self) -> socket.socket:
        guard = _GUARD.get()
        if guard is None:
            raise AddressRefused("a source connection was attempted outside a guarded fetch")
        if self.proxy is not None:  # the admin's proxy; the target was vetted before the request
            sock = super()._new_conn()  # type: ignore[misc]
        else:
            failure: Exception | None = None
            try:
                addresses = guard.policy.resolve(self._dns_host, self.port)
            except socket.gaierror as exc:
                raise NameResolutionError(self._dns_host, self, exc) from exc  # type: ignore[arg-type]
            name = self._dns_host  # also what TLS verifies and the Host header names: restored below
            try:
                for address in addresses:
                    self._dns_host = str(address)  # connect to exactly the address that was checked
                    try:
                        sock = super()._new_conn()  # type: ignore[misc]
                        break
                    except (NewConnectionError, ConnectTimeoutError) as exc:
                        failure = exc
                else:
                    raise failure or AddressRefused("the host has no address")
            finally:
                self._dns_host = name
        guard.track(sock)
        return sock


class _GuardedHTTPConnection(_GuardedConnectionMixin, HTTPConnection):
    pass


class _GuardedHTTPSConnection(_GuardedConnectionMixin, HTTPSConnection):
    pass


class _GuardedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _GuardedHTTPConnection


class _GuardedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _GuardedHTTPSConnection


class _GuardedAdapter(HTTPAdapter):
    """requests' adapter with every pool (direct or through a proxy) using the guarded connections."""

    _POOLS = {"http": _GuardedHTTPPool, "https": _GuardedHTTPSPool}

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self._POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = self._POOLS
        return manager


@contextlib.contextmanager
def _guarded_session(options: FetchOptions, deadline: Deadline) -> Iterator[requests.Session]:
    guard = _Guard(options.networks, deadline)
    token = _GUARD.set(guard)
    try:
        with requests.Session() as session:
            session.trust_env = True  # proxies, NO_PROXY and netrc from the environment
            session.mount("http://", _GuardedAdapter())
            session.mount("https://", _GuardedAdapter())
            yield session
    finally:
        _GUARD.reset(token)
        for sock in guard.sockets:
            sock.close()


# --- the download -----------------------------------------------------------------------------------------

class _Retryable(Exception):
    pass


def download(repo: Repo, cache: SourceCache, options: FetchOptions, deadline: Deadline) -> tuple[Path, str]:
    """Fetch the archive at ``repo.uri`` (or confirm the cached one with a conditional GET): (path, digest)."""
    _check_scheme(repo, repo.uri, None, options)
    key = cache.key(repo.uri)
    meta_path = cache.root / "http" / f"{key}.json"
    with cache.lock(f"http-{key}"), _guarded_session(options, deadline) as session:
        meta = _read_meta(meta_path, cache)
        headers = {}
        if meta.get("etag"):
            headers["If-None-Match"] = meta["etag"]
        if meta.get("last_modified"):
            headers["If-Modified-Since"] = meta["last_modified"]
        last_error = ""
        for attempt in range(options.retries + 1):
            if attempt:
                deadline.pause(exponential(attempt - 1, base=options.backoff_seconds))
            try:
                fetched = _get_once(repo, session, headers, cache, options, deadline)
            except _Retryable as exc:
                deadline.check()
                last_error = str(exc)
                log.warning("repo %s: attempt %d/%d failed: %s", repo.name, attempt + 1, options.retries + 1,
                            scrub(last_error, repo.uri))
                continue
            if fetched is None:  # 304 Not Modified
                archive = cache.root / "archives" / f"sha256-{meta['digest']}"
                if cache.claim(archive):
                    cache.claim(meta_path)
                    return archive, meta["digest"]
                headers = {}  # collected meanwhile: fetch it whole
                continue
            digest, etag, last_modified = fetched
            _write_meta(meta_path, cache, {"digest": digest, "etag": etag, "last_modified": last_modified})
            return cache.root / "archives" / f"sha256-{digest}", digest
    raise SourceError(repo.name, repo.uri, f"download failed after {options.retries + 1} attempts: {last_error}; "
                                           "check the server, proxy settings (HTTPS_PROXY/NO_PROXY) and "
                                           "network policy", transient=True)


def _check_scheme(repo: Repo, url: str, redirected_from: str | None, options: FetchOptions) -> None:
    """Refuse a hop whose scheme the options do not allow."""
    scheme = urlsplit(url).scheme.lower()
    if redirected_from is None:
        if scheme == "http" and not options.allow_insecure_http:
            raise SourceError(repo.name, repo.uri, "plain http:// is refused (no integrity or privacy); use https:// "
                                                   "or set KFDEF_ALLOW_INSECURE_HTTP=1 if you must")
        return
    if scheme not in ("http", "https"):
        raise SourceError(repo.name, repo.uri, f"refused: redirected to {redact_uri(url)}; only http(s) redirects are "
                                               "followed")
    if scheme == "http" and not options.allow_insecure_http:
        raise SourceError(repo.name, repo.uri, f"refused: redirected from {redact_uri(redirected_from)} to plain "
                                               f"{redact_uri(url)}, which would drop TLS; use the final https URL, or "
                                               "set KFDEF_ALLOW_INSECURE_HTTP=1 if you must")


def _get_once(repo: Repo, session: requests.Session, headers: dict[str, str], cache: SourceCache,
              options: FetchOptions, deadline: Deadline) -> tuple[str, str, str] | None:
    """One GET, following redirects: None for 304, else (digest, etag, last_modified) of the stored body."""
    url, previous = repo.uri, None
    for _ in range(options.max_redirects + 1):
        _check_scheme(repo, url, previous, options)
        response = _request(repo, session, url, previous, headers, options, deadline)
        if not response.is_redirect:
            break
        previous, url = url, urljoin(url, response.headers["Location"])
        response.close()
    else:
        raise SourceError(repo.name, repo.uri, f"more than {options.max_redirects} redirects; use the final URL")
    with response:
        if response.status_code == 304 and headers:
            return None
        if response.status_code >= 500:
            raise _Retryable(f"HTTP {response.status_code} {response.reason}")
        if response.status_code != 200:
            raise SourceError(repo.name, repo.uri, f"HTTP {response.status_code} {response.reason}; check that the "
                                                   "URI exists and is readable without a login")
        declared = int(response.headers.get("Content-Length") or 0)
        if declared > options.max_download_bytes:
            raise SourceError(repo.name, repo.uri, f"archive is {declared} bytes, over the {options.max_download_bytes}"
                                                   "-byte download limit")
        try:
            with cache.reserve(declared or options.max_download_bytes, timeout=deadline.remaining()):
                staged = cache.staging() / "body"
                try:
                    digest = _stream_body(repo, response, staged, declared, options, deadline)
                    cache.publish(staged, cache.root / "archives" / f"sha256-{digest}")
                finally:
                    remove_path(staged.parent)
        except CacheFull as error:
            raise SourceError(repo.name, repo.uri, str(error), transient=True) from None
        return digest, response.headers.get("ETag", ""), response.headers.get("Last-Modified", "")


def _request(repo: Repo, session: requests.Session, url: str, previous: str | None, headers: dict[str, str],
             options: FetchOptions, deadline: Deadline) -> requests.Response:
    via = f" (redirected from {redact_uri(previous)})" if previous else ""
    try:
        if uses_proxy(url):  # a direct connection is checked as it is made
            parts = urlsplit(url)
            options.networks.vet_proxied(url, parts.port or (443 if parts.scheme.lower() == "https" else 80))
        return session.get(url, headers=headers, stream=True, allow_redirects=False, verify=options.ca_bundle or True,
                           auth=_credentials_for(url, repo.uri),
                           timeout=(deadline.bound(options.connect_timeout), deadline.bound(options.read_timeout)))
    except AddressRefused as refused:
        raise SourceError(repo.name, repo.uri, f"refused{via}: {refused}") from None
    except (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema,
            requests.exceptions.MissingSchema) as exc:
        raise SourceError(repo.name, repo.uri, f"invalid URL{via}: {exc}") from None
    except requests.exceptions.SSLError as exc:
        raise SourceError(repo.name, repo.uri, f"TLS verification failed{via} ({exc}); if a proxy or private CA "
                                               "signs this server, set KFDEF_CA_BUNDLE") from None
    except (requests.ConnectionError, requests.Timeout, OSError) as exc:
        deadline.check()
        unresolved = _name_resolution_error(exc)
        if unresolved is not None:  # retrying at once would only ask the resolver again: later, with backoff
            host = urlsplit(url).hostname
            raise SourceError(repo.name, repo.uri, f"cannot resolve {host}{via}: {unresolved}; check the host name "
                                                   "and the cluster's DNS", transient=True) from None
        raise _Retryable(f"{type(exc).__name__}{via}: {exc}") from None


def _name_resolution_error(error: BaseException) -> socket.gaierror | None:
    """The DNS failure behind a connection error (urllib3 wraps it a few levels deep), if that is what it was."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, socket.gaierror):
            return current
        pending += [current.__cause__, current.__context__, *(a for a in current.args if isinstance(a, BaseException)),
                    getattr(current, "reason", None)]
    return None


def _credentials_for(url: str, source: str) -> tuple[str, str] | None:
    """The user info of the source URI, for a hop to the same origin (scheme, host, port) only; another origin
    gets none (netrc still applies per host)."""
    hop, origin = urlsplit(url), urlsplit(source)
    user, password = requests.utils.get_auth_from_url(source)
    same = (hop.scheme, hop.hostname, hop.port) == (origin.scheme, origin.hostname, origin.port)
    return (user, password) if same and (user or password) and not hop.username else None


def _stream_body(repo: Repo, response: requests.Response, target: Path, declared: int, options: FetchOptions,
                 deadline: Deadline) -> str:
    hasher = hashlib.sha256()
    size = 0
    try:
        with open(target, "wb") as out:
            for chunk in response.iter_content(_CHUNK):
                deadline.check()
                size += len(chunk)
                if size > options.max_download_bytes:
                    raise SourceError(repo.name, repo.uri, f"archive exceeds the {options.max_download_bytes}-byte "
                                                           "download limit")
                if declared and size > declared:
                    raise _Retryable(f"body is longer than its Content-Length ({declared} bytes)")
                hasher.update(chunk)
                out.write(chunk)
    except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
        deadline.check()
        raise _Retryable(f"download interrupted: {type(exc).__name__}: {exc}") from None
    deadline.check()  # a body without Content-Length simply ends when the deadline shuts the socket
    if declared and size != declared:
        raise _Retryable(f"body was {size} bytes, Content-Length said {declared}")
    return hasher.hexdigest()


def _read_meta(path: Path, cache: SourceCache) -> dict[str, str]:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not (cache.root / "archives" / f"sha256-{meta.get('digest')}").is_file():
        return {}  # the body is gone: fetch unconditionally
    return meta


def _write_meta(path: Path, cache: SourceCache, meta: dict[str, str]) -> None:
    staged = cache.staging()
    (staged / "meta.json").write_text(json.dumps(meta))
    os.replace(staged / "meta.json", path)
    remove_path(staged)
