"""Removing an owner's objects: prune (what is no longer desired) and teardown (everything, waiting until gone).

:class:`Removal` goes in teardown waves (see :mod:`ordering`). Each object is deleted only if it is the owner's
(the delete carries the uid of the object judged deletable, and the resourceVersion where the watch cache
answered instead of a read, so an object replaced meanwhile is never deleted), released if the owner adopted it
or a person took it over, and left alone otherwise. Aggregated ClusterRoles go before the roles they draw from,
and what kube-controller-manager re-creates of them is removed (:mod:`kfdef_operator.ssa.aggregation`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from kfdef_operator.api.types import JSON
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
from kfdef_operator.ssa.holdings import DataGuard, held_note
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.waits import Waits

log = logging.getLogger(__name__)


#: Custom resources per listing request when the teardown looks for those that still need a controller.
_LIST_PAGE = 500
#: How long a level of aggregated ClusterRoles is awaited before the roles they draw from go anyway (a finalizer
#: holds one: the echo removal still covers it).
_LEVEL_GONE_S = 10.0
#: How long after a wave's aggregated ClusterRoles were deleted their echoes (:func:`aggregation.is_echo`) are looked
#: for. kube-controller-manager makes one within milliseconds of seeing the deletes, and reports nothing that would
#: tell when it is done: the window only bounds its lag, and overlaps with the wave's own wait.
_ECHO_WINDOW_S = 3.0


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


def _holds_objects(ref: ObjectRef) -> bool:
    """A Namespace or a CRD: deleting it deletes the objects it holds."""
    return _is_crd(ref) or (ref.group, ref.kind) == ("", "Namespace")


def _is_cluster_role(ref: ObjectRef) -> bool:
    return ref.group == aggregation.RBAC_GROUP and ref.kind == "ClusterRole"


def _deleted(answer: Change | BaseException) -> bool:
    return isinstance(answer, Change) and answer.action is Action.DELETED


@dataclass
class _WaveSent:
    """What removing one wave answered, in the wave's order; the aggregated ClusterRoles it deleted (and when the
    last delete was answered), which kube-controller-manager may re-create (:meth:`Removal._remove_echoes`); and
    those already seen gone (not to be awaited again: an echo at the same name is not them)."""

    answers: list[Change | BaseException]
    aggregated: list[tuple[ObjectRef, str]]
    sent_at: float
    gone: set[ObjectRef]


class Removal:
    """Prunes and tears down objects through ``access``, waiting for deleted ones with ``waits``."""

    def __init__(self, access: ApiAccess, waits: Waits) -> None:
        self.access = access
        self.waits = waits
        self.guard = DataGuard(access)

    async def prune(self, ownership: Ownership, stale: Mapping[ObjectRef, str], *, dry_run: bool = False,
                    force: bool = False) -> ChangeSet:
        """Remove objects no longer desired (``{ref: version}``), in teardown order, without waiting.

        A Namespace or CRD of the owner's that still holds objects the owner did not create is released and kept
        (:attr:`Action.HELD`), not deleted with them (:mod:`~kfdef_operator.ssa.holdings`), unless ``force``.
        ``dry_run``: the deletes and releases are server-side dry runs.
        """
        changes = ChangeSet()
        stale = dict(stale)
        if not force:
            for ref in [ref for ref in stale if _holds_objects(ref)]:
                held = await self._hold(ownership, ref, stale[ref], dry_run)
                if held is not None:
                    del stale[ref]
                    changes.extend([held])
        for wave in _waves(stale):
            sent = await self._remove_wave(ownership, wave, dry_run)
            await self._remove_echoes(ownership, sent)
            changes.extend(answer if isinstance(answer, Change) else self._failed(ref, answer)
                           for (ref, _), answer in zip(wave, sent.answers, strict=True))
        return changes

    async def _hold(self, ownership: Ownership, ref: ObjectRef, version: str, dry_run: bool) -> Change | None:
        """Release ``ref`` (a Namespace or CRD of the owner's) when it holds someone else's objects: the change,
        else None (it goes with the prune, or is not the owner's to delete). A failed listing keeps it too, as a
        failure: the next prune asks again."""
        try:
            resource = await self.access.discovery.resource_for_ref(ref, version)
            path = resource.path_of(ref)
            live = await self.access.kube.get(path, accept=ONE_METADATA_ONLY)
            meta = (live or {}).get("metadata") or {}
            if live is None or ownership.claim(meta) is not Claim.OURS or ownership.opted_out(meta) or \
                    meta.get("deletionTimestamp"):
                return None
            held = await self.guard.holdings(ownership, ref)
            if held is None:
                return None
            await self.access.kube.request("PATCH", path, body=ownership.release_patch(),
                                           params=dry_run_params(dry_run), content_type=MERGE_PATCH)
        except (KubeApiError, UnknownKind) as error:
            return self._failed(ref, error)
        log.warning("%s: %s %s", ownership, ref, held_note(held))
        return Change(ref, Action.HELD, held_note(held))

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
            sent = await self._remove_wave(ownership, wave)
            sent_s = time.monotonic() - wave_started
            pending: list[tuple[ObjectRef, str]] = []
            for (ref, version), answer in zip(wave, sent.answers, strict=True):
                change = answer if isinstance(answer, Change) else self._failed(ref, answer)
                if change.action is Action.FAILED:
                    result.remaining.append((ref, f"delete failed: {change.message}"))
                elif change.action is Action.DELETED and ref not in sent.gone:
                    pending.append((ref, version))
                else:
                    result.changes.extend([change])
            gone = await self.access.gather([self.waits.gone(ownership, ref, version, wave_timeout)
                                             for ref, version in pending])
            await self._remove_echoes(ownership, sent)
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
                           dry_run: bool = False) -> _WaveSent:
        """Remove one wave (``dry_run``: server-side dry runs).

        Aggregated ClusterRoles go in levels (:func:`aggregation.deletion_levels`), each level awaited until gone
        before the next, while the wave's other kinds go; the other ClusterRoles, which they may draw from, go
        last. Only a level's few roles are in flight beside the concurrency bound.
        """
        levels = await self._aggregated_levels(wave)
        answers: dict[ObjectRef, Change | BaseException] = {}
        gone: set[ObjectRef] = set()

        async def remove(items: list[tuple[ObjectRef, str]]) -> None:
            removed = await self.access.gather([self._remove(ownership, ref, version, dry_run)
                                                for ref, version in items])
            answers.update((ref, answer) for (ref, _), answer in zip(items, removed, strict=True))

        async def in_levels() -> None:
            for level in levels:
                await remove(level)
                if not dry_run:
                    deleted = [ref for ref, version in level if _deleted(answers[ref])]
                    waited = await self.access.gather([self.waits.gone(ownership, ref, version, _LEVEL_GONE_S)
                                                       for ref, version in level if ref in deleted])
                    gone.update(ref for ref, answer in zip(deleted, waited, strict=True) if answer is True)

        if levels:
            aggregated = {ref for level in levels for ref, _ in level}
            await asyncio.gather(in_levels(), remove([item for item in wave if not _is_cluster_role(item[0])]))
            await remove([item for item in wave if _is_cluster_role(item[0]) and item[0] not in aggregated])
        else:
            await remove(wave)
        deleted = [] if dry_run else [item for level in levels for item in level if _deleted(answers[item[0]])]
        return _WaveSent([answers[ref] for ref, _ in wave], deleted, time.monotonic(), gone)

    async def _aggregated_levels(self, wave: list[tuple[ObjectRef, str]]) -> list[list[tuple[ObjectRef, str]]]:
        """The wave's aggregated ClusterRoles in deletion levels, as they are live."""
        roles = {ref.name: (ref, version) for ref, version in wave if _is_cluster_role(ref)}
        live = await self._read_cluster_roles(roles.values())
        return [[roles[name] for name in level] for level in aggregation.deletion_levels(live)]

    async def _read_cluster_roles(self, roles: Collection[tuple[ObjectRef, str]]) -> list[JSON]:
        """The live ClusterRoles among ``roles``, from one listing of all (each read alone by an identity that may
        not list them; one it may not read is left out)."""
        if not roles:
            return []
        names = {ref.name for ref, _ in roles}
        kube = self.access.kube
        resource = await self.access.discovery.resource_for_ref(*next(iter(roles)))
        try:
            listing = await kube.request("GET", resource.collection_path())
            live = [item for item in listing.get("items") or [] if (item.get("metadata") or {}).get("name") in names]
        except KubeApiError as error:
            if error.status != 403:
                raise
            read = await self.access.gather([kube.get(resource.path_of(ref)) for ref, _ in roles])
            live = [item for item in read if isinstance(item, dict)]
        for item in live:  # list items carry no apiVersion/kind
            item.update(apiVersion=resource.api_version, kind=resource.kind)
        return live

    async def _remove_echoes(self, ownership: Ownership, sent: _WaveSent) -> None:
        """Delete the echoes kube-controller-manager made of the aggregated ClusterRoles the wave deleted
        (:func:`aggregation.is_echo`), once the echo window has passed since ``sent``, each on the condition that it
        is still the very object read (its uid). Never fails the removal: an echo left is logged, with what to do."""
        if not sent.aggregated:
            return
        await asyncio.sleep(max(0.0, sent.sent_at + _ECHO_WINDOW_S - time.monotonic()))
        try:
            resource = await self.access.discovery.resource_for_ref(*sent.aggregated[0])
            echoes = [role for role in await self._read_cluster_roles(sent.aggregated) if aggregation.is_echo(role)]
            answers = await self.access.gather([
                self.access.kube.request("DELETE", resource.object_path(role["metadata"]["name"]),
                                         body=delete_body(role["metadata"]["uid"]), accept=ONE_METADATA_ONLY)
                for role in echoes])
        except (KubeApiError, UnknownKind) as error:
            log.warning("%s: could not look for ClusterRoles that kube-controller-manager re-created after their "
                        "deletion (%s); any of %s still there without an aggregationRule is left over: delete it",
                        ownership, self.access.describe(error), ", ".join(ref.name for ref, _ in sent.aggregated))
            return
        for role, answer in zip(echoes, answers, strict=True):
            name = role["metadata"]["name"]
            if not isinstance(answer, BaseException):
                log.info("%s: ClusterRole %s was re-created by kube-controller-manager's aggregation controller after "
                         "its deletion, holding only rules; deleted it again", ownership, name)
            # 404 or 409: gone, or replaced by someone meanwhile (the uid precondition): no echo to delete any more
            elif not (isinstance(answer, KubeApiError) and answer.status in (404, 409)):
                log.warning("%s: ClusterRole %s was re-created by kube-controller-manager's aggregation controller "
                            "after its deletion, and deleting it again failed (%s): delete it", ownership, name,
                            self.access.describe(answer))

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
