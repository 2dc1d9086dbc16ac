"""One object put back as its owner wants it, after a watch showed it deleted or changed: what a heal sends.

:class:`Restorer` follows the apply's ownership rule (:func:`~kfdef_operator.ssa.claims.left_alone`) without
adopting anything: an object another owner holds, or one someone else created meanwhile, is theirs. Beyond that
rule, a restore differs from an apply (:mod:`~kfdef_operator.ssa.apply`) in what it knows and sends:

- an absent object is created create-only (:meth:`Restorer.create`), so that one appearing between the read and the
  create is never overwritten: it is judged again, like any live object;
- an object without any owner's stamps is still the owner's if it is the very object the owner had
  (``expected_uid``): it lost its stamps, it was not created by someone else;
- what kube-controller-manager's aggregation controller re-created of a deleted aggregated ClusterRole
  (:func:`~kfdef_operator.ssa.aggregation.is_echo`) is deleted, on the condition that it is still that very object,
  and the owner's role is created in its place: left there, the echo aggregates nothing;
- a live object whose digest says it holds the desired state is written only once a server-side dry run shows that
  writing it changes something: the caller's suspicion of drift came from a local comparison, and the server's
  defaults never cause a write.

A request that fails raises :class:`~kfdef_operator.ssa.client.KubeApiError`: whether to wait, report or retry is
the caller's decision (the healer's).
"""

from __future__ import annotations

import logging

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa import aggregation
from kfdef_operator.ssa.access import JSON_PATCH, ApiAccess, delete_body
from kfdef_operator.ssa.apply import Applier
from kfdef_operator.ssa.changeset import Action, Change, kept_answer
from kfdef_operator.ssa.claims import Claim, Ownership, left_alone
from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.ssa.drift import comparable
from kfdef_operator.ssa.inventory import ObjectRef, ref_of

log = logging.getLogger(__name__)

#: How often an object may change hands (created by someone, deleted again) while it is put back, before the restore
#: leaves it to the next apply.
ROUNDS = 3


