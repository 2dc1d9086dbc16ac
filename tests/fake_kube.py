"""An in-memory kube-apiserver behind the real :class:`KubeClient`, for tests of the core without a control plane.

The seam is the REST client of ``kubernetes.aio`` (``api_client.rest_client.request``): every request of
``KubeClient`` (``request``, ``get``, ``apply``, ``create`` through ``_send``) and every watch go through that one
call, so the client's own retries, write fence and request counts stay the product's. :class:`FakeApiServer`
answers there, as a model of the API server small enough to read:

- objects by kind (group and plural), namespace and name, each with a uid, a resourceVersion from one counter, a
  generation that moves when anything but metadata and status changes, and managedFields naming who wrote;
- server-side apply as a merge of the applied intent into the object, fields a manager applied before and left out
  now removed; create (409 when present), update (409 on a stale resourceVersion), JSON merge patch, delete with
  uid and resourceVersion preconditions (409), finalizers (deletionTimestamp), dry runs that store nothing;
- a Namespace or CRD deleted has what lives in it deleted at once (the controllers' work) and goes once that is
  gone (finalizers hold both); a CRD created serves its kind and is Established after ``crd_established_after``
  virtual seconds (never, if its name is in ``never_established``);
- lists with label and field selectors, metadata-only answers, aggregated discovery;
- watches fed from the changes (initial ADDED events, or a replay from a resourceVersion), ended on request;
- what another client does just before a request arrives (:meth:`before`); faults by rule (:meth:`fail`):
  status, reason, message, Retry-After, or a request that never answers;
- a log of every request received (:attr:`log`), with the virtual times it arrived and was answered (each
  request takes ``latency`` virtual seconds, so that what waits for an answer shows in the times).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kfdef_operator.api import names
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.discovery import Resource

JSON = dict[str, Any]
HOST = "https://fake-kube.invalid"
CRD_GROUP = "apiextensions.k8s.io"


BUILTIN_KINDS = [
    Resource("", "v1", "Namespace", "namespaces", False),
    Resource("", "v1", "ConfigMap", "configmaps", True),
    Resource("", "v1", "Secret", "secrets", True),
    Resource("", "v1", "ServiceAccount", "serviceaccounts", True),
    Resource("", "v1", "Service", "services", True),
    Resource("", "v1", "Event", "events", True),
    Resource("apps", "v1", "Deployment", "deployments", True),
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False),
    Resource("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False),
    Resource("rbac.authorization.k8s.io", "v1", "Role", "roles", True),
    Resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True),
    Resource("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration",
         "validatingwebhookconfigurations", False),
    Resource("coordination.k8s.io", "v1", "Lease", "leases", True),
    Resource(CRD_GROUP, "v1", "CustomResourceDefinition", "customresourcedefinitions", False),
    Resource(names.GROUP, names.VERSION, names.KIND, names.PLURAL, True),  # the operator's own CRD, installed
]


@dataclass
class Received:
    """One request as the server received it, and the status it answered (0: not answered, it hung)."""

    method: str
    path: str
    params: dict[str, str]
    body: Any
    content_type: str
    user: str | None
    at: float
    status: int = 0
    answered_at: float | None = None

    @property
    def dry_run(self) -> bool:
        return "dryRun" in self.params


@dataclass
class Fault:
    """Answer matching requests with an error (``status``), ``times`` times (None: always). ``hang``: never answer
    (until the caller gives up)."""

    method: str | None
    path: str | None
    status: int
    message: str = ""
    reason: str = ""
    times: int | None = 1
    retry_after: str | None = None
    hang: bool = False
    when: Callable[[Received], bool] | None = None

    def matches(self, received: Received) -> bool:
        return ((self.method is None or self.method == received.method)
                and (self.path is None or self.path in received.path)
                and (self.when is None or self.when(received)))


class ApiError(Exception):
    """The server's refusal, answered as a ``Status``."""

    def __init__(self, status: int, reason: str, message: str, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.status, self.reason, self.message, self.retry_after = status, reason, message, retry_after


@dataclass
class _Watch:
    kind: Resource
    namespace: str | None
    labels: str | None
    fields: str | None
    queue: asyncio.Queue[JSON | None] = field(default_factory=asyncio.Queue)

    def wants(self, obj: JSON) -> bool:
        meta = obj.get("metadata") or {}
        return ((self.namespace is None or meta.get("namespace") == self.namespace)
                and _labels_match(meta.get("labels") or {}, self.labels)
                and _fields_match(meta, self.fields))


class _Response:
    """What the REST client returns: status, body, headers; for a watch, the aiohttp response's line stream."""

    def __init__(self, status: int, body: JSON, headers: dict[str, str] | None = None,
                 lines: AsyncIterator[bytes] | None = None) -> None:
        self.status = status
        self._body = body
        self._headers = headers or {}
        self.response = _Stream(lines)

    async def read(self) -> bytes:
        return json.dumps(self._body).encode()

    def getheader(self, name: str) -> str | None:
        return self._headers.get(name)


class _Stream:
    def __init__(self, lines: AsyncIterator[bytes] | None) -> None:
        self.content = lines
        self.released = False

    def release(self) -> None:
        self.released = True


class _Configuration:
    host = HOST

    async def auth_settings(self) -> JSON:
        return {}


def _labels_match(labels: dict[str, str], selector: str | None) -> bool:
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _fields_match(meta: JSON, selector: str | None) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if meta.get(key.removeprefix("metadata."), "") != value:
            return False
    return True


def _merge(base: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386): maps merge, None removes, everything else replaces."""
    if not isinstance(base, dict) or not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(base)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge(base.get(key), value)
    return merged


def _drop_left_out(obj: JSON, before: JSON, now: JSON) -> None:
    """Remove from ``obj`` the fields a manager applied ``before`` and no longer applies ``now``."""
    for key, value in before.items():
        if key not in now:
            obj.pop(key, None)
        elif isinstance(value, dict) and isinstance(now[key], dict) and isinstance(obj.get(key), dict):
            _drop_left_out(obj[key], value, now[key])


def _json_patched(live: JSON, operations: list[JSON]) -> JSON:
    """``live`` after a JSON patch of ``test`` and ``replace`` operations (a failed test: 422, as the server)."""
    patched = copy.deepcopy(live)
    for operation in operations:
        *parents, last = [part.replace("~1", "/").replace("~0", "~") for part in operation["path"].split("/")[1:]]
        target: Any = patched
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        key: Any = int(last) if isinstance(target, list) else last
        if operation["op"] == "test":
            present = key < len(target) if isinstance(target, list) else key in target
            if not present or target[key] != operation["value"]:
                raise ApiError(422, "Invalid", f"the test of {operation['path']} failed")
        elif operation["op"] == "replace":
            target[key] = operation["value"]
        else:
            raise ApiError(400, "BadRequest", f"the fake serves no JSON patch {operation['op']!r}")
    return patched


def _spec_of(obj: JSON) -> JSON:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _metadata_only(obj: JSON) -> JSON:
    return {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": obj["metadata"]}


class FakeApiServer:
    """The API server model; :meth:`client` gives a real :class:`KubeClient` talking to it."""

    def __init__(self, *, latency: float = 0.01, crd_established_after: float | None = 0.0) -> None:
        self.latency = latency
        self.crd_established_after = crd_established_after
        self.never_established: set[str] = set()
        self.log: list[Received] = []
        self.faults: list[Fault] = []
        self._hooks: list[tuple[str | None, str | None, Callable[[Received], None]]] = []
        self.kinds: dict[tuple[str, str], Resource] = {}
        self._versions: dict[tuple[str, str], set[str]] = {}  # served versions by (group, plural)
        for kind in BUILTIN_KINDS:
            self.serve(kind)
        self._objects: dict[tuple[str, str, str, str], JSON] = {}  # group, plural, namespace, name
        self._applied: dict[tuple[tuple[str, str, str, str], str], JSON] = {}  # what each manager applied last
        self._counter = itertools.count(100)
        self._history: list[tuple[int, str, Resource, JSON]] = []
        self._watches: list[_Watch] = []
        # The REST client and configuration of an ``ApiClient``: the only parts KubeClient uses.
        self.configuration = _Configuration()
        self.rest_client = self

    def client(self) -> KubeClient:
        return KubeClient(self)  # type: ignore[arg-type]

    async def close(self) -> None:
        self.end_watches()

    # -- what tests set up and look at -------------------------------------------------------------------

    def serve(self, kind: Resource) -> None:
        self.kinds[(kind.group, kind.plural)] = kind
        self._versions.setdefault((kind.group, kind.plural), set()).add(kind.version)

    def kind_of(self, api_version: str, kind_name: str) -> Resource:
        group = api_version.rpartition("/")[0]
        for kind in self.kinds.values():
            if kind.group == group and kind.kind == kind_name:
                return kind
        raise KeyError(f"{kind_name} in {api_version} is not served")

    def path_of(self, obj: JSON) -> str:
        meta = obj.get("metadata") or {}
        return self.kind_of(obj["apiVersion"], obj["kind"]).object_path(meta["name"], meta.get("namespace"))

    def put(self, obj: JSON, *, manager: str = "someone-else") -> JSON:
        """Store ``obj`` as another client would create it (events are sent)."""
        kind = self.kind_of(obj["apiVersion"], obj["kind"])
        meta = obj.get("metadata") or {}
        return copy.deepcopy(self._create(kind, meta.get("namespace") if kind.namespaced else None, obj,
                                          manager, "Update", dry_run=False))

    def get(self, path: str) -> JSON | None:
        kind, namespace, name, _ = self._parse(path)
        found = self._objects.get(self._key(kind, namespace, name or ""))
        return copy.deepcopy(found)

    def objects(self, kind_name: str | None = None) -> list[JSON]:
        return [copy.deepcopy(o) for o in self._objects.values() if kind_name in (None, o["kind"])]

    def modify(self, path: str, change: Callable[[JSON], None]) -> JSON:
        """Change a stored object in place, as another client's update would (new resourceVersion, event)."""
        kind, namespace, name, _ = self._parse(path)
        obj = copy.deepcopy(self._objects[self._key(kind, namespace, name or "")])
        before = _spec_of(obj)
        change(obj)
        return copy.deepcopy(self._store(kind, obj, "MODIFIED", spec_before=before))

    def remove(self, path: str) -> None:
        """Delete an object as another client would (finalizers ignored; an event is sent)."""
        kind, namespace, name, _ = self._parse(path)
        self._erase(kind, self._objects[self._key(kind, namespace, name or "")])

    def fail(self, method: str | None, path: str | None, status: int, message: str = "", *, reason: str = "",
             times: int | None = 1, retry_after: str | None = None, hang: bool = False,
             when: Callable[[Received], bool] | None = None) -> Fault:
        """Answer the next ``times`` matching requests (``path``: a substring) with ``status``."""
        fault = Fault(method, path, status, message or f"injected {status}", reason, times, retry_after, hang, when)
        self.faults.append(fault)
        return fault

    def before(self, method: str | None, path: str | None, action: Callable[[Received], None]) -> None:
        """Run ``action`` once, when the next matching request arrives and before it is answered (what another
        client did meanwhile)."""
        self._hooks.append((method, path, action))

    def end_watches(self) -> None:
        """End every open watch, as the server does at its timeout or restart."""
        for watch in self._watches:
            watch.queue.put_nowait(None)
        self._watches.clear()

    def received(self, method: str | None = None, path: str | None = None, *, writes_only: bool = False
                 ) -> list[Received]:
        return [r for r in self.log if (method is None or r.method == method) and (path is None or path in r.path)
                and not (writes_only and (r.method == "GET" or r.dry_run))]

    # -- the REST client's one method --------------------------------------------------------------------

    async def request(self, method: str, url: str, *, headers: dict[str, str], body: Any = None,
                      _request_timeout: float | None = None, **_: Any) -> _Response:
        parts = urlsplit(url)
        params = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        if isinstance(body, bytes | str):
            body = json.loads(body)  # an apply body is JSON (the server reads it as YAML)
        received = Received(method, parts.path, params, copy.deepcopy(body), headers.get("Content-Type", ""),
                            headers.get("Impersonate-User"), asyncio.get_running_loop().time())
        self.log.append(received)
        await asyncio.sleep(self.latency)  # the answer is processed when it arrives, so order shows in time
        try:
            await self._injected(received)
            if method == "GET" and params.get("watch"):
                lines = self._open_watch(parts.path, params)
                received.status, received.answered_at = 200, asyncio.get_running_loop().time()
                return _Response(200, {}, lines=lines)
            status, answer = self._handle(method, parts.path, params, body, headers.get("Accept", ""),
                                          received.content_type)
        except ApiError as error:
            received.status, received.answered_at = error.status, asyncio.get_running_loop().time()
            fault_headers = {"Retry-After": error.retry_after} if error.retry_after else {}
            return _Response(error.status, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                            "reason": error.reason, "message": error.message,
                                            "code": error.status}, fault_headers)
        received.status, received.answered_at = status, asyncio.get_running_loop().time()
        return _Response(status, answer)

    async def _injected(self, received: Received) -> None:
        for hook in list(self._hooks):
            method, path, action = hook
            if method in (None, received.method) and (path is None or path in received.path):
                self._hooks.remove(hook)
                action(received)
        for fault in self.faults:
            if fault.times == 0 or not fault.matches(received):
                continue
            if fault.times is not None:
                fault.times -= 1
            if fault.hang:
                await asyncio.Event().wait()
            raise ApiError(fault.status, fault.reason, fault.message, fault.retry_after)

    # -- the API server model ----------------------------------------------------------------------------

    def _parse(self, path: str) -> tuple[Resource, str | None, str | None, str | None]:
        """(kind, namespace, name, subresource) of a resource path."""
        parts = path.strip("/").split("/")
        group, version, rest = ("", parts[1], parts[2:]) if parts[0] == "api" else (parts[1], parts[2], parts[3:])
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        kind = self.kinds.get((group, rest[0]))
        if kind is None or version not in self._versions.get((group, rest[0]), set()):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return kind, namespace, rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None

    @staticmethod
    def _key(kind: Resource, namespace: str | None, name: str) -> tuple[str, str, str, str]:
        return kind.group, kind.plural, (namespace or "") if kind.namespaced else "", name

    def _handle(self, method: str, path: str, params: dict[str, str], body: Any, accept: str,
                content_type: str) -> tuple[int, JSON]:
        if path in ("/api", "/apis"):
            return 200, self._discovery(core=path == "/api")
        kind, namespace, name, subresource = self._parse(path)
        dry_run = "dryRun" in params
        metadata_only = "as=PartialObjectMetadata" in accept
        if name is None:
            if method == "GET":
                return 200, self._list(kind, namespace, params, metadata_only)
            if method == "POST":
                if kind.namespaced and (namespace is None or self._key(self.kinds[("", "namespaces")], None,
                                                                        namespace) not in self._objects):
                    raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
                return 201, self._create(kind, namespace, body, params.get("fieldManager", ""), "Update", dry_run)
            raise ApiError(405, "MethodNotAllowed", f"{method} on a collection")
        key = self._key(kind, namespace, name)
        live = self._objects.get(key)
        if method == "GET":
            if live is None:
                raise ApiError(404, "NotFound", f'{kind.plural} "{name}" not found')
            return 200, _metadata_only(live) if metadata_only else copy.deepcopy(live)
        if method == "PATCH" and content_type.startswith("application/apply-patch"):
            return self._apply(kind, namespace, name, body, params, dry_run)
        if live is None:
            raise ApiError(404, "NotFound", f'{kind.plural} "{name}" not found')
        if method == "PUT":
            expected = (body.get("metadata") or {}).get("resourceVersion")
            if expected != live["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural} "{name}": the '
                                                "object has been modified; please apply your changes to the latest "
                                                "version and try again")
            updated = copy.deepcopy(body)
            updated["metadata"] = {**live["metadata"], **{k: v for k, v in (body.get("metadata") or {}).items()
                                                          if k in ("labels", "annotations", "finalizers")}}
            return 200, self._commit(kind, updated, live, dry_run)
        if method == "PATCH" and content_type.startswith("application/json-patch+json"):
            return 200, self._commit(kind, _json_patched(live, body), live, dry_run)
        if method == "PATCH":
            expected = ((body or {}).get("metadata") or {}).get("resourceVersion")
            if expected is not None and expected != live["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural} "{name}"')
            patch = body if subresource != "status" else {"status": (body or {}).get("status")}
            return 200, self._commit(kind, _merge(live, patch), live, dry_run)
        if method == "DELETE":
            return 200, self._delete(kind, live, body or {}, dry_run)
        raise ApiError(405, "MethodNotAllowed", method)

    def _discovery(self, *, core: bool) -> JSON:
        groups: dict[str, dict[str, list[JSON]]] = {}
        for (group, plural), kind in self.kinds.items():
            if (group == "") != core:
                continue
            for version in sorted(self._versions[(group, plural)]):
                groups.setdefault(group, {}).setdefault(version, []).append({
                    "resource": plural, "responseKind": {"kind": kind.kind},
                    "scope": "Namespaced" if kind.namespaced else "Cluster"})
        return {"items": [{"metadata": {"name": group}, "versions": [
            {"version": version, "resources": resources} for version, resources in versions.items()]}
            for group, versions in groups.items()]}

    def _list(self, kind: Resource, namespace: str | None, params: dict[str, str], metadata_only: bool) -> JSON:
        items = [copy.deepcopy(obj) for (group, plural, ns, _), obj in sorted(self._objects.items())
                 if (group, plural) == (kind.group, kind.plural) and (namespace is None or ns == namespace)
                 and _labels_match(obj["metadata"].get("labels") or {}, params.get("labelSelector"))
                 and _fields_match(obj["metadata"], params.get("fieldSelector"))]
        for item in items:  # list items carry no apiVersion and kind
            item.pop("apiVersion", None)
            item.pop("kind", None)
        metadata = {"resourceVersion": str(self._last_version())}
        if params.get("limit"):  # pages; the continue token here is where the next page starts
            start, limit = int(params.get("continue") or 0), int(params["limit"])
            if start + limit < len(items):
                metadata["continue"] = str(start + limit)
            items = items[start:start + limit]
        return {"kind": f"{kind.kind}List", "metadata": metadata,
                "items": [{"metadata": item["metadata"]} if metadata_only else item for item in items]}

    def _last_version(self) -> int:
        return self._history[-1][0] if self._history else 99

    def _create(self, kind: Resource, namespace: str | None, body: JSON, manager: str, operation: str,
                dry_run: bool) -> JSON:
        meta = dict(body.get("metadata") or {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{next(self._counter):x}"
        body = {**body, "metadata": meta}
        key = self._key(kind, namespace or meta.get("namespace"), meta.get("name", ""))
        if key in self._objects:
            raise ApiError(409, "AlreadyExists", f'{kind.plural} "{meta.get("name")}" already exists')
        if meta.get("resourceVersion") or meta.get("uid"):
            raise ApiError(422, "Invalid", "metadata.resourceVersion: Invalid value: must be empty on create")
        obj = copy.deepcopy(body)
        obj.setdefault("apiVersion", kind.api_version)
        obj.setdefault("kind", kind.kind)
        obj["metadata"] = {**obj.get("metadata", {}), "uid": str(uuid.uuid4()), "generation": 1,
                           "creationTimestamp": "2026-01-01T00:00:00Z",
                           "managedFields": [{"manager": manager, "operation": operation,
                                              "apiVersion": kind.api_version}]}
        if kind.namespaced:
            obj["metadata"]["namespace"] = namespace or meta.get("namespace")
        if dry_run:
            return {**obj, "metadata": {**obj["metadata"], "resourceVersion": ""}}
        return self._store(kind, obj, "ADDED")

    def _apply(self, kind: Resource, namespace: str | None, name: str, intent: JSON, params: dict[str, str],
               dry_run: bool) -> tuple[int, JSON]:
        manager = params.get("fieldManager", "")
        key = self._key(kind, namespace, name)
        live = self._objects.get(key)
        if live is None:
            if kind.namespaced and self._key(self.kinds[("", "namespaces")], None, namespace or "") \
                    not in self._objects:
                raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')
            created = self._create(kind, namespace, intent, manager, "Apply", dry_run)
            if not dry_run:
                self._applied[(key, manager)] = copy.deepcopy(intent)
            return 201, created
        merged = copy.deepcopy(live)
        _drop_left_out(merged, self._applied.get((key, manager), {}), intent)
        merged = _merge(merged, {k: v for k, v in intent.items() if k != "metadata"})
        meta = intent.get("metadata") or {}
        for section in ("labels", "annotations"):
            if meta.get(section) or section in merged["metadata"]:
                merged["metadata"][section] = {**merged["metadata"].get(section, {}), **(meta.get(section) or {})}
        for section in ("ownerReferences", "finalizers"):
            if section in meta:
                merged["metadata"][section] = copy.deepcopy(meta[section])
        entries = [e for e in merged["metadata"].get("managedFields", []) if e.get("manager") != manager]
        merged["metadata"]["managedFields"] = [*entries, {"manager": manager, "operation": "Apply",
                                                          "apiVersion": kind.api_version}]
        answer = self._commit(kind, merged, live, dry_run)
        if not dry_run:
            self._applied[(key, manager)] = copy.deepcopy(intent)
        return 200, answer

    def _commit(self, kind: Resource, obj: JSON, live: JSON, dry_run: bool) -> JSON:
        """Store an update of ``live`` (nothing when ``obj`` is the same, as the server does)."""
        if obj == live:
            return copy.deepcopy(live)
        if dry_run:
            return copy.deepcopy(obj)
        return self._store(kind, obj, "MODIFIED", spec_before=_spec_of(live))

    def _store(self, kind: Resource, obj: JSON, event: str, *, spec_before: JSON | None = None) -> JSON:
        meta = obj["metadata"]
        if spec_before is not None and _spec_of(obj) != spec_before:
            meta["generation"] = int(meta.get("generation") or 1) + 1
        version = next(self._counter)
        meta["resourceVersion"] = str(version)
        key = self._key(kind, meta.get("namespace"), meta["name"])
        if self._done_terminating(kind, obj):
            self._erase(kind, obj)
            return copy.deepcopy(obj)
        self._objects[key] = obj
        self._emit(version, event, kind, obj)
        if kind.kind == "CustomResourceDefinition" and event == "ADDED":
            self._crd_created(obj)
        return copy.deepcopy(obj)

    def _delete(self, kind: Resource, live: JSON, options: JSON, dry_run: bool) -> JSON:
        preconditions = options.get("preconditions") or {}
        meta = live["metadata"]
        for field_name in ("uid", "resourceVersion"):
            if preconditions.get(field_name) and preconditions[field_name] != meta.get(field_name):
                raise ApiError(409, "Conflict", f"Precondition failed: {field_name} in precondition: "
                                                f"{preconditions[field_name]}, {field_name} in object meta: "
                                                f"{meta.get(field_name)}")
        if dry_run or meta.get("deletionTimestamp"):
            return copy.deepcopy(live)
        contents = self._contents(kind, live)
        if not meta.get("finalizers") and not contents:
            self._erase(kind, live)
            return copy.deepcopy(live)
        terminating = copy.deepcopy(live)
        terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:01Z"
        stored = self._store(kind, terminating, "MODIFIED")
        for content_kind, content in contents:  # the namespace controller's or CRD finalizer's work, at once
            self._delete(content_kind, content, {}, dry_run=False)
        return stored

    def _contents(self, kind: Resource, obj: JSON) -> list[tuple[Resource, JSON]]:
        """What lives in a Namespace or is of a CRD's kind (and goes when it goes)."""
        if kind.kind == "Namespace":
            return [(self.kinds[key[:2]], o) for key, o in self._objects.items() if key[2] == obj["metadata"]["name"]]
        if kind.kind == "CustomResourceDefinition":
            spec = obj.get("spec") or {}
            served = (spec.get("group"), (spec.get("names") or {}).get("plural"))
            return [(self.kinds[key[:2]], o) for key, o in self._objects.items() if key[:2] == served]
        return []

    def _parents(self, kind: Resource, obj: JSON) -> list[tuple[Resource, JSON]]:
        """The Namespace an object lives in and the CRD of a custom resource, those stored."""
        parents = []
        if kind.namespaced:
            namespaces = self.kinds[("", "namespaces")]
            found = self._objects.get(self._key(namespaces, None, obj["metadata"].get("namespace", "")))
            if found is not None:
                parents.append((namespaces, found))
        crds = self.kinds[(CRD_GROUP, "customresourcedefinitions")]
        crd = self._objects.get(self._key(crds, None, f"{kind.plural}.{kind.group}"))
        return parents + [(crds, crd)] if crd is not None else parents

    def _erase(self, kind: Resource, obj: JSON) -> None:
        meta = obj["metadata"]
        key = self._key(kind, meta.get("namespace"), meta["name"])
        self._objects.pop(key, None)
        for applied in [k for k in self._applied if k[0] == key]:
            del self._applied[applied]
        version = next(self._counter)
        self._emit(version, "DELETED", kind, {**obj, "metadata": {**meta, "resourceVersion": str(version)}})
        for content_kind, content in self._contents(kind, obj):  # removed by someone else: no finalizer waits
            self._erase(content_kind, content)
        if kind.kind == "CustomResourceDefinition":
            spec = obj.get("spec") or {}
            served = (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
            self.kinds.pop(served, None)
            self._versions.pop(served, None)
        for parent in self._parents(kind, obj):
            if self._done_terminating(*parent):
                self._erase(*parent)

    def _done_terminating(self, kind: Resource, obj: JSON) -> bool:
        meta = obj["metadata"]
        return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers") and not self._contents(kind, obj)

    def _crd_created(self, crd: JSON) -> None:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        for version in spec.get("versions") or []:
            if version.get("served", True):
                self.serve(Resource(spec["group"], version["name"], names["kind"], names["plural"],
                                spec.get("scope") == "Namespaced"))
        if self.crd_established_after is not None and crd["metadata"]["name"] not in self.never_established:
            path = self.path_of(crd)
            asyncio.get_running_loop().call_later(self.crd_established_after, self._establish, path)

    def _establish(self, path: str) -> None:
        if self.get(path) is None:
            return

        def established(crd: JSON) -> None:
            crd["status"] = {"conditions": [{"type": "NamesAccepted", "status": "True"},
                                            {"type": "Established", "status": "True"}],
                             "acceptedNames": (crd.get("spec") or {}).get("names")}
        self.modify(path, established)

    # -- watches -------------------------------------------------------------------------------------------

    def _emit(self, version: int, event: str, kind: Resource, obj: JSON) -> None:
        self._history.append((version, event, kind, copy.deepcopy(obj)))
        for watch in self._watches:
            if watch.kind == kind and watch.wants(obj):
                watch.queue.put_nowait({"type": event, "object": copy.deepcopy(obj)})

    def _open_watch(self, path: str, params: dict[str, str]) -> AsyncIterator[bytes]:
        kind, namespace, _, _ = self._parse(path)
        watch = _Watch(kind, namespace, params.get("labelSelector"), params.get("fieldSelector"))
        since = params.get("resourceVersion")
        if since in (None, "", "0"):
            for obj in self._list(kind, namespace, params, metadata_only=False)["items"]:
                watch.queue.put_nowait({"type": "ADDED", "object": {"apiVersion": kind.api_version,
                                                                    "kind": kind.kind, **obj}})
        else:
            for version, event, event_kind, obj in self._history:
                if version > int(since) and event_kind == kind and watch.wants(obj):
                    watch.queue.put_nowait({"type": event, "object": copy.deepcopy(obj)})
        self._watches.append(watch)
        return self._lines(watch, float(params.get("timeoutSeconds") or 1800))

    async def _lines(self, watch: _Watch, timeout: float) -> AsyncIterator[bytes]:
        try:
            async with asyncio.timeout(timeout):
                while (event := await watch.queue.get()) is not None:
                    yield json.dumps(event).encode() + b"\n"
        except TimeoutError:
            pass
        finally:
            if watch in self._watches:
                self._watches.remove(watch)
