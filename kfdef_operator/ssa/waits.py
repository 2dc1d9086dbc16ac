"""Waiting on the API server: a CRD until it is Established, a deleted object until it is gone.

:class:`Waits` reads the watch cache when its kind is watched (waking at watch events, no requests) and polls
otherwise. Waiting for a CRD's deletion also notices when kube-apiserver failed to clean up its objects and left
it alone, and makes it retry.
"""

from __future__ import annotations

import asyncio
import logging
import time

from kfdef_operator.api.types import JSON
from kfdef_operator.backoff import exponential
from kfdef_operator.ssa.access import CRD_PATH, MERGE_PATCH, METADATA_ONLY, ONE_METADATA_ONLY, ApiAccess
from kfdef_operator.ssa.changeset import Action, Change
from kfdef_operator.ssa.claims import Ownership
from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.ssa.health import CRD_CLEANUP_FAILED, Health, State, assess
from kfdef_operator.ssa.inventory import ObjectRef

log = logging.getLogger(__name__)

#: How long a CRD's failed cleanup is left to kube-apiserver's own retry (milliseconds, when it works), and how
#: often the CRD is read whole when its kind is not watched.
_CLEANUP_PATIENCE_S = 2.0
_CLEANUP_RETRY_EVERY_S = 10.0


async def until_served(access: ApiAccess, resource: Resource, deadline: float) -> None:
    """Wait until the API server answers for ``resource``'s collection (by ``deadline``, monotonic).

    A version added to a CRD that is Established already is in discovery at once, while kube-apiserver's handler for
    it answers ``404 page not found`` for a moment (its informer has not seen the update yet): objects applied, or
    listed, at that version then fail. Any other answer, a refusal included (403: nothing to tell from), ends the
    wait."""
    attempt = 0
    while True:
        try:
            await access.kube.request("GET", resource.collection_path(), params={"limit": "1"}, accept=METADATA_ONLY)
            return
        except KubeApiError as error:
            if error.status != 404:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{resource.api_version} {resource.kind} not served yet") from None
        await asyncio.sleep(exponential(attempt, base=0.02, cap=0.2))
        attempt += 1


