"""Thin async access to kube-apiserver on top of ``kubernetes.aio``.

The official client loads credentials (kubeconfig, exec plugins, in-cluster)
and owns the aiohttp connection pool; requests here go straight through its
REST client with JSON bodies, because typed models would cost the apply path
a full deserialisation of every object (CRDs can be hundreds of KiB).

Every request is counted by verb so that benchmarks and tests can prove that
a no-op reconcile writes nothing and that an idle operator only watches.

Writes can be *fenced*: with :attr:`KubeClient.fence` set, a write is sent
only while the fence answers True, and refused with :class:`FencedWrite`
otherwise. A replica that is not (or no longer) the leader thereby writes
nothing, whichever code path and whichever impersonating view tries.
"""

from __future__ import annotations

import asyncio
import collections
import copy
import json
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlencode

import aiohttp
from kubernetes.aio import client as aio_client
from kubernetes.aio import config as aio_config

from kfdef_operator.api.types import JSON
from kfdef_operator.backoff import exponential

T = TypeVar("T")


WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_MAX_ATTEMPTS = 8
# The parameter also keeps the REST client from JSON-encoding the (already encoded) body; the server ignores it.
APPLY_CONTENT_TYPE = "application/apply-patch+yaml; charset=utf-8"
# Code points the server's YAML parser refuses (C1 controls, U+FFFE/U+FFFF, lone surrogates) or reads as line
# breaks inside a quoted string (U+0085, U+2028, U+2029), plus the byte order mark: kept as \u escapes.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")


def apply_patch_body(obj: JSON) -> bytes:
    """``obj`` as the body of a server-side apply request: UTF-8 JSON, which the server parses as YAML.

    ``json.dumps``' default ASCII output writes text outside the Basic Multilingual Plane (an emoji in a Grafana
    dashboard) as a surrogate pair, ``\\ud83d\\ude00``: JSON joins the pair again, YAML refuses each half. Written
    as UTF-8 instead, every character reaches the server as it is; only code points that YAML cannot carry
    literally stay escaped, and those escapes mean the same in YAML.
    """
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return _YAML_UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text).encode()


def _retry_delay(attempt: int, retry_after: str | None) -> float:
    """Seconds before retry ``attempt`` (0-based): the server's Retry-After, else 50 ms doubling to 2 s."""
    if retry_after and retry_after.isdigit():
        return min(float(retry_after), 10.0)
    return exponential(attempt, base=0.05, cap=2.0)


def _decode(raw: bytes) -> JSON:
    """A response body as JSON; plain-text answers (``404 page not found``) become ``{"message": ...}``."""
    try:
        return json.loads(raw) if raw else {}
    except ValueError:
        return {"message": raw[:500].decode(errors="replace").strip()}


#: What a request raises when the API server cannot be reached or does not answer in time (its transport's errors).
UNREACHABLE: tuple[type[Exception], ...] = (TimeoutError, OSError, aiohttp.ClientError)


def certificate_problem(error: BaseException) -> str | None:
    """Why the API server's certificate was not trusted, when that is what ``error`` says; else None."""
    if isinstance(error, aiohttp.ClientConnectorCertificateError):
        return str(error.certificate_error)
    return None


class KubeApiError(Exception):
    """A non-2xx answer from kube-apiserver, with the server's own message."""

    def __init__(self, status: int, method: str, path: str, body: JSON | None) -> None:
        self.status = status
        self.method = method
        self.path = path
        self.body = body or {}
        self.reason = self.body.get("reason", "")
        self.message = self.body.get("message") or f"HTTP {status}"
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")

    @property
    def causes(self) -> list[JSON]:
        return (self.body.get("details") or {}).get("causes") or []


def describe_api_error(error: KubeApiError) -> str:
    """One line a person on call can act on: status, reason, message and the first causes."""
    causes = "; ".join(f"{c.get('field', '')}: {c.get('message', '')}".strip(": ") for c in error.causes[:3])
    extra = f" ({causes})" if causes and causes not in error.message else ""
    return f"{error.status} {error.reason or ''}: {error.message}{extra}".strip()


@dataclass(frozen=True)
class RequestStats:
    """Requests sent so far, by verb (dry-run requests counted apart from writes)."""

    by_verb: dict[str, int]
    watches_opened: int

    @property
    def writes(self) -> int:
        return sum(n for verb, n in self.by_verb.items() if verb in WRITE_VERBS)

    @property
    def total(self) -> int:
        return sum(self.by_verb.values())


def service_account_user(namespace: str, name: str) -> str:
    """The user name a service account authenticates as (and is impersonated as)."""
    return f"system:serviceaccount:{namespace}:{name}"