class Restorer:
    """Puts objects back through ``access``; its applies are ``applier``'s (which notes the versions they wrote)."""

    def __init__(self, access: ApiAccess, applier: Applier) -> None:
        self.access = access
        self.applier = applier

    async def restore(self, ownership: Ownership, obj: JSON, resource: Resource, *, expected_uid: str = "",
                      known_absent: bool = False, keep_absent: str | None = None) -> Change:
        """Put the normalised object ``obj`` back; what was done, or why the object was left as it is.

        The change is CREATED (it was absent), CONFIGURED (its fields re-asserted), UNCHANGED (a dry run shows it
        holds the desired state: its ``live`` is the object read), or that of an object the owner leaves as it is
        (:func:`left_alone`: a CONFLICT, or SKIPPED; ``keep_absent`` says why an absent object stays absent). An
        object that changes hands :data:`ROUNDS` times meanwhile is SKIPPED too, left to the next apply.

        ``expected_uid`` is the uid of the object the owner had (a deletion's), ``known_absent`` that the caller
        saw the object absent (a watch cache): the create is then sent without a read first. A retry reads first:
        what the create finds back more often than not was re-created by an apply meanwhile, and is judged.
        """
        ref = ref_of(obj)
        path = resource.path_of(ref)
        live: JSON | None = None
        for attempt in range(ROUNDS):
            if attempt or not known_absent:
                live = await self.access.kube.get(path)
            meta = None if live is None else live.get("metadata") or {}
            claim = ownership.claim(meta)
            if claim is Claim.UNCLAIMED and expected_uid and (meta or {}).get("uid") == expected_uid:
                claim = Claim.OURS  # the very object the owner had, without its stamps: still the owner's
            elif claim is Claim.UNCLAIMED and live is not None and aggregation.is_echo(live) and (
                    aggregation.is_aggregated(obj)):
                await self._delete_echo(ownership, ref, path, live)
                continue  # and created again, as it is meant to be
            left = left_alone(ownership, ref, claim, meta, adopt=False, keep_absent=keep_absent)
            if left is not None:
                return left
            stamped = ownership.stamp(obj, namespaced=resource.namespaced, adopted=claim is Claim.ADOPTED)
            if live is None:
                try:
                    created = await self.create(ref, stamped, resource, ownership.field_manager)
                except KubeApiError as error:
                    if error.status != 409:
                        raise
                    continue  # AlreadyExists: created meanwhile; whose it is decides
                return Change(ref, Action.CREATED, live=kept_answer(created))
            if ownership.unchanged(live.get("metadata") or {}, stamped):
                dry, _, _ = await self.applier.server_side_apply(ref, stamped, resource, ownership.field_manager,
                                                                 dry_run=True)
                if comparable(dry) == comparable(live):
                    log.debug("%s differs from the desired state only by the server's defaults (dry run)", ref)
                    return Change(ref, Action.UNCHANGED, live=kept_answer(live))
            applied, _, _ = await self.applier.server_side_apply(ref, stamped, resource, ownership.field_manager)
            return Change(ref, Action.CONFIGURED, live=kept_answer(applied))
        return Change(ref, Action.SKIPPED, f"changed hands {ROUNDS} times while it was put back; left to the next "
                                           "apply")

    async def create(self, ref: ObjectRef, desired: JSON, resource: Resource, field_manager: str) -> JSON:
        """Create ``desired`` only if no object of its name exists; raises :class:`KubeApiError` 409 if one does.

        Server-side apply has no create-only form (a ``metadata.uid`` in an
        apply body is refused for a missing object, a ``resourceVersion`` is
        ignored), so this is a POST. A POST records the creator's fields as an
        ``Update``, which a later apply would not take back: a field dropped
        from the desired state would stay. The entry is therefore turned into
        the ``Apply`` entry an apply would have made, by a JSON patch that
        tests exactly that entry (and the uid) rather than the resourceVersion:
        a controller's status update right after the create (a Deployment's,
        at once) does not make it conflict.
        """
        kube = self.access.kube
        live = await kube.create(resource.collection_path(ref.namespace or None), desired, field_manager=field_manager)
        for _ in range(3):
            meta = live.get("metadata") or {}
            entries = meta.get("managedFields") or []
            ours = [index for index, e in enumerate(entries) if e.get("manager") == field_manager
                    and e.get("operation") == "Update" and not e.get("subresource")]
            if not ours:
                return live
            patch = [{"op": "test", "path": "/metadata/uid", "value": meta.get("uid")}]
            for index in ours:
                entry = f"/metadata/managedFields/{index}"
                patch += [{"op": "test", "path": f"{entry}/manager", "value": field_manager},
                          {"op": "test", "path": f"{entry}/operation", "value": "Update"},
                          {"op": "replace", "path": f"{entry}/operation", "value": "Apply"}]
            try:
                return await kube.request("PATCH", resource.path_of(ref), content_type=JSON_PATCH, body=patch)
            except KubeApiError as error:
                if error.status not in (409, 422):  # 422: a test failed (entries moved, or a new uid)
                    raise
            current = await kube.get(resource.path_of(ref))
            if current is None or (current.get("metadata") or {}).get("uid") != meta.get("uid"):
                return live  # gone or replaced already: nothing of ours to fix
            live = current
        log.warning("%s: created, but its fields could not be recorded as applied (it kept changing); a field "
                    "later dropped from the desired state may stay on it", ref)
        return live

    async def _delete_echo(self, ownership: Ownership, ref: ObjectRef, path: str, live: JSON) -> None:
        """Delete the echo ``live`` of a deleted aggregated role, on the condition that it is still that very object.
        It raced the restore's create, which would otherwise leave the owner's role as an echo that aggregates
        nothing."""
        try:
            await self.access.kube.request("DELETE", path, body=delete_body(live["metadata"]["uid"]))
        except KubeApiError as error:
            if error.status not in (404, 409):  # gone, or replaced meanwhile: judged again either way
                raise
        log.info("%s of %s was re-created by kube-controller-manager's aggregation controller after its deletion, "
                 "holding only rules; deleted it to put the owner's own back", ref, ownership)