class Waits:
    """Waits for CRDs to be Established (within ``crd_timeout``) and for deleted objects to be gone."""

    def __init__(self, access: ApiAccess, crd_timeout: float) -> None:
        self.access = access
        self.crd_timeout = crd_timeout

    async def established(self, change: Change) -> None:
        """Wait for one CRD's Established condition, then register its kinds with discovery.

        With a live view that watches CRDs (the operator has one), the wait
        reads its cache, which the watch keeps current, and wakes at the CRD's
        watch events: no request at all, and no polling (70 CRDs polled every
        10 ms kept a core a fifth busy during their establishment). Otherwise
        the CRD is polled.
        """
        deadline = time.monotonic() + self.crd_timeout
        live = self.access.live
        if live is not None and live.is_watched("apiextensions.k8s.io", "CustomResourceDefinition"):
            while True:
                tracked = live.get(change.ref)
                if tracked is not None and tracked.health.state is State.FAILED:
                    raise RuntimeError(tracked.health.message)
                if tracked is not None and tracked.health.ready:
                    if change.live is not None:  # an unchanged CRD's kinds are in discovery already
                        await self._register(change, change.live, deadline)
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"still not Established after {self.crd_timeout:.0f}s")
                # Bounded, so that a wake-up lost to a watch restart costs a second, not the whole timeout.
                await live.next_event(change.ref, min(remaining, 1.0))
        crd = change.live
        attempt = 0
        while True:
            conditions = {c.get("type"): c for c in ((crd or {}).get("status") or {}).get("conditions") or []}
            if crd is not None and conditions.get("Established", {}).get("status") == "True":
                await self._register(change, crd, deadline)
                return
            names = conditions.get("NamesAccepted")
            if names and names.get("status") == "False":
                raise RuntimeError(f"names not accepted: {names.get('message')}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"still not Established after {self.crd_timeout:.0f}s")
            await asyncio.sleep(exponential(attempt, base=0.02, cap=0.2))
            attempt += 1
            crd = await self.access.kube.get(f"{CRD_PATH}/{change.ref.name}")

    async def _register(self, change: Change, crd: JSON, deadline: float) -> None:
        """Register an Established CRD's kinds with discovery; of a CRD updated (not created) by the apply, once the
        versions discovery did not know are served (:func:`until_served`). A new CRD's are once it is Established."""
        if change.action is not Action.CREATED:
            for resource in self.access.discovery.unknown_versions(crd):
                await until_served(self.access, resource, deadline)
        self.access.discovery.register_crd(crd)

    async def gone(self, ownership: Ownership, ref: ObjectRef, version: str, timeout: float) -> bool | str:
        """True once the object is gone; else why it is still there (finalizers) after ``timeout``.

        Objects of watched kinds are awaited on the cache, waking at their watch events (no requests); others are
        polled, by their metadata (a CRD is read whole every few seconds, for its conditions). A CRD whose cleanup
        kube-apiserver failed and left alone is made to retry (:meth:`_retry_crd_cleanup`).
        """
        resource = await self.access.discovery.resource_for_ref(ref, version)
        path = resource.path_of(ref)
        is_crd = (ref.group, ref.kind) == ("apiextensions.k8s.io", "CustomResourceDefinition")
        live_view = self.access.live
        watched = live_view if live_view is not None and live_view.is_watched(ref.group, ref.kind, ref.namespace) \
            else None
        started = time.monotonic()
        deadline, read_whole_at = started + timeout, started + _CLEANUP_PATIENCE_S
        attempt = 0
        failed_since: float | None = None  # since when the CRD's cleanup has been seen failed, and why
        failure = ""
        retried_at = 0.0
        while True:
            now = time.monotonic()
            health: Health | None = None
            if watched is not None:
                tracked = watched.get(ref)
                if tracked is None:
                    return True
                health = tracked.health
            else:
                whole = is_crd and now >= read_whole_at
                live = await self.access.kube.get(path, accept="application/json" if whole else ONE_METADATA_ONLY)
                if live is None:
                    return True
                if whole:
                    health, read_whole_at = assess(live), now + _CLEANUP_PATIENCE_S
            if health is not None:
                failed_since = (failed_since or now) if health.reason == CRD_CLEANUP_FAILED else None
                failure = health.message
            if failed_since is not None and now - failed_since >= _CLEANUP_PATIENCE_S \
                    and now - retried_at >= _CLEANUP_RETRY_EVERY_S:
                retried_at = now
                await self._retry_crd_cleanup(ownership, ref, path, failure)
            if now > deadline:
                return await self._still_there(ref, path, timeout)
            if watched is not None:  # bounded: a wake-up lost to a watch restart costs a second, not the timeout
                await watched.next_event(ref, min(deadline - now, 1.0))
            else:
                await asyncio.sleep(exponential(attempt, base=0.02, cap=0.5))
                attempt += 1

    async def _still_there(self, ref: ObjectRef, path: str, timeout: float) -> bool | str:
        """True when the object is gone after all; else why it is still there: its finalizers, and what keeps a
        Namespace or a CRD (their conditions)."""
        live = await self.access.kube.get(path)
        if live is None:
            return True
        finalizers = (live.get("metadata") or {}).get("finalizers") or []
        blocked = f"; finalizers: {', '.join(finalizers)}" if finalizers else ""
        conditions = (live.get("status") or {}).get("conditions") or []
        if ref.kind == "Namespace":
            blocked += "".join(f"; {c.get('message')}" for c in conditions
                               if c.get("status") == "True" and c.get("message"))
        elif ref.kind == "CustomResourceDefinition":
            blocked += "".join(f"; {c.get('reason')}: {c.get('message')}" for c in conditions
                               if c.get("type") == "Terminating" and c.get("status") == "True")
        return f"still terminating after {timeout:.0f}s{blocked}"

    async def _retry_crd_cleanup(self, ownership: Ownership, ref: ObjectRef, path: str, message: str) -> None:
        """Make kube-apiserver retry the cleanup of a CRD being deleted, which it failed and then left alone.

        The CRD finalizer retries a failed cleanup (say "storage is (re)initializing", seen on CRDs deleted
        seconds after they were created) at once; that retry can read a cached copy one version behind, take the
        conflict for someone else's change and drop the CRD, expecting the change to queue it again. It does not:
        the finalizer ignores changes of the Terminating condition alone (its own), so the CRD waits for its
        informer's resync, every 5 minutes (k8s.io/apiextensions-apiserver v0.36, pkg/controller/finalizer).
        Any other change queues it: the owner's touch (:meth:`Ownership.touch_patch`).
        """
        log.info("%s: kube-apiserver could not delete the objects of this CRD (%s) and will not retry for minutes; "
                 "asking it to retry now", ref, message)
        try:
            await self.access.kube.request("PATCH", path, content_type=MERGE_PATCH, accept=ONE_METADATA_ONLY,
                                           body=ownership.touch_patch())
        except KubeApiError as error:
            if error.status != 404:  # gone meanwhile: nothing to retry
                log.warning("%s: could not ask kube-apiserver to retry its cleanup: %s", ref,
                            self.access.describe(error))
