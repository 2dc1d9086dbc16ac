"""Removing an owner's objects: prune (what is no longer desired) and teardown (everything, waiting until gone).

:class:`Removal` goes in teardown waves (see :mod:`ordering`). Each object is deleted only if it is the owner's
(the delete carries the uid of the object judged deletable, and the resourceVersion where the watch cache
answered instead of a read, so an object replaced meanwhile is never deleted), released if the owner adopted it
or a person took it over, and left alone otherwise. Aggregated ClusterRoles go before the roles they draw from.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from kfdef_operator.ssa import aggregation, ordering
from kfdef_operator.ssa.access import (
    MERGE_PATCH,
    METADATA_ONLY,
    ONE_METADATA_ONLY,
    ApiAccess,
    delete_body,
    dry_run_params,
)
from kfdef_operator.ssa.changeset import Action, Change, ChangeSet, Progress
from kfdef_operator.ssa.claims import Claim, Ownership
from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.ssa.discovery import UnknownKind
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.waits import Waits

log = logging.getLogger(__name__)


#: Custom resources per listing request when the teardown looks for those that still need a controller.
_LIST_PAGE = 500


@dataclass
class TeardownResult:
    changes: ChangeSet = field(default_factory=ChangeSet)
    remaining: list[tuple[ObjectRef, str]] = field(default_factory=list)  # (object, why it is still there)

    @property
    def done(self) -> bool:
        return not self.remaining


def _waves(objects: Mapping[ObjectRef, str],
           crds_waiting: Collection[ObjectRef] | None = None) -> list[list[tuple[ObjectRef, str]]]:
    """Teardown waves of ``objects``; the CRDs not in ``crds_waiting`` join the last wave (None: every CRD waits)."""
    return ordering.teardown_waves(list(objects.items()), lambda item: item[0].kind,
                                   is_custom=lambda item: ordering.is_custom_group(item[0].group),
                                   crd_waits=lambda item: crds_waiting is None or item[0] in crds_waiting)


def _is_crd(ref: ObjectRef) -> bool:
    return ref.kind == "CustomResourceDefinition"


class Removal:
    """Prunes and tears down objects through ``access``, waiting for deleted ones with ``waits``."""

    def __init__(self, access: ApiAccess, waits: Waits) -> None:
        self.access = access
        self.waits = waits

    async def prune(self, ownership: Ownership, stale: Mapping[ObjectRef, str], *, dry_run: bool = False) -> ChangeSet:
        """Remove objects no longer desired (``{ref: version}``), in teardown order, without waiting.

        ``dry_run``: the deletes and releases are server-side dry runs.
        """
        changes = ChangeSet()
        for wave in _waves(stale):
            answers = await self._remove_wave(ownership, wave, dry_run)
            changes.extend(answer if isinstance(answer, Change) else self._failed(ref, answer)
                           for (ref, _), answer in zip(wave, answers, strict=True))
        return changes

    async def teardown(self, ownership: Ownership, inventory: Mapping[ObjectRef, str], *, wave_timeout: float = 60.0,
                       progress: Progress | None = None) -> TeardownResult:
        """Delete (or release) everything in the inventory, wave by wave, waiting until each wave is gone.

        Which CRDs wait for a wave of their own, before the stack's controllers go, is decided per CRD when their
        turn comes, from their custom resources left once the stack's own are gone (:meth:`_crds_awaiting`).
        """
        result = TeardownResult()
        left = dict(inventory)
        crds_waiting: set[ObjectRef] | None = None
        while left:
            wave = _waves(left, crds_waiting)[0]
            if crds_waiting is None and any(_is_crd(ref) for ref, _ in wave):
                asked = time.monotonic()
                crds_waiting = await self._crds_awaiting([ref for ref, _ in wave if _is_crd(ref)])
                log.info("%s: teardown: %d of %d CRDs go with the Namespaces (no custom resource of theirs holds a "
                         "finalizer; listed in %.2f s)", ownership, len(wave) - len(crds_waiting), len(wave),
                         time.monotonic() - asked)
                wave = _waves(left, crds_waiting)[0]
            for ref, _ in wave:
                del left[ref]
            wave_started = time.monotonic()
            answers = await self._remove_wave(ownership, wave)
            sent_s = time.monotonic() - wave_started
            pending: list[tuple[ObjectRef, str]] = []
            for (ref, version), answer in zip(wave, answers, strict=True):
                change = answer if isinstance(answer, Change) else self._failed(ref, answer)
                if change.action is Action.FAILED:
                    result.remaining.append((ref, f"delete failed: {change.message}"))
                elif change.action is Action.DELETED:
                    pending.append((ref, version))
                else:
                    result.changes.extend([change])
            gone = await self.access.gather([self.waits.gone(ownership, ref, version, wave_timeout)
                                             for ref, version in pending])
            for (ref, _), waited in zip(pending, gone, strict=True):
                if waited is True:
                    result.changes.extend([Change(ref, Action.DELETED)])
                else:
                    result.remaining.append((ref, waited if isinstance(waited, str) else f"still there: {waited}"))
            log.info("%s: teardown wave of %d object(s) (%s): deletes sent in %.2f s, waited on until %.2f s",
                     ownership, len(wave), ", ".join(sorted({ref.kind for ref, _ in wave})), sent_s,
                     time.monotonic() - wave_started)
            if progress is not None:
                await progress("teardown", len(inventory) - len(left), len(inventory))
        return result

    async def _crds_awaiting(self, crds: list[ObjectRef]) -> set[ObjectRef]:
        """The CRDs whose live custom resources may still need a controller (:func:`ordering.awaits_controllers`),
        from a metadata-only listing of each kind; so does a CRD whose custom resources could not be listed, or
        that serves nothing known (the CRDs' wave before the controllers' is the safe order, only slower)."""
        discovery = self.access.discovery
        if any(discovery.served_by_crd(ref.name) is None for ref in crds):
            await discovery.refresh()  # established by someone else since discovery was read

        async def awaits(ref: ObjectRef) -> bool:
            resource = discovery.served_by_crd(ref.name)
            if resource is None:
                return True
            # In pages, which kube-apiserver reads from etcd: a whole listing of a kind nobody read since it started
            # waits for that kind's watch cache (answered 429, Retry-After 1 s), most of the stack's kinds here.
            params = {"limit": str(_LIST_PAGE)}
            while True:
                page = await self.access.kube.request("GET", resource.collection_path(), params=params,
                                                      accept=METADATA_ONLY)
                if ordering.awaits_controllers(page.get("items") or []):
                    return True
                next_page = (page.get("metadata") or {}).get("continue")
                if not next_page:
                    return False
                params["continue"] = next_page

        answers = await self.access.gather([awaits(ref) for ref in crds])
        return {ref for ref, answer in zip(crds, answers, strict=True) if answer is not False}

    def _failed(self, ref: ObjectRef, error: BaseException) -> Change:
        message = self.access.describe(error) if isinstance(error, KubeApiError) else str(error)
        return Change(ref, Action.FAILED, message)

    async def _remove_wave(self, ownership: Ownership, wave: list[tuple[ObjectRef, str]],
                           dry_run: bool = False) -> list[Change | BaseException]:
        """Remove one wave; answers in the wave's order (``dry_run``: server-side dry runs).

        Aggregated ClusterRoles go first, one at a time, each before the roles
        it aggregates (:mod:`kfdef_operator.ssa.aggregation`): removed together
        with them, kube-controller-manager could re-create it.
        """
        answers: dict[ObjectRef, Change | BaseException] = {}
        for ref, version in await self._aggregated_first(wave):
            try:
                answers[ref] = await self._remove(ownership, ref, version, dry_run)
            except Exception as error:  # reported like any failed removal
                answers[ref] = error
        rest = [(ref, version) for ref, version in wave if ref not in answers]
        removed = await self.access.gather([self._remove(ownership, ref, version, dry_run) for ref, version in rest])
        for (ref, _), answer in zip(rest, removed, strict=True):
            answers[ref] = answer
        return [answers[ref] for ref, _ in wave]

    async def _aggregated_first(self, wave: list[tuple[ObjectRef, str]]) -> list[tuple[ObjectRef, str]]:
        """The wave's aggregated ClusterRoles in deletion order, read from one listing of the live ClusterRoles
        (each read alone by an identity that may not list them; one it may not read is left to its removal)."""
        roles = {ref.name: (ref, version) for ref, version in wave
                 if ref.group == aggregation.RBAC_GROUP and ref.kind == "ClusterRole"}
        if not roles:
            return []
        kube = self.access.kube
        resource = await self.access.discovery.resource_for_ref(*next(iter(roles.values())))
        try:
            listing = await kube.request("GET", resource.collection_path())
            live = [item for item in listing.get("items") or [] if (item.get("metadata") or {}).get("name") in roles]
        except KubeApiError as error:
            if error.status != 403:
                raise
            read = await self.access.gather([kube.get(resource.path_of(ref)) for ref, _ in roles.values()])
            live = [item for item in read if isinstance(item, dict)]
        for item in live:  # list items carry no apiVersion/kind
            item.update(apiVersion=resource.api_version, kind=resource.kind)
        return [roles[name] for name in aggregation.deletion_order(live)]

    async def _remove(self, ownership: Ownership, ref: ObjectRef, version: str, dry_run: bool = False) -> Change:
        """Delete one object the owner created, or release one it adopted or a person took over.

        An object the watch cache shows as the owner's is deleted without reading it first, on the condition that it
        is still the very version the cache holds (uid and resourceVersion preconditions); anything else, or an
        object changed since, is read (its metadata only) and judged on what the server says.
        """
        kube = self.access.kube
        try:
            resource = await self.access.discovery.resource_for_ref(ref, version)
        except UnknownKind:
            return Change(ref, Action.GONE, "kind no longer served")
        path = resource.path_of(ref)
        cached = self.access.live.get(ref) if self.access.live is not None and not dry_run else None
        if cached is not None and ownership.claim(cached.meta) is Claim.OURS and not ownership.opted_out(cached.meta):
            try:
                await kube.request("DELETE", path, body=delete_body(cached.uid, cached.resource_version),
                                   accept=ONE_METADATA_ONLY)
                return Change(ref, Action.DELETED)
            except KubeApiError as error:
                if error.status == 404:
                    return Change(ref, Action.GONE)
                if error.status != 409:  # 409: changed since the cache saw it: read it and judge again
                    raise
        for _ in range(3):
            live = await kube.get(path, accept=ONE_METADATA_ONLY)
            if live is None:
                return Change(ref, Action.GONE)
            meta = live.get("metadata") or {}
            claim = ownership.claim(meta)
            if claim is Claim.ADOPTED or (claim is Claim.OURS and ownership.opted_out(meta)):
                await kube.request("PATCH", path, body=ownership.release_patch(), params=dry_run_params(dry_run),
                                   content_type=MERGE_PATCH)
                why = "existed before" if claim is Claim.ADOPTED else "reconcile disabled on the object"
                return Change(ref, Action.RELEASED, f"{why}; kept")
            if claim is not Claim.OURS:
                return Change(ref, Action.SKIPPED, f"not owned ({claim.value}); kept")
            if meta.get("deletionTimestamp"):
                return Change(ref, Action.DELETED)
            try:
                await kube.request("DELETE", path, body=delete_body(meta.get("uid")), params=dry_run_params(dry_run),
                                   accept=ONE_METADATA_ONLY)
                return Change(ref, Action.DELETED)
            except KubeApiError as error:
                if error.status == 404:
                    return Change(ref, Action.GONE)
                if error.status != 409:  # 409: replaced since the GET (uid precondition): judge the new one
                    raise
        return Change(ref, Action.FAILED, "replaced by another object again and again while being deleted; kept")
