"""Applying one object, or one stage of objects at once, for an owner.

:class:`Applier` decides, per object, from what is known of its live copy:

- an object whose live copy carries the owner's stamps and the same desired
  state is left alone: re-applying an unchanged set writes nothing;
- an object held by another owner is a conflict: reported, never touched
  (unless the owner its stamp names is known not to exist: then it is adopted);
- an object a person took out of the owner's hands (:meth:`Ownership.opted_out`)
  is skipped;
- an object that exists without any owner's stamp is adopted: applied, and
  released rather than deleted later; so is one that was absent when looked
  up but existed when applied (someone else created it meanwhile);
- an adopted object's fields that other managers set and the owner does not
  apply are judged (:mod:`~kfdef_operator.ssa.foreign`) and named in its
  :class:`Change`; with :attr:`ApplyOptions.force` they are removed, leaving
  exactly what the owner applies;
- everything else is server-side applied with ``force`` (the owner is a
  controller: the fields it declares are its own; fields it does not declare
  stay with whoever set them);
- an apply refused because an immutable field changed (as
  :mod:`~kfdef_operator.ssa.immutable` recognises it) is retried as delete and
  re-create only for objects the owner created, and only when that destroys no
  data (:func:`~kfdef_operator.ssa.immutable.data_at_stake`: a StatefulSet
  whose claims are retained destroys none) unless :attr:`ApplyOptions.force`
  says otherwise; else reported;
- a CRD refused because it drops a version objects may still be stored at has
  those objects migrated first (:mod:`~kfdef_operator.ssa.migration`), then is
  applied; objects that cannot be migrated stop that CRD alone, never deleted;
- an object refused for its content (:func:`is_content_refusal`) is reported
  as such (:func:`~kfdef_operator.ssa.changeset.refusal`), and one whose
  refusal was reported already (:attr:`ApplyOptions.settled`) is not sent again.

Which objects it may write at all is :func:`~kfdef_operator.ssa.claims.left_alone`'s rule, which a heal
(:mod:`~kfdef_operator.ssa.restore`) shares. It also owns the :class:`ApplyOptions`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa import ordering
from kfdef_operator.ssa.access import CRD_PATH, JSON_PATCH, ONE_METADATA_ONLY, ApiAccess, delete_body, dry_run_params
from kfdef_operator.ssa.changeset import Action, Change, kept_answer, refusal
from kfdef_operator.ssa.claims import Claim, Ownership, left_alone
from kfdef_operator.ssa.client import KubeApiError, KubeClient, describe_api_error
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.ssa.fieldsets import FieldPath
from kfdef_operator.ssa.foreign import (
    Foreign,
    changed_by_removal,
    described,
    held_by_others,
    removal_patch,
    spelled,
    takeover_patch,
)
from kfdef_operator.ssa.immutable import STATELESS_KINDS, data_at_stake, is_immutable_error
from kfdef_operator.ssa.inventory import ObjectRef, ref_of
from kfdef_operator.ssa.live import OwnWrites
from kfdef_operator.ssa.lookup import Known, LiveLookup
from kfdef_operator.ssa.migration import Result, StoredVersionMigration
from kfdef_operator.ssa.schema import prune_custom_resource, version_schema
from kfdef_operator.ssa.storedversions import is_stored_version_refusal
from kfdef_operator.ssa.waits import Waits

log = logging.getLogger(__name__)

#: What a dry run says of an object an apply would delete and create again (an immutable field changed).
RECREATE_PREVIEW = "would be deleted and re-created: an immutable field changed"

FORGED_STAMP_NOTE = "carried the ownership stamp of a KfDef that does not exist"
"""Starts the note of an object adopted although another KfDef's stamp was on it (that KfDef does not exist)."""


@dataclass(frozen=True)
class ApplyOptions:
    """How far an apply may go beyond a plain server-side apply."""

    #: Re-create objects of any kind (data-holding ones included) whose immutable fields changed (Flux's
    #: ``spec.force``). Without it only kinds whose re-creation destroys no data are
    #: (:func:`~kfdef_operator.ssa.immutable.data_at_stake`). Never objects the owner did not create. Also: remove
    #: from adopted objects the fields other managers set that the owner does not apply.
    force: bool = False
    #: Objects that are updated when present but never created when absent, with the reason (run-once objects
    #: that completed and were removed, such as Jobs with a TTL).
    keep_absent: Mapping[ObjectRef, str] = field(default_factory=dict)
    #: Take every decision but write nothing: applies are server-side dry runs (also of objects whose digest
    #: says they are unchanged, so that drift shows), nothing is deleted or re-created, CRDs are not waited for,
    #: and custom resources of CRDs not installed yet are reported as created without being checked.
    dry_run: bool = False
    #: Objects whose refusal for their content was reported already and that nothing could have changed since,
    #: with the message reported: reported failed again, not sent.
    settled: Mapping[ObjectRef, str] = field(default_factory=dict)


