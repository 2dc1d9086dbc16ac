"""A CRD's stored versions migrated before the CRD is applied without them, as kube-storage-version-migrator does.

:meth:`StoredVersionMigration.migrate` runs when the API server refused a CRD for dropping a version still in its
``status.storedVersions`` (:func:`~kfdef_operator.ssa.storedversions.is_stored_version_refusal`), with the plan of
:func:`~kfdef_operator.ssa.storedversions.plan_migration`:

1. the bridge CRD is applied: the versions dropped stay served, no longer storage, beside the rendered ones;
2. it waits until discovery shows the kind's ``storageVersionHash`` of the rendered storage version: the API server
   then stores every write at that version;
3. every object is listed at the storage version and rewritten by an update of the object exactly as read, which
   the API server encodes at its storage version (kube-storage-version-migrator's way; checked against etcd: an
   empty merge patch does the same, a write that changes nothing at the same version writes nothing), its
   ``managedFields`` entries recorded at a dropped version moved to the storage version (else, once the version
   goes, every write to the object fails: the API server cannot read those entries). An object
   written by someone else since it was listed (a conflict) is stored at the new version already; one deleted
   meanwhile needs nothing;
4. once every object is rewritten, ``status.storedVersions`` is trimmed to the storage version, with the CRD's
   resourceVersion as precondition.

The caller then applies the CRD as rendered. Objects are never deleted, nor changed in what they hold: one the
storage version refuses (422: kube-apiserver's validation ratcheting lets most unchanged invalid values through,
not a required field missing under ``x-kubernetes-preserve-unknown-fields``), and one whose fields the storage
version's schema would drop (:func:`~kfdef_operator.ssa.storedversions.lost_fields`, which the API server would
do silently), are left as they are. They stop this CRD's migration alone: it stays as the bridge left it, every
object readable, and the outcome names how many objects stopped it and the first one's reason.

A dry run only counts the objects to migrate.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kfdef_operator.api.types import JSON
from kfdef_operator.backoff import exponential
from kfdef_operator.ssa.access import MERGE_PATCH, ApiAccess
from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.live import OwnWrites
from kfdef_operator.ssa.storedversions import (
    MigrationPlan,
    NotMigratable,
    lost_fields,
    managed_fields_at_storage,
    plan_migration,
)
from kfdef_operator.ssa.waits import until_served

log = logging.getLogger(__name__)

#: Applies an object for a field manager: (live object, created, fields dropped) (:meth:`Applier.server_side_apply`).
Apply = Callable[[ObjectRef, JSON, Resource, str], Awaitable[tuple[JSON, bool, list[str]]]]

#: How a dry run's note of a CRD whose stored versions an apply would migrate begins.
MIGRATE_PREVIEW = "would migrate the "
_PAGE = 500
_ATTEMPTS = 3  # to trim storedVersions while the CRD's status changes under it


class Result(enum.Enum):
    """How a migration ended."""

    MIGRATED = "migrated"    # every object rewritten and storedVersions trimmed: apply the CRD as rendered
    PREVIEWED = "previewed"  # a dry run: what would be migrated
    REFUSED = "refused"      # objects the storage version refuses, or would strip: unchanged, refused again
    FAILED = "failed"        # a request failed; a later run may succeed


@dataclass(frozen=True)
class MigrationOutcome:
    """How a migration ended, for a person (``note``); the CRD as its last write left it; the failed request."""

    result: Result
    note: str
    crd: JSON | None = None
    error: KubeApiError | None = None


class _Interrupted(Exception):
    """The migration cannot go on now, for a reason besides a refused request (the CRD changed under it)."""


@dataclass(frozen=True)
class _Stopped:
    """An object that was not rewritten: whether it is for what it holds (sending it again cannot help), and why."""

    name: str
    for_content: bool
    why: str


class StoredVersionMigration:
    """Migrates stored versions through ``access``; the bridge CRD is applied with ``apply`` (which records the
    write), the trim recorded in ``own_writes``; the new storage version must be in use within ``timeout``."""

    def __init__(self, access: ApiAccess, apply: Apply, own_writes: OwnWrites | None = None, *,
                 timeout: float = 60.0) -> None:
        self.access = access
        self.apply = apply
        self.own_writes = own_writes
        self.timeout = timeout

    async def migrate(self, ref: ObjectRef, rendered: JSON, stamp: Callable[[JSON], JSON], resource: Resource,
                      field_manager: str, *, dry_run: bool = False) -> MigrationOutcome:
        """Migrate the live CRD ``ref`` so that ``rendered`` (unstamped; ``stamp`` stamps a CRD) can be applied."""
        kube = self.access.kube
        path = resource.path_of(ref)
        try:
            live = await kube.get(path) or {}
            plan = plan_migration(rendered, live)
            if plan is not None and dry_run:
                return await self._preview(plan, live)
        except KubeApiError as error:
            return MigrationOutcome(Result.FAILED, "stored versions not migrated: the CRD or its objects could not "
                                                   "be read", error=error)
        except NotMigratable as error:
            return MigrationOutcome(Result.REFUSED, f"stored versions not migrated: {error}")
        if plan is None:  # storedVersions changed meanwhile: the CRD may be applied as it is
            return MigrationOutcome(Result.MIGRATED, "")
        log.info("%s: migrating the objects stored at %s to %s before dropping those versions", ref,
                 ", ".join(plan.dropped), plan.storage)
        try:
            bridge, _, _ = await self.apply(ref, stamp(plan.bridge), resource, field_manager)
        except KubeApiError as error:
            return MigrationOutcome(Result.FAILED, f"stored versions not migrated: the CRD with "
                                                   f"{', '.join(plan.dropped)} kept served beside {plan.storage} was "
                                                   "not applied", error=error)
        try:
            await self._storage_in_use(plan)
            stopped, total = await self._rewrite_all(plan)
        except (KubeApiError, _Interrupted) as error:
            return self._failed(plan, bridge, error)
        if stopped:
            return self._stopped(plan, bridge, stopped, total)
        try:
            trimmed = await self._trim(ref, path, plan)
        except (KubeApiError, _Interrupted) as error:
            return self._failed(plan, bridge, error)
        note = (f"stored versions migrated: {_objects(total, plan.kind)} stored at {', '.join(plan.dropped)} "
                f"rewritten at {plan.storage}, storedVersions trimmed to {plan.storage}")
        log.info("%s: %s", ref, note)
        return MigrationOutcome(Result.MIGRATED, note, crd=trimmed)

    async def _preview(self, plan: MigrationPlan, live: JSON) -> MigrationOutcome:
        """What a migration would do: the objects are counted at a version the live CRD serves."""
        served = [v.get("name") for v in (live.get("spec") or {}).get("versions") or [] if v.get("served")]
        counted = "objects"
        if served:
            counted = _objects(len(await self._list(plan.resource(str(served[0])).collection_path())), plan.kind)
        return MigrationOutcome(Result.PREVIEWED, f"{MIGRATE_PREVIEW}{counted} stored at {', '.join(plan.dropped)} "
                                                  f"to {plan.storage}, trim storedVersions to {plan.storage}, then "
                                                  "apply the CRD as rendered")

    async def _storage_in_use(self, plan: MigrationPlan) -> None:
        """Wait until discovery says the API server stores the kind at the new storage version (its
        ``storageVersionHash``): a rewrite before that could store an object at the old one again."""
        deadline = time.monotonic() + self.timeout
        attempt = 0
        while True:
            listing = await self.access.kube.get(f"/apis/{plan.group}/{plan.storage}")
            hashes = {r.get("name"): r.get("storageVersionHash") for r in (listing or {}).get("resources") or []}
            if hashes.get(plan.plural) == plan.storage_version_hash:
                # In discovery, the storage version may not be served yet: the rewrite lists it.
                try:
                    await until_served(self.access, plan.resource(plan.storage), deadline)
                except TimeoutError as error:
                    raise _Interrupted(str(error)) from None
                return
            if time.monotonic() > deadline:
                raise _Interrupted(f"the API server did not start storing {plan.kind} at {plan.storage} within "
                                   f"{self.timeout:.0f}s")
            await asyncio.sleep(exponential(attempt, base=0.02, cap=0.5))
            attempt += 1

    async def _list(self, collection: str) -> list[JSON]:
        """Every object of a collection, page by page."""
        items: list[JSON] = []
        token: str | None = None
        while True:
            page = await self.access.kube.request("GET", collection, params={"limit": _PAGE, "continue": token})
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    async def _rewrite_all(self, plan: MigrationPlan) -> tuple[list[_Stopped], int]:
        """Rewrite every object at the storage version; the objects that were not, and how many there were."""
        objects = await self._list(plan.resource(plan.storage).collection_path())
        earlier: dict[str, list[JSON]] = {}
        if plan.converted_as_is:  # how each object reads at the versions it may be stored at
            for version in plan.dropped:
                for obj in await self._list(plan.resource(version).collection_path()):
                    earlier.setdefault(_uid(obj), []).append(obj)
        results = await self.access.gather([self._rewrite(plan, obj, earlier.get(_uid(obj), []))
                                            for obj in objects])
        stopped = [result if isinstance(result, _Stopped) or result is None
                   else _Stopped(_name(obj), False, self.access.describe(result))
                   for obj, result in zip(objects, results, strict=True)]
        return [result for result in stopped if result is not None], len(objects)

    async def _rewrite(self, plan: MigrationPlan, obj: JSON, earlier: list[JSON]) -> _Stopped | None:
        """Rewrite one object as read at the storage version; None when done (or when it is gone)."""
        for old in earlier:
            lost = lost_fields(old, obj)
            if lost:
                return _Stopped(_name(obj), True, f"{plan.storage}'s schema does not declare {', '.join(lost[:3])}"
                                                  f"{' ...' if len(lost) > 3 else ''}, which rewriting it would drop")
        meta = obj.get("metadata") or {}
        resource = plan.resource(plan.storage)
        path = resource.object_path(meta.get("name", ""), meta.get("namespace"))
        body = {**obj, "apiVersion": resource.api_version, "kind": plan.kind}  # which a list's items may lack
        managed = managed_fields_at_storage(meta.get("managedFields") or [], plan)
        if managed is not None:  # else no write to it could succeed once the dropped versions go
            body["metadata"] = {**meta, "managedFields": managed}
        try:
            await self.access.kube.request("PUT", path, body=body)
        except KubeApiError as error:
            # 404: deleted meanwhile, nothing stored any more. 409: written since it was listed, which was after the
            # API server began storing at the new version: stored at it already.
            if error.status not in (404, 409):
                return _Stopped(_name(obj), error.status == 422, self.access.describe(error))
        return None

    async def _trim(self, ref: ObjectRef, path: str, plan: MigrationPlan) -> JSON:
        """``status.storedVersions`` set to the storage version alone, unless the CRD's storage changed meanwhile."""
        for _ in range(_ATTEMPTS):
            crd = await self.access.kube.get(path)
            storage = [v.get("name") for v in ((crd or {}).get("spec") or {}).get("versions") or [] if v.get("storage")]
            if crd is None or storage != [plan.storage]:
                raise _Interrupted(f"the CRD was {'deleted' if crd is None else 'given another storage version'} "
                                   "during the migration; storedVersions left as they are")
            patch = {"metadata": {"resourceVersion": crd["metadata"]["resourceVersion"]},
                     "status": {"storedVersions": [plan.storage]}}
            try:
                answer = await self.access.kube.request("PATCH", f"{path}/status", content_type=MERGE_PATCH,
                                                        body=patch)
            except KubeApiError as error:
                if error.status != 409:
                    raise
                continue  # the CRD changed (its conditions): read again
            if self.own_writes is not None:
                self.own_writes.wrote(ref, answer)
            return answer
        raise _Interrupted(f"the CRD changed at each of {_ATTEMPTS} attempts to trim its storedVersions")

    def _failed(self, plan: MigrationPlan, bridge: JSON, error: KubeApiError | _Interrupted) -> MigrationOutcome:
        note = (f"stored versions not migrated (the CRD keeps {', '.join(plan.dropped)} served beside "
                f"{plan.storage}; retried)")
        if isinstance(error, KubeApiError):
            return MigrationOutcome(Result.FAILED, note, crd=bridge, error=error)
        return MigrationOutcome(Result.FAILED, f"{note}: {error}", crd=bridge)

    def _stopped(self, plan: MigrationPlan, bridge: JSON, stopped: list[_Stopped], total: int) -> MigrationOutcome:
        first = stopped[0]
        refused = all(s.for_content for s in stopped)
        note = (f"stored versions not migrated: {len(stopped)} of {_objects(total, plan.kind)} "
                f"{'refused by' if refused else 'not rewritten at'} {plan.storage} (first: {first.name}: "
                f"{first.why}); the CRD keeps {', '.join(plan.dropped)} served beside {plan.storage} until they are "
                f"changed to fit {plan.storage} or removed by hand (custom resources are never deleted to make a CRD "
                "fit)")
        log.warning("%s: %s", plan.name, note)
        return MigrationOutcome(Result.REFUSED if refused else Result.FAILED, note, crd=bridge)


def _objects(count: int, kind: str) -> str:
    return f"{count} {kind} object{'' if count == 1 else 's'}"


def _uid(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def _name(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name"))
