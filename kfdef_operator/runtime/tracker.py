"""Live state of every object the operator stamped, kept current by watches.

One watch per resource kind, cluster-wide, filtered server-side by the
ownership label, so at rest the operator sends no request besides its open
watches. A namespace-scoped operator (install modes other than
AllNamespaces) may not list cluster-wide: it watches a namespaced kind per
namespace instead, each target being ``(resource, namespace)``. The cache holds only what decisions need (ownership
stamps, digest,
readiness), never whole objects: Kubeflow CRDs alone weigh megabytes.

Every change is handed to a listener (``ADDED``, ``MODIFIED``, ``DELETED``)
with the full object, which the heal and status logic use. A watch that ends
is resumed from the last resourceVersion (bookmarks keep it recent); ``410
Gone`` and errors lead to a relist, which also reports objects deleted while
the watch was down.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable

from kfdef_operator.api.names import ADOPTED_ANNOTATION, FIELD_MANAGER, INSTANCE_LABEL
from kfdef_operator.api.types import JSON
from kfdef_operator.backoff import exponential, jittered
from kfdef_operator.runtime.ownership import KEPT_ANNOTATIONS, KEPT_LABELS
from kfdef_operator.ssa.client import KubeApiError, KubeClient
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.ssa.inventory import ObjectRef, ref_of
from kfdef_operator.ssa.live import LiveObject, summarize

log = logging.getLogger(__name__)

#: Told every watch event (type, object, its summary, the object itself); what it returns is not read.
Listener = Callable[[str, ObjectRef, LiveObject, JSON | None], object]
#: What to watch: a kind, in one namespace or ("") cluster-wide.
WatchTarget = tuple[Resource, str]
_Key = tuple[str, str, str]  # group, kind, namespace ("" = cluster-wide)

_WATCH_TIMEOUT_S = 290
#: Objects per page of a listing, as kubectl chunks its lists.
LIST_PAGE = 500
#: CRDs per page: the stamped CRDs of a Kubeflow release, listed whole at a start, weigh tens of MiB as objects
#: (schemas, managed fields), which the heap kept; small pages bound what a listing holds decoded at once.
CRD_LIST_PAGE = 20


def instance_label(live: LiveObject) -> str | None:
    """The owning KfDef's label value on a tracked object."""
    label: str | None = live.meta["labels"].get(INSTANCE_LABEL)
    return label