#: A 500 that is no trouble of the server's: server-side apply cannot build a typed patch from the object (a value
#: of the wrong type for a known field).
TYPED_PATCH_REFUSAL = "failed to create typed patch object"
#: How a refusal by an admission webhook or a ValidatingAdmissionPolicy reads: a policy, which may change.
_POLICY_DENIALS = ("denied the request", "denied request")


def is_content_refusal(error: KubeApiError) -> bool:
    """Whether the API server refused an object for what it holds, so that sending it again unchanged cannot help.

    Invalid (422), malformed or too large (400, 413), or a value of the wrong type for a known field (the 500
    :data:`TYPED_PATCH_REFUSAL`). Not a denial by admission policy (the policy may change), and none of the answers
    that depend on something besides the object: a conflict (409), throttling (429), the identity's permissions
    (401, 403), a missing namespace (404), a timeout or any other server error (a webhook that cannot be called).
    """
    if error.status == 500:
        return TYPED_PATCH_REFUSAL in error.message
    return error.status in (400, 413, 422) and not any(denial in error.message for denial in _POLICY_DENIALS)


class Applier:
    """Applies objects through ``access``; ``owners`` reads whether an owner named by a stamp exists; the versions
    its applies produce are noted in ``own_writes``."""

    def __init__(self, access: ApiAccess, lookup: LiveLookup, waits: Waits, owners: KubeClient,
                 own_writes: OwnWrites | None = None) -> None:
        self.access = access
        self.lookup = lookup
        self.waits = waits
        self.owners = owners
        self.own_writes = own_writes
        self.migration = StoredVersionMigration(access, self.server_side_apply, own_writes)
        #: Adopted objects holding fields of other managers: the resourceVersion judged last, and what was found.
        self._judged: dict[ObjectRef, tuple[str, tuple[Foreign, ...]]] = {}

    async def apply_one(self, ownership: Ownership, obj: JSON, resource: Resource, live_meta: JSON | None,
                        options: ApplyOptions = ApplyOptions()) -> Change:
        """Apply one normalised object given what is known of its live copy (None: absent)."""
        ref = ref_of(obj)
        if ref in options.settled:
            return Change(ref, Action.FAILED, options.settled[ref])
        claim = ownership.claim(live_meta)
        unclaimed_note = ""
        if claim is Claim.FOREIGN and live_meta is not None and await self._holder_missing(ownership, live_meta):
            claim = Claim.UNCLAIMED
            unclaimed_note = (f"{FORGED_STAMP_NOTE}: it named {ownership.holder(live_meta)}, which does not exist; "
                              "adopted (kept at prune and teardown)")
        left = left_alone(ownership, ref, claim, live_meta, adopt=True, keep_absent=options.keep_absent.get(ref))
        if left is not None:
            return left
        stamped = ownership.stamp(obj, namespaced=resource.namespaced,
                                  adopted=claim in (Claim.UNCLAIMED, Claim.ADOPTED))
        if (live_meta is not None and claim in (Claim.OURS, Claim.ADOPTED) and not live_meta.get("deletionTimestamp")
                and not options.dry_run and ownership.unchanged(live_meta, stamped)):
            if claim is Claim.ADOPTED and self._may_hold_foreign(ref, live_meta, ownership.field_manager):
                return await self._judge_foreign(ownership, ref, stamped, resource, None,
                                                 Change(ref, Action.UNCHANGED), options)
            return Change(ref, Action.UNCHANGED)
        try:
            live, created, dropped = await self.server_side_apply(ref, stamped, resource, ownership.field_manager,
                                                                  dry_run=options.dry_run)
            if claim is Claim.ABSENT and not created:
                # Created by someone else since the lookup: theirs, so adopted (kept at prune and teardown).
                log.info("%s appeared between lookup and apply: adopting it", ref)
                claim = Claim.UNCLAIMED
                stamped = ownership.stamp(obj, namespaced=resource.namespaced, adopted=True)
                live, created, dropped = await self.server_side_apply(ref, stamped, resource,
                                                                      ownership.field_manager, dry_run=options.dry_run)
        except KubeApiError as error:
            if is_stored_version_refusal(error):
                return await self._migrate_stored_versions(ownership, ref, obj, stamped, resource, claim, options)
            if is_immutable_error(error):
                return await self._recreate(ownership, ref, stamped, resource, claim, live_meta, options, error)
            return self._failure(ref, error)
        action = Action.CREATED if created else (Action.ADOPTED if claim is Claim.UNCLAIMED else Action.CONFIGURED)
        note = f"fields not in the CRD's schema were dropped: {', '.join(dropped[:5])}" if dropped else ""
        note = "; ".join(n for n in (unclaimed_note, note) if n)
        change = Change(ref, action, note, live=live if options.dry_run else kept_answer(live))
        if claim in (Claim.UNCLAIMED, Claim.ADOPTED):
            return await self._judge_foreign(ownership, ref, stamped, resource, live, change, options)
        return change

    def _may_hold_foreign(self, ref: ObjectRef, live_meta: JSON, field_manager: str) -> bool:
        """Whether an adopted object may hold fields of other managers, from its metadata when that has its
        managed fields (a lookup), else from the watch cache's summary (which names them for adopted objects)."""
        if "managedFields" in live_meta:
            return bool(held_by_others({"metadata": live_meta}, field_manager))
        tracked = self.access.live.get(ref) if self.access.live is not None else None
        return tracked is None or bool(tracked.foreign)

    async def _judge_foreign(self, ownership: Ownership, ref: ObjectRef, stamped: JSON, resource: Resource,
                             live: JSON | None, change: Change, options: ApplyOptions) -> Change:
        """``change`` of an adopted object, with the fields other managers set that it keeps and the stack does not
        apply (:mod:`~kfdef_operator.ssa.foreign`); with :attr:`ApplyOptions.force`, those fields removed.

        ``live`` is the object as the apply left it (None: read now, unless the watch cache shows the version
        judged last). Fields that are only the server's defaults (judged by a dry run removing them all) are not
        named, nor removed. When the dry run fails, every field other managers hold is named."""
        if options.dry_run:
            return change
        tracked = self.access.live.get(ref) if live is None and self.access.live is not None else None
        judged = self._judged.get(ref)
        if tracked is not None and judged is not None and judged[0] == tracked.resource_version and not (
                options.force and judged[1]):
            return replace(change, foreign=judged[1])  # the very version judged last: no request
        kube = self.access.kube
        path = resource.path_of(ref)
        try:
            obj = live if live is not None else await kube.get(path)
        except KubeApiError as error:
            log.info("%s: not read, so the fields other managers set on it are not judged: %s", ref,
                     self.access.describe(error))
            return change
        held = held_by_others(obj or {}, ownership.field_manager)
        if obj is None or not held:
            self._judged.pop(ref, None)
            return change
        try:
            without = await kube.request("PATCH", path, body=removal_patch(obj, held), content_type=JSON_PATCH,
                                         params=dry_run_params(True))
            lost = changed_by_removal(obj, without, held)
        except KubeApiError as error:
            log.info("%s: cannot tell which fields of other managers hold the server's defaults (dry run: %s); "
                     "naming them all", ref, self.access.describe(error))
            lost = held
        self._judged[ref] = (str((obj.get("metadata") or {}).get("resourceVersion")), described(lost))
        if not lost:
            return change
        if not options.force:
            return replace(change, foreign=described(lost))
        return await self._take_over(ownership, ref, stamped, resource, obj, lost, change)

    async def _take_over(self, ownership: Ownership, ref: ObjectRef, stamped: JSON, resource: Resource, obj: JSON,
                         lost: dict[str, list[FieldPath]], change: Change) -> Change:
        """Replace the content of an adopted object with exactly ``stamped`` (the owner asked for it): the fields
        of the managers in ``lost`` handed to the owner (:func:`~kfdef_operator.ssa.foreign.takeover_patch`), on
        the condition that they are still the ones read, then ``stamped`` applied again, which removes each of
        those fields it does not declare."""
        kube = self.access.kube
        path = resource.path_of(ref)
        uid = (obj.get("metadata") or {}).get("uid")
        try:
            for _ in range(3):
                patch = takeover_patch(obj, ownership.field_manager, lost, api_version=str(obj.get("apiVersion")),
                                       time=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
                try:
                    await kube.request("PATCH", path, body=patch, content_type=JSON_PATCH)
                    break
                except KubeApiError as error:
                    if error.status not in (409, 422):  # 422: a test failed (the object changed since it was read)
                        raise
                current = await kube.get(path)
                if current is None or (current.get("metadata") or {}).get("uid") != uid:
                    return change  # gone or replaced meanwhile: judged again at the next apply
                obj = current
            else:
                return replace(change, action=Action.FAILED, message="its content was not replaced (force): it kept "
                               "changing while the fields of other managers were taken over; retried at the next "
                               "apply", foreign=described(lost))
            live, _, _ = await self.server_side_apply(ref, stamped, resource, ownership.field_manager)
        except KubeApiError as error:
            return replace(change, action=Action.FAILED, foreign=described(lost),
                           message=f"its content was not replaced (force): {self.access.describe(error)}")
        removed = spelled(described(lost))
        log.info("%s: replaced its content with the desired state (force), removing fields of other managers: %s",
                 ref, removed)
        left = held_by_others(live, ownership.field_manager)
        note = f"fields other managers set were removed (force): {removed}"
        return replace(change, action=Action.ADOPTED if change.action is Action.ADOPTED else Action.CONFIGURED,
                       message="; ".join(n for n in (change.message, note) if n), live=kept_answer(live),
                       foreign=described({manager: paths for manager, paths in left.items() if manager in lost}))

    def _failure(self, ref: ObjectRef, error: KubeApiError, context: str = "", live: JSON | None = None) -> Change:
        """The failure of a write the API server refused: reported once when refused for the object's content."""
        why = f"{context}: {self.access.describe(error)}" if context else self.access.describe(error)
        return refusal(ref, why, live) if is_content_refusal(error) else Change(ref, Action.FAILED, why, live=live)

    async def _migrate_stored_versions(self, ownership: Ownership, ref: ObjectRef, obj: JSON, stamped: JSON,
                                       resource: Resource, claim: Claim, options: ApplyOptions) -> Change:
        """A CRD the API server refused for dropping a version objects may be stored at: those objects migrated
        (:meth:`StoredVersionMigration.migrate`), then the CRD applied as rendered."""
        adopted = claim in (Claim.UNCLAIMED, Claim.ADOPTED)
        outcome = await self.migration.migrate(
            ref, obj, lambda crd: ownership.stamp(crd, namespaced=False, adopted=adopted), resource,
            ownership.field_manager, dry_run=options.dry_run)
        left = kept_answer(outcome.crd) if outcome.crd is not None else None
        if outcome.result is Result.PREVIEWED:
            return Change(ref, Action.CONFIGURED, outcome.note)
        if outcome.result is Result.REFUSED:
            return refusal(ref, outcome.note, left)
        if outcome.result is Result.FAILED:
            return (self._failure(ref, outcome.error, outcome.note, left) if outcome.error is not None
                    else Change(ref, Action.FAILED, outcome.note, live=left))
        try:
            live, _, _ = await self.server_side_apply(ref, stamped, resource, ownership.field_manager,
                                                      dry_run=options.dry_run)
        except KubeApiError as error:
            return self._failure(ref, error, outcome.note and f"{outcome.note}; then applying the CRD as rendered",
                                 left)
        action = Action.ADOPTED if claim is Claim.UNCLAIMED else Action.CONFIGURED
        return Change(ref, action, outcome.note, live=live if options.dry_run else kept_answer(live))

    async def _holder_missing(self, ownership: Ownership, live_meta: JSON) -> bool:
        """Whether the owner a stamp names is known not to exist (404). Any other answer (it exists, it may not be
        read, the read failed) keeps the object the holder's."""
        path = ownership.holder_path(live_meta)
        if path is None:
            return False
        try:
            return await self.owners.get(path, accept=ONE_METADATA_ONLY) is None
        except KubeApiError as error:
            log.info("cannot tell whether %s exists (%s); leaving its object alone", ownership.holder(live_meta),
                     describe_api_error(error))
            return False

    async def server_side_apply(self, ref: ObjectRef, desired: JSON, resource: Resource, field_manager: str, *,
                                dry_run: bool = False) -> tuple[JSON, bool, list[str]]:
        """Apply ``desired``; returns (live object, created, fields dropped).

        A custom resource with fields its CRD's structural schema does not
        declare is refused by server-side apply, while ``kubectl create`` or a
        client-side apply would have had them silently pruned. Such an object
        is pruned against the schema the way the server prunes, and applied
        again.
        """
        live, created, dropped = await self._apply_pruning(ref, desired, resource, field_manager, dry_run=dry_run)
        if self.own_writes is not None and not dry_run:
            self.own_writes.wrote(ref, live)
        return live, created, dropped

    async def _apply_pruning(self, ref: ObjectRef, desired: JSON, resource: Resource, field_manager: str, *,
                             dry_run: bool) -> tuple[JSON, bool, list[str]]:
        kube = self.access.kube
        path = resource.path_of(ref)
        try:
            live, created = await kube.apply(path, desired, field_manager=field_manager, dry_run=dry_run)
            return live, created, []
        except KubeApiError as error:
            if "not declared in schema" not in error.message or not ordering.is_custom_group(ref.group):
                raise
            crd = await kube.get(f"{CRD_PATH}/{resource.plural}.{resource.group}")
            pruned, dropped = prune_custom_resource(desired, version_schema(crd or {}, resource.version))
            if not dropped:
                raise
            log.info("%s: dropping fields its CRD does not declare: %s", ref, ", ".join(dropped))
            live, created = await kube.apply(path, pruned, field_manager=field_manager, dry_run=dry_run)
            return live, created, dropped

    async def _recreate(self, ownership: Ownership, ref: ObjectRef, stamped: JSON, resource: Resource, claim: Claim,
                        live_meta: JSON | None, options: ApplyOptions, error: KubeApiError) -> Change:
        # The server's first line says which field; the rest is a diff of the whole spec.
        refused = f"{error.status} {error.reason}: {error.message.splitlines()[0]}; an immutable field changed"
        if claim is not Claim.OURS:
            return refusal(ref, f"{refused}, and the object existed before this stack: it is never deleted or "
                                "re-created by the operator; change it by hand")
        path = resource.path_of(ref)
        # Only an object that may hold data is read, for how it holds it (a StatefulSet's claims).
        at_stake = (None if options.force or ref.kind in STATELESS_KINDS
                    else data_at_stake(ref.kind, await self.access.kube.get(path)))
        if at_stake is not None:
            return refusal(ref, f"{refused}; {at_stake}: re-created only when the owner sets spec.force: true (or "
                                "delete it by hand)")
        if options.dry_run:
            return Change(ref, Action.CREATED, RECREATE_PREVIEW)
        log.info("re-creating %s: an immutable field changed", ref)
        uid = (live_meta or {}).get("uid")
        if uid and self.own_writes is not None:
            self.own_writes.recreating(ref, uid)
        try:
            await self.access.kube.request("DELETE", path, body=delete_body(uid))
        except KubeApiError as delete_error:
            if delete_error.status == 409:
                return Change(ref, Action.FAILED, "re-create: the object was replaced by another one meanwhile; "
                                                  "not deleted, retried at the next reconcile")
            if delete_error.status != 404:
                return Change(ref, Action.FAILED, f"re-create: delete failed: {self.access.describe(delete_error)}")
        gone = await self.waits.gone(ownership, ref, resource.version, timeout=60)
        if gone is not True:
            return Change(ref, Action.FAILED,
                          f"re-create: the old object is {gone}; it will be applied once it is gone")
        try:
            live, _ = await self.access.kube.apply(path, stamped, field_manager=ownership.field_manager)
        except KubeApiError as apply_error:
            return Change(ref, Action.FAILED, f"re-create: apply failed: {self.access.describe(apply_error)}")
        return Change(ref, Action.CREATED, "re-created: an immutable field changed", live=kept_answer(live))

    async def apply_stage(self, ownership: Ownership, items: list[tuple[JSON, Resource]],
                          known: Mapping[ObjectRef, Known] | None = None,
                          options: ApplyOptions = ApplyOptions()) -> list[Change]:
        """Apply objects of one stage concurrently; they are started in the order given.

        ``known`` holds live metadata looked up earlier; objects it does not
        cover are looked up now. An object that could not be read is not applied.
        """
        known = dict(known or {})
        known.update(await self.lookup.lookup([(ref_of(obj), resource) for obj, resource in items
                                               if ref_of(obj) not in known]))

        async def apply(obj: JSON, resource: Resource) -> Change:
            live_meta = known[ref_of(obj)]
            if isinstance(live_meta, KubeApiError):
                return Change(ref_of(obj), Action.FAILED, f"not read, so not applied (applying needs get and "
                                                          f"patch): {self.access.describe(live_meta)}")
            return await self.apply_one(ownership, obj, resource, live_meta, options)

        results = await self.access.gather([apply(obj, resource) for obj, resource in items])
        return [result if isinstance(result, Change) else Change(ref_of(obj), Action.FAILED,
                                                                 self.access.describe(result))
                for (obj, _), result in zip(items, results, strict=True)]