class FencedWrite(KubeApiError):
    """A write refused before it was sent: the fence says this process may not write now."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__(0, method, path, {"reason": "Fenced", "message": "not sent: this replica does not hold "
                                                                           "the leader lease"})


class _Shared:
    """What a client and its impersonating views share: request counts by verb, watches opened, the user agent,
    the write fence and the watches' own connection pool."""

    def __init__(self, user_agent: str | None = None) -> None:
        self.by_verb: collections.Counter[str] = collections.Counter()
        self.watches = 0
        self.user_agent = user_agent
        self.fence: Callable[[], bool] | None = None
        self.watch_api: aio_client.ApiClient | None = None


class KubeClient:
    """One connection pool to one API server, shared by the whole operator.

    :meth:`impersonating` gives a view of the same pool that acts as another
    user (a service account), for the requests made on behalf of a stack.
    """

    def __init__(self, api_client: aio_client.ApiClient, *, impersonate: str | None = None,
                 shared: _Shared | None = None) -> None:
        self._api = api_client
        self._config = api_client.configuration
        self._shared = shared or _Shared()
        self._impersonate = impersonate

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, *, pool_size: int = 64,
                      user_agent: str | None = None) -> KubeClient:
        """Credentials from ``kubeconfig``, else ``$KUBECONFIG``/``~/.kube/config``, else in-cluster.

        ``user_agent`` names this process in the API server's audit log and metrics.
        """
        configuration = aio_client.Configuration()
        if kubeconfig or os.environ.get("KUBECONFIG") or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            await aio_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            aio_config.load_incluster_config(client_configuration=configuration)
        configuration.connection_pool_maxsize = pool_size
        shared = _Shared(user_agent)
        # A watch holds its connection for minutes: watches get a pool of their own, without a limit (one
        # connection each), so that the requests' pool is never used up by watches (one per kind watched).
        watch_configuration = copy.copy(configuration)
        watch_configuration.connection_pool_maxsize = 0
        shared.watch_api = aio_client.ApiClient(watch_configuration)
        return cls(aio_client.ApiClient(configuration), shared=shared)

    @property
    def fence(self) -> Callable[[], bool] | None:
        """When set, writes (of this client and of its views) are sent only while it returns True."""
        return self._shared.fence

    @fence.setter
    def fence(self, fence: Callable[[], bool] | None) -> None:
        self._shared.fence = fence

    @property
    def host(self) -> str:
        return str(self._config.host)

    @property
    def impersonated_user(self) -> str | None:
        """The user this client acts as, or None for the credentials' own identity."""
        return self._impersonate

    def impersonating(self, user: str | None) -> KubeClient:
        """A view of this client's connection pool acting as ``user`` (None: the credentials' own identity).

        Only ``Impersonate-User`` is sent: for a service account's user name
        the API server adds its groups itself (``system:serviceaccounts``,
        ``system:serviceaccounts:<namespace>``, ``system:authenticated``), so
        the operator needs ``impersonate`` on ``serviceaccounts`` and nothing
        on ``groups`` (which would let it claim any group, ``system:masters``
        included). The view shares the request counters, user agent and write fence; closing it is a
        no-op, the pool belongs to the client it came from.
        """
        if user == self._impersonate:
            return self
        return _View(self._api, impersonate=user, shared=self._shared)

    async def close(self) -> None:
        if self._shared.watch_api is not None:
            await self._shared.watch_api.close()
        await self._api.close()

    def stats(self) -> RequestStats:
        return RequestStats(dict(self._shared.by_verb), self._shared.watches)

    async def _headers(self, content_type: str, accept: str) -> dict[str, str]:
        headers = {"Content-Type": content_type, "Accept": accept}
        if self._shared.user_agent:
            headers["User-Agent"] = self._shared.user_agent
        auth = await self._config.auth_settings()
        token = auth.get("BearerToken")
        if token and token.get("value"):
            headers["Authorization"] = token["value"]
        if self._impersonate:
            headers["Impersonate-User"] = self._impersonate
        return headers

    def _url(self, path: str, params: dict[str, Any] | None) -> str:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        return self.host + path + ("?" + urlencode(query, doseq=True) if query else "")

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        timeout: float = 60.0,
    ) -> JSON:
        """Send one request; return the decoded JSON body or raise :class:`KubeApiError`."""
        decoded, _ = await self._send(method, path, body=body, params=params, content_type=content_type,
                                      accept=accept, timeout=timeout)
        return decoded

    async def _send(self, method: str, path: str, *, body: Any, params: dict[str, Any] | None,
                    content_type: str, accept: str, timeout: float) -> tuple[JSON, int]:
        """One request with retries where they are safe.

        ``429`` means the server did not process the request (throttled, or a
        new CRD's storage still initialising): retried for every verb,
        honouring ``Retry-After``. ``5xx`` and connection errors are retried
        for reads only.
        """
        dry_run = bool(params and params.get("dryRun"))
        url = self._url(path, params)
        for attempt in range(_MAX_ATTEMPTS):
            if method in WRITE_VERBS and not dry_run and self._shared.fence is not None and not self._shared.fence():
                raise FencedWrite(method, path)
            self._shared.by_verb[f"{method}{'(dry-run)' if dry_run else ''}"] += 1
            headers = await self._headers(content_type, accept)
            try:
                # The REST client JSON-encodes dict bodies itself; bytes go out as they are.
                response = await self._api.rest_client.request(
                    method, url, headers=headers, body=body, _request_timeout=timeout)
                raw = await response.read()
            except UNREACHABLE:
                if method != "GET" or attempt == _MAX_ATTEMPTS - 1:
                    raise
                await asyncio.sleep(_retry_delay(attempt, None))
                continue
            decoded = _decode(raw)
            status = response.status
            retryable = status == 429 or (status >= 500 and method == "GET")
            if retryable and attempt < _MAX_ATTEMPTS - 1:
                await asyncio.sleep(_retry_delay(attempt, response.getheader("Retry-After")))
                continue
            if status >= 300:
                raise KubeApiError(status, method, path, decoded)
            return decoded, status
        raise AssertionError("unreachable")

    async def get(self, path: str, *, accept: str = "application/json", **params: Any) -> JSON | None:
        """GET, or None when the object does not exist."""
        try:
            return await self.request("GET", path, params=params, accept=accept)
        except KubeApiError as error:
            if error.status == 404:
                return None
            raise

    async def apply(self, path: str, obj: JSON, *, field_manager: str, force: bool = True,
                    dry_run: bool = False) -> tuple[JSON, bool]:
        """Server-side apply; returns the object and whether this request created it (HTTP 201)."""
        params = {"fieldManager": field_manager, "force": "true" if force else None,
                  "dryRun": "All" if dry_run else None}
        decoded, status = await self._send("PATCH", path, body=apply_patch_body(obj), params=params,
                                           content_type=APPLY_CONTENT_TYPE, accept="application/json", timeout=60.0)
        return decoded, status == 201

    async def create(self, collection_path: str, obj: JSON, *, field_manager: str) -> JSON:
        """POST: create ``obj`` only if no object of its name exists (409 AlreadyExists otherwise)."""
        return await self.request("POST", collection_path, body=obj, params={"fieldManager": field_manager})

    async def watch(self, path: str, *, resource_version: str | None = None, label_selector: str | None = None,
                    field_selector: str | None = None, timeout_seconds: int = 300) -> AsyncIterator[JSON]:
        """Stream watch events (dicts with ``type`` and ``object``) until the server ends the watch.

        Bookmarks are requested so that a reconnect resumes from a recent
        resourceVersion; ``410 Gone`` arrives as an ``ERROR`` event and is left
        to the caller (it must relist).
        """
        params = {"watch": "1", "allowWatchBookmarks": "true", "resourceVersion": resource_version,
                  "labelSelector": label_selector, "fieldSelector": field_selector,
                  "timeoutSeconds": str(timeout_seconds)}
        self._shared.watches += 1
        headers = await self._headers("application/json", "application/json")
        response = await (self._shared.watch_api or self._api).rest_client.request(
            "GET", self._url(path, params), headers=headers,
            # The server closes the watch after timeoutSeconds; a silent stream beyond that is dead.
            _request_timeout=timeout_seconds + 30)
        raw_response = response.response
        try:
            if response.status >= 300:
                raise KubeApiError(response.status, "GET", path, _decode(await response.read()))
            async for line in raw_response.content:
                if line.strip():
                    yield json.loads(line)
        finally:
            raw_response.release()

    async def gather_limited(self, coroutines: Sequence[Awaitable[T]], limit: int) -> list[T | BaseException]:
        """Run coroutines with at most ``limit`` in flight; results (or exceptions) in input order."""
        semaphore = asyncio.Semaphore(limit)

        async def run(coro: Awaitable[T]) -> T:
            async with semaphore:
                return await coro

        return await asyncio.gather(*(run(c) for c in coroutines), return_exceptions=True)


class _View(KubeClient):
    """An impersonating view of another client's pool (see :meth:`KubeClient.impersonating`)."""

    async def close(self) -> None:
        """The pool belongs to the client this view came from."""