class Tracker:
    """Watches of stamped objects, one per resource kind (implements :class:`kfdef_operator.ssa.live.LiveView`)."""

    def __init__(self, kube: KubeClient, listener: Listener) -> None:
        self._kube = kube
        self._listener = listener
        self._objects: dict[ObjectRef, LiveObject] = {}
        self._watches: dict[_Key, asyncio.Task[None]] = {}
        self._versions: dict[_Key, str] = {}  # the version each watch reads its kind at
        self._synced: dict[_Key, asyncio.Event] = {}
        self._listed_at: dict[_Key, float] = {}  # when each watch's latest full listing began (monotonic)
        self._refused: dict[_Key, KubeApiError] = {}  # first listing refused (403): no use waiting
        self._waiters: dict[ObjectRef, list[asyncio.Future[None]]] = {}

    # -- queries -------------------------------------------------------------------

    def get(self, ref: ObjectRef) -> LiveObject | None:
        return self._objects.get(ref)

    def is_watched(self, group: str, kind: str, namespace: str = "") -> bool:
        keys = [(group, kind, "")] + ([(group, kind, namespace)] if namespace else [])
        return any(key in self._synced and self._synced[key].is_set() for key in keys)

    async def next_event(self, ref: ObjectRef, timeout: float) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(ref, []).append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except TimeoutError:
            pass
        finally:
            waiters = self._waiters.get(ref, [])
            if waiter in waiters:
                waiters.remove(waiter)
            if not waiters:
                self._waiters.pop(ref, None)

    # -- lifecycle -----------------------------------------------------------------

    async def watch(self, targets: Iterable[WatchTarget], *, timeout: float = 60.0) -> None:
        """Start watching these targets (if not yet) and wait until each has listed once (a kind the server does
        not serve counts as listed: nothing of it exists).

        Raises the API server's refusal (403) of a kind's first listing at once, and TimeoutError when a
        listing does not complete within ``timeout``.
        """
        wanted: dict[_Key, list[WatchTarget]] = {}
        for resource, namespace in targets:
            wanted.setdefault(_key(resource, namespace), []).append((resource, namespace))
        for key, asked in wanted.items():
            # A kind the stacks now read at another version (a release moved its CRD on, and the old version may
            # be gone: its watch would fail for ever) is watched again at that one; its objects stay known meanwhile.
            if key in self._watches and all(resource.version != self._versions[key] for resource, _ in asked):
                await self._stop(key)
            if key not in self._watches:
                resource, namespace = asked[0]
                self._synced[key] = asyncio.Event()
                self._versions[key] = resource.version
                self._watches[key] = asyncio.create_task(
                    self._run(resource, namespace), name=f"watch {resource.plural} {namespace or '(all namespaces)'}")
        keys = list(wanted)
        if keys:
            async with asyncio.timeout(timeout):
                await asyncio.gather(*(self._wait_synced(key) for key in keys))

    async def _wait_synced(self, key: _Key) -> None:
        if key in self._refused:
            raise self._refused[key]
        await self._synced[key].wait()
        if key in self._refused:
            raise self._refused[key]

    async def retain(self, targets: Iterable[WatchTarget]) -> None:
        """Stop the watches not among ``targets`` and forget their objects."""
        keep = {_key(resource, namespace) for resource, namespace in targets}
        for key in [k for k in self._watches if k not in keep]:
            await self._stop(key)
            for ref in [r for r in self._objects if _covers(key, r)]:
                del self._objects[ref]

    async def _stop(self, key: _Key) -> None:
        """Stop one watch (its objects stay known)."""
        task = self._watches.pop(key)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for state in (self._versions, self._synced, self._listed_at, self._refused):
            state.pop(key, None)

    async def close(self) -> None:
        for task in self._watches.values():
            task.cancel()
        await asyncio.gather(*self._watches.values(), return_exceptions=True)
        self._watches.clear()

    # -- watch loop ----------------------------------------------------------------

    def _dispatch(self, event_type: str, obj: JSON) -> None:
        # Of adopted objects only, the fields other writers hold: the stack did not create them (status names them).
        adopted = ((obj.get("metadata") or {}).get("annotations") or {}).get(ADOPTED_ANNOTATION) == "true"
        live = summarize(obj, labels=KEPT_LABELS, annotations=KEPT_ANNOTATIONS,
                         foreign_to=FIELD_MANAGER if adopted else None)
        if event_type == "DELETED":
            self._objects.pop(live.ref, None)
        else:
            self._objects[live.ref] = live
        try:
            self._listener(event_type, live.ref, live, obj)
        except Exception:  # a listener bug must not kill the watch
            log.exception("event listener failed for %s %s", event_type, live.ref)
        for waiter in self._waiters.pop(live.ref, []):
            if not waiter.done():
                waiter.set_result(None)

    async def resync(self, owner_label: str, targets: Iterable[WatchTarget], *, unless_listed_since: float) -> None:
        """List one owner's objects of these kinds again and hand every one to the listener as ``SYNC``.

        Catches what no watch event showed (drift the operator never saw change) at the cost of one LIST per
        kind; unchanged objects cost the listener a local comparison only. Objects of the owner that are gone
        are reported ``DELETED``. A kind whose watch began a full listing at or after ``unless_listed_since``
        (monotonic) is skipped: that listing handed every object to the listener already (a start's first run).
        """
        for resource, namespace in targets:
            key = _key(resource, namespace)
            if self._listed_at.get(key, -math.inf) >= unless_listed_since:
                continue
            if self.is_watched(resource.group, resource.kind, namespace):
                await self._relist(resource, namespace, owner_label=owner_label)

    async def _relist(self, resource: Resource, namespace: str, *, owner_label: str | None = None) -> str:
        """List a kind (all stamped objects, or one owner's) and reconcile the cache with what is there.

        Changed objects are dispatched ``ADDED``/``MODIFIED``, vanished ones ``DELETED``; with ``owner_label``
        unchanged ones too, as ``SYNC``.
        """
        selector = INSTANCE_LABEL if owner_label is None else f"{INSTANCE_LABEL}={owner_label}"
        page = CRD_LIST_PAGE if resource.kind == "CustomResourceDefinition" else LIST_PAGE
        seen = set()
        continue_token: str | None = None
        while True:
            listing = await self._kube.request("GET", resource.collection_path(namespace or None), params={
                "labelSelector": selector, "limit": page, "continue": continue_token})
            for item in listing.pop("items", None) or []:
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", resource.kind)
                ref = ref_of(item)
                seen.add(ref)
                previous = self._objects.get(ref)
                if previous is None:
                    self._dispatch("ADDED", item)
                elif previous.resource_version != item["metadata"].get("resourceVersion"):
                    self._dispatch("MODIFIED", item)
                elif owner_label is not None:
                    self._dispatch("SYNC", item)
            continue_token = (listing.get("metadata") or {}).get("continue")
            if not continue_token:
                break
        # Objects that vanished while no watch was open.
        for ref, live in list(self._objects.items()):
            if not _covers(_key(resource, namespace), ref) or ref in seen:
                continue
            if owner_label is not None and instance_label(live) != owner_label:
                continue
            gone = {"apiVersion": resource.api_version, "kind": resource.kind,
                    "metadata": {"name": ref.name, "namespace": ref.namespace or None, "uid": live.uid,
                                 "labels": live.meta["labels"], "annotations": live.meta["annotations"]}}
            self._dispatch("DELETED", gone)
        return str((listing.get("metadata") or {}).get("resourceVersion", ""))

    async def _run(self, resource: Resource, namespace: str) -> None:
        key = _key(resource, namespace)
        resource_version: str | None = None
        failures = 0
        while True:
            try:
                if resource_version is None:
                    self._listed_at[key] = time.monotonic()
                    resource_version = await self._relist(resource, namespace)
                    self._refused.pop(key, None)
                    self._synced[key].set()
                async for event in self._kube.watch(resource.collection_path(namespace or None),
                                                    resource_version=resource_version,
                                                    label_selector=INSTANCE_LABEL, timeout_seconds=_WATCH_TIMEOUT_S):
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        # 410 Gone: our resourceVersion was compacted away; list again.
                        log.info("watch of %s expired (%s); relisting", resource.plural, obj.get("message"))
                        resource_version = None
                        break
                    resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                    if event.get("type") != "BOOKMARK":
                        self._dispatch(event["type"], obj)
                failures = 0
            except asyncio.CancelledError:
                raise
            except KubeApiError as error:
                failures += 1
                if error.status == 410:
                    resource_version = None
                if error.status == 403 and not self._synced[key].is_set():
                    # Waiters learn at once that this identity may not list the kind; the watch keeps
                    # trying, in case the permission is granted later.
                    self._refused[key] = error
                    self._synced[key].set()
                    self._synced[key] = asyncio.Event()
                if error.status == 404 and not self._synced[key].is_set():
                    # The kind is not served (its CRD is gone, or not created yet), so none of its objects exists:
                    # waiters go on. A stale discovery cache names such kinds after a teardown deleted the CRD.
                    self._synced[key].set()
                # 404: the kind's CRD is being re-created (healing) or went away; keep trying quietly.
                log.log(logging.DEBUG if error.status == 404 else logging.WARNING,
                        "watch of %s failed: %s", resource.plural, error)
            except Exception as error:  # connection reset, apiserver restart, timeouts
                failures += 1
                log.warning("watch of %s interrupted: %s", resource.plural, error or type(error).__name__)
            if failures:
                await asyncio.sleep(jittered(exponential(failures, base=0.2, cap=10.0), 0.5))


def _key(resource: Resource, namespace: str) -> _Key:
    return resource.group, resource.kind, namespace if resource.namespaced else ""


def _covers(key: _Key, ref: ObjectRef) -> bool:
    """Whether the watch ``key`` holds ``ref``."""
    group, kind, namespace = key
    return (ref.group, ref.kind) == (group, kind) and (not namespace or ref.namespace == namespace)
