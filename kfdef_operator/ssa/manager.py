"""Staged server-side apply, prune and teardown of one owner's objects.

Apply, per stage (see :mod:`ordering`), with bounded concurrency:

- an object whose live copy carries the owner's stamps and the same desired
  state is left alone: re-applying an unchanged set writes nothing;
- an object held by another owner is a conflict: reported, never touched;
- an object a person took out of the owner's hands (:meth:`Ownership.opted_out`)
  is skipped;
- an object that exists without any owner's stamp is adopted: applied, and
  released rather than deleted later; so is one that was absent when looked
  up but existed when applied (someone else created it meanwhile);
- everything else is server-side applied with ``force`` (the owner is a
  controller: the fields it declares are its own; fields it does not declare
  stay with whoever set them);
- an apply refused because an immutable field changed is retried as delete and
  re-create only for objects the owner created, and only for kinds that hold
  no data unless :attr:`ApplyOptions.force` says otherwise; else reported;
- custom resources wait until their own CRD, if the set has it, is
  Established (no "run it twice"); the other objects of their stage do not
  wait for the CRDs.

An object that fails is reported in its :class:`Change`; the rest still land.
Deletes carry the uid of the object that was judged deletable as a
precondition, so an object replaced meanwhile is never deleted; a heal
creates with :meth:`ResourceManager.create`, which never touches an object
that exists.

All requests go through one client, which may act as another identity (see
:meth:`KubeClient.impersonating`); what a refusal (403) means for the owner is
worded by ``explain_forbidden``.

With :attr:`ApplyOptions.dry_run` (and ``prune(..., dry_run=True)``) the same decisions are taken and every
write is a server-side dry run: the server validates and answers with the object it would store, and nothing
changes (``kfdef-operator diff``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa import aggregation, ordering
from kfdef_operator.ssa.changeset import Action, Change, ChangeSet
from kfdef_operator.ssa.claims import Claim, Ownership
from kfdef_operator.ssa.client import KubeApiError, KubeClient, describe_api_error
from kfdef_operator.ssa.discovery import Discovery, Resource, UnknownKind
from kfdef_operator.ssa.health import CRD_CLEANUP_FAILED, Health, State, assess
from kfdef_operator.ssa.inventory import ObjectRef, ref_of
from kfdef_operator.ssa.live import LiveView
from kfdef_operator.ssa.schema import prune_custom_resource, version_schema

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], Awaitable[None]]
T = TypeVar("T")

# Kinds that may be deleted and re-created when an immutable field changes: they hold no data and their
# consumers recover (pods are rolled, bindings re-read). Anything else needs ApplyOptions.force.
STATELESS_KINDS = frozenset({
    "Deployment", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Service", "RoleBinding", "ClusterRoleBinding",
    "PodDisruptionBudget", "Ingress", "NetworkPolicy",
})
_METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
_ONE_METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
_MERGE_PATCH = "application/merge-patch+json"

#: What a lookup knows of one object: its live metadata, None when absent, or why it could not be read.
Known = JSON | None | KubeApiError
_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
#: How long a CRD's failed cleanup is left to kube-apiserver's own retry (milliseconds, when it works), and how
#: often the CRD is read whole when its kind is not watched.
_CLEANUP_PATIENCE_S = 2.0
_CLEANUP_RETRY_EVERY_S = 10.0


FORGED_STAMP_NOTE = "carried the ownership stamp of a KfDef that does not exist"
"""Starts the note of an object adopted although another KfDef's stamp was on it (that KfDef does not exist)."""


@dataclass(frozen=True)
class ApplyOptions:
    """How far an apply may go beyond a plain server-side apply."""

    #: Re-create objects of any kind (data-holding ones included) whose immutable fields changed (Flux's
    #: ``spec.force``). Without it only :data:`STATELESS_KINDS` are re-created. Never objects the owner did not
    #: create.
    force: bool = False
    #: Objects that are updated when present but never created when absent, with the reason (run-once objects
    #: that completed and were removed, such as Jobs with a TTL).
    keep_absent: Mapping[ObjectRef, str] = field(default_factory=dict)
    #: Take every decision but write nothing: applies are server-side dry runs (also of objects whose digest
    #: says they are unchanged, so that drift shows), nothing is deleted or re-created, CRDs are not waited for,
    #: and custom resources of CRDs not installed yet are reported as created without being checked.
    dry_run: bool = False


@dataclass
class TeardownResult:
    changes: ChangeSet = field(default_factory=ChangeSet)
    remaining: list[tuple[ObjectRef, str]] = field(default_factory=list)  # (object, why it is still there)

    @property
    def done(self) -> bool:
        return not self.remaining


def _served_kind(obj: JSON) -> tuple[str, str]:
    """(group, kind) of a custom resource, or of the kind a CRD serves."""
    ref = ref_of(obj)
    if (ref.group, ref.kind) == ("apiextensions.k8s.io", "CustomResourceDefinition"):
        spec = obj.get("spec") or {}
        return spec.get("group", ""), (spec.get("names") or {}).get("kind", "")
    return ref.group, ref.kind


def is_immutable_error(error: KubeApiError) -> bool:
    text = error.message.lower()
    return error.status in (409, 422) and ("immutable" in text or "cannot change" in text or "may not change" in text)


class ResourceManager:
    """Applies, prunes and tears down objects through one client; ``live`` serves lookups from a watch cache."""

    def __init__(self, kube: KubeClient, discovery: Discovery, live: LiveView | None = None, *,
                 concurrency: int = 24, crd_timeout: float = 120.0,
                 explain_forbidden: Callable[[KubeApiError], str] | None = None,
                 owners: KubeClient | None = None) -> None:
        self.kube = kube
        self.owners = owners or kube  # reads whether an owner named by a stamp exists (the operator's own view)
        self.discovery = discovery
        self.live = live
        self.concurrency = concurrency
        self.crd_timeout = crd_timeout
        self.explain_forbidden = explain_forbidden

    def describe(self, error: BaseException) -> str:
        """An error as one line for a person; a refusal (403) with what to do about it."""
        if not isinstance(error, KubeApiError):
            return f"{type(error).__name__}: {error}"
        text = describe_api_error(error)
        if error.status == 403 and self.explain_forbidden is not None:
            text += f"; {self.explain_forbidden(error)}"
        return text

    async def _gather(self, coroutines: list[Coroutine[Any, Any, T]]) -> list[T | BaseException]:
        return await self.kube.gather_limited(coroutines, self.concurrency)

    # -- lookups -------------------------------------------------------------------

    def _cached_meta(self, ref: ObjectRef) -> JSON | None:
        if self.live is None:
            return None
        tracked = self.live.get(ref)
        return tracked.meta if tracked is not None else None

    async def lookup(self, refs: list[tuple[ObjectRef, Resource]]) -> dict[ObjectRef, Known]:
        """Live metadata of objects the cache cannot answer for: one metadata-only LIST per kind and namespace.

        Every ref looked up is in the result: its metadata, None when absent,
        or the refusal when the client's identity may neither list nor get it.
        An identity that may not list a kind is asked for each object alone
        (it may hold ``get`` on named objects only).
        """
        wanted: dict[tuple[Resource, str], set[str]] = {}
        for ref, resource in refs:
            if self._cached_meta(ref) is None:
                wanted.setdefault((resource, ref.namespace), set()).add(ref.name)

        async def list_group(resource: Resource, namespace: str, names: set[str]) -> list[tuple[ObjectRef, Known]]:
            try:
                listing = await self.kube.request("GET", resource.collection_path(namespace or None),
                                                  accept=_METADATA_ONLY)
            except KubeApiError as error:
                if error.status == 404:  # a namespace or CRD that does not exist yet: nothing lives there
                    return []
                if error.status != 403:
                    raise
                return [(ref, await self._read_meta(ref, resource)) for ref in
                        (ObjectRef(resource.group, resource.kind, namespace, name) for name in sorted(names))]
            found: list[tuple[ObjectRef, Known]] = []
            for item in listing.get("items") or []:
                meta = item.get("metadata") or {}
                found.append((ObjectRef(resource.group, resource.kind, meta.get("namespace") or "",
                                        meta.get("name", "")), meta))
            return found

        live: dict[ObjectRef, Known] = {}
        for result in await self._gather([list_group(r, ns, names) for (r, ns), names in wanted.items()]):
            if isinstance(result, BaseException):
                raise result
            live.update(result)
        for ref, _ in refs:
            live.setdefault(ref, self._cached_meta(ref))
        return live

    async def _holder_missing(self, ownership: Ownership, live_meta: JSON) -> bool:
        """Whether the owner a stamp names is known not to exist (404). Any other answer (it exists, it may not be
        read, the read failed) keeps the object the holder's."""
        path = ownership.holder_path(live_meta)
        if path is None:
            return False
        try:
            return await self.owners.get(path, accept=_ONE_METADATA_ONLY) is None
        except KubeApiError as error:
            log.info("cannot tell whether %s exists (%s); leaving its object alone", ownership.holder(live_meta),
                     describe_api_error(error))
            return False

    async def _read_meta(self, ref: ObjectRef, resource: Resource) -> Known:
        try:
            found = await self.kube.get(resource.path_of(ref), accept=_ONE_METADATA_ONLY)
        except KubeApiError as error:
            if error.status == 403:
                return error
            raise
        return (found or {}).get("metadata") if found is not None else None

    # -- apply ---------------------------------------------------------------------

    async def apply_one(self, ownership: Ownership, obj: JSON, resource: Resource, live_meta: JSON | None,
                        options: ApplyOptions = ApplyOptions()) -> Change:
        """Apply one normalised object given what is known of its live copy (None: absent)."""
        ref = ref_of(obj)
        claim = ownership.claim(live_meta)
        unclaimed_note = ""
        if claim is Claim.FOREIGN:
            assert live_meta is not None
            if not await self._holder_missing(ownership, live_meta):
                return Change(ref, Action.CONFLICT, f"already managed by {ownership.holder(live_meta)}; not applied")
            claim = Claim.UNCLAIMED
            unclaimed_note = (f"{FORGED_STAMP_NOTE}: it named {ownership.holder(live_meta)}, which does not exist; "
                              "adopted (kept at prune and teardown)")
        if ownership.opted_out(live_meta):
            return Change(ref, Action.SKIPPED, "reconcile disabled on the object by annotation; not applied")
        if claim is Claim.ABSENT and ref in options.keep_absent:
            return Change(ref, Action.SKIPPED, options.keep_absent[ref])
        stamped = ownership.stamp(obj, namespaced=resource.namespaced,
                                  adopted=claim in (Claim.UNCLAIMED, Claim.ADOPTED))
        if (live_meta is not None and claim in (Claim.OURS, Claim.ADOPTED) and not live_meta.get("deletionTimestamp")
                and not options.dry_run and ownership.unchanged(live_meta, stamped)):
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
            if is_immutable_error(error):
                return await self._recreate(ownership, ref, stamped, resource, claim, live_meta, options, error)
            return Change(ref, Action.FAILED, self.describe(error))
        action = Action.CREATED if created else (Action.ADOPTED if claim is Claim.UNCLAIMED else Action.CONFIGURED)
        note = f"fields not in the CRD's schema were dropped: {', '.join(dropped[:5])}" if dropped else ""
        note = "; ".join(n for n in (unclaimed_note, note) if n)
        return Change(ref, action, note, live=live)

    async def server_side_apply(self, ref: ObjectRef, desired: JSON, resource: Resource, field_manager: str, *,
                                dry_run: bool = False) -> tuple[JSON, bool, list[str]]:
        """Apply ``desired``; returns (live object, created, fields dropped).

        A custom resource with fields its CRD's structural schema does not
        declare is refused by server-side apply, while ``kubectl create`` or a
        client-side apply would have had them silently pruned. Such an object
        is pruned against the schema the way the server prunes, and applied
        again.
        """
        path = resource.path_of(ref)
        try:
            live, created = await self.kube.apply(path, desired, field_manager=field_manager, dry_run=dry_run)
            return live, created, []
        except KubeApiError as error:
            if "not declared in schema" not in error.message or not ordering.is_custom_group(ref.group):
                raise
            crd = await self.kube.get(f"{_CRD_PATH}/{resource.plural}.{resource.group}")
            pruned, dropped = prune_custom_resource(desired, version_schema(crd or {}, resource.version))
            if not dropped:
                raise
            log.info("%s: dropping fields its CRD does not declare: %s", ref, ", ".join(dropped))
            live, created = await self.kube.apply(path, pruned, field_manager=field_manager, dry_run=dry_run)
            return live, created, dropped

    async def create(self, ref: ObjectRef, desired: JSON, resource: Resource, field_manager: str) -> JSON:
        """Create ``desired`` only if no object of its name exists; raises :class:`KubeApiError` 409 if one does.

        Server-side apply has no create-only form (a ``metadata.uid`` in an
        apply body is refused for a missing object, a ``resourceVersion`` is
        ignored), so this is a POST. A POST records the creator's fields as an
        ``Update``, which a later apply would not take back: a field dropped
        from the desired state would stay. The entry is therefore turned into
        the ``Apply`` entry an apply would have made, guarded by the
        resourceVersion the POST returned.
        """
        live = await self.kube.create(resource.collection_path(ref.namespace or None), desired,
                                      field_manager=field_manager)
        for _ in range(3):
            meta = live.get("metadata") or {}
            entries = meta.get("managedFields") or []
            ours = [e for e in entries if e.get("manager") == field_manager and e.get("operation") == "Update"
                    and not e.get("subresource")]
            if not ours:
                return live
            owned = [{**e, "operation": "Apply"} if e in ours else e for e in entries]
            try:
                return await self.kube.request("PATCH", resource.path_of(ref), content_type=_MERGE_PATCH, body={
                    "metadata": {"resourceVersion": meta.get("resourceVersion"), "managedFields": owned}})
            except KubeApiError as error:
                if error.status != 409:
                    raise
            current = await self.kube.get(resource.path_of(ref))
            if current is None or (current.get("metadata") or {}).get("uid") != meta.get("uid"):
                return live  # gone or replaced already: nothing of ours to fix
            live = current
        log.warning("%s: created, but its fields could not be recorded as applied (it kept changing); a field "
                    "later dropped from the desired state may stay on it", ref)
        return live

    async def _recreate(self, ownership: Ownership, ref: ObjectRef, stamped: JSON, resource: Resource, claim: Claim,
                        live_meta: JSON | None, options: ApplyOptions, error: KubeApiError) -> Change:
        # The server's first line says which field; the rest is a diff of the whole spec.
        refused = f"{error.status} {error.reason}: {error.message.splitlines()[0]}; an immutable field changed"
        if claim is not Claim.OURS:
            return Change(ref, Action.FAILED, f"{refused}, and the object existed before this stack: it is never "
                                              "deleted or re-created by the operator; change it by hand")
        if ref.kind not in STATELESS_KINDS and not options.force:
            return Change(ref, Action.FAILED, f"{refused}; {ref.kind} may hold data and is re-created only when the "
                                              "owner sets spec.force: true (or delete it by hand)")
        if options.dry_run:
            return Change(ref, Action.CREATED, "would be deleted and re-created: an immutable field changed")
        path = resource.path_of(ref)
        log.info("re-creating %s: an immutable field changed", ref)
        try:
            await self.kube.request("DELETE", path, body=_delete_body((live_meta or {}).get("uid")))
        except KubeApiError as delete_error:
            if delete_error.status == 409:
                return Change(ref, Action.FAILED, "re-create: the object was replaced by another one meanwhile; "
                                                  "not deleted, retried at the next reconcile")
            if delete_error.status != 404:
                return Change(ref, Action.FAILED, f"re-create: delete failed: {self.describe(delete_error)}")
        gone = await self._wait_gone(ownership, ref, resource.version, timeout=60)
        if gone is not True:
            return Change(ref, Action.FAILED,
                          f"re-create: the old object is {gone}; it will be applied once it is gone")
        try:
            live, _ = await self.kube.apply(path, stamped, field_manager=ownership.field_manager)
        except KubeApiError as apply_error:
            return Change(ref, Action.FAILED, f"re-create: apply failed: {self.describe(apply_error)}")
        return Change(ref, Action.CREATED, "re-created: an immutable field changed", live=live)

    async def apply_stage(self, ownership: Ownership, items: list[tuple[JSON, Resource]],
                          known: Mapping[ObjectRef, Known] | None = None,
                          options: ApplyOptions = ApplyOptions()) -> list[Change]:
        """Apply objects of one stage concurrently; they are started in the order given.

        ``known`` holds live metadata looked up earlier; objects it does not
        cover are looked up now. An object that could not be read is not applied.
        """
        known = dict(known or {})
        known.update(await self.lookup([(ref_of(obj), resource) for obj, resource in items
                                        if ref_of(obj) not in known]))

        async def apply(obj: JSON, resource: Resource) -> Change:
            live_meta = known[ref_of(obj)]
            if isinstance(live_meta, KubeApiError):
                return Change(ref_of(obj), Action.FAILED, f"not read, so not applied (applying needs get and "
                                                          f"patch): {self.describe(live_meta)}")
            return await self.apply_one(ownership, obj, resource, live_meta, options)

        results = await self._gather([apply(obj, resource) for obj, resource in items])
        return [result if isinstance(result, Change) else Change(ref_of(obj), Action.FAILED, self.describe(result))
                for (obj, _), result in zip(items, results, strict=True)]

    async def apply_all(self, ownership: Ownership, objects: list[tuple[JSON, Resource]], resolve_later: list[JSON],
                        options: ApplyOptions = ApplyOptions(), progress: Progress | None = None) -> ChangeSet:
        """Apply a whole set, each object as early as what it needs allows.

        ``objects`` are resolved already; ``resolve_later`` are objects whose
        kind is not served yet (custom resources of CRDs in this set): they are
        resolved once the set's CRDs are Established.

        Namespaces and cluster-wide classes go first. Then two branches run at
        once: the CRDs, then each kind's custom resources once its CRD is
        Established; and the other objects of the resources stage, which need
        no CRD. Admission objects go last (see :mod:`ordering`).
        """
        stages = ordering.group_by_stage(objects, lambda item: item[0]["kind"])
        total = len(objects) + len(resolve_later)
        crds = [item for item in stages[ordering.PREREQUISITES] if item[0]["kind"] == "CustomResourceDefinition"]
        first = [item for item in stages[ordering.PREREQUISITES] if item[0]["kind"] != "CustomResourceDefinition"]
        # Custom resources wait for the CRDs even when their kind is served already: the set may re-create its CRD.
        custom = [item for item in stages[ordering.RESOURCES] if ordering.is_custom_group(ref_of(item[0]).group)]
        builtin = [item for item in stages[ordering.RESOURCES] if not ordering.is_custom_group(ref_of(item[0]).group)]
        changes = ChangeSet()
        # Everything after the first items is looked up while those are applied, not after.
        later_items = [(ref_of(obj), resource) for obj, resource in
                       [*crds, *builtin, *custom, *stages[ordering.ADMISSION]]]
        lookup = asyncio.create_task(self.lookup(later_items))

        async def report(stage: str) -> None:
            if progress is not None:
                await progress(stage, sum(1 for c in changes if c.ok), total)

        async def custom_branch() -> list[Change]:
            applied = await self.apply_stage(ownership, crds, await lookup, options) if crds else []
            if options.dry_run:
                return applied + (await self.apply_stage(ownership, custom, await lookup, options) if custom else [])
            by_kind = {_served_kind(obj): change for (obj, _), change in zip(crds, applied, strict=True)}
            return applied + await self._apply_custom(ownership, custom, resolve_later, by_kind, await lookup,
                                                      options)

        async def builtin_branch() -> list[Change]:
            return await self.apply_stage(ownership, builtin, await lookup, options) if builtin else []

        try:
            if first:
                changes.extend(await self.apply_stage(ownership, first, None, options))
            if options.dry_run and resolve_later:  # their CRDs were not created: the server cannot check them
                changes.extend(Change(ref_of(obj), Action.CREATED, "not checked by the API server: its kind is "
                                      "served once this set's CRDs are installed") for obj in resolve_later)
            custom_changes, builtin_changes = await asyncio.gather(custom_branch(), builtin_branch())
            changes.extend(custom_changes)
            await report(ordering.PREREQUISITES)
            changes.extend(builtin_changes)
            await report(ordering.RESOURCES)
            if stages[ordering.ADMISSION]:
                changes.extend(await self.apply_stage(ownership, stages[ordering.ADMISSION], await lookup, options))
                await report(ordering.ADMISSION)
        finally:
            if not lookup.done():
                lookup.cancel()
            await asyncio.gather(lookup, return_exceptions=True)
        return changes

    async def _apply_custom(self, ownership: Ownership, served: list[tuple[JSON, Resource]], objects: list[JSON],
                            crds: Mapping[tuple[str, str], Change], known: Mapping[ObjectRef, Known],
                            options: ApplyOptions) -> list[Change]:
        """Custom resources, each kind as soon as its CRD of this set is Established: ``served`` (resolved
        already) and ``objects`` (resolved then; their kinds were not served before). ``crds`` holds the set's
        CRD changes by the (group, kind) they serve; a kind served by no CRD of the set is applied at once.

        The barrier is per CRD, not for the whole set: a release's 70 CRDs become Established one by one over
        seconds, and a kind's objects need only their own. A CRD that never becomes Established is marked failed.

        Kinds whose CRD this very apply created have no objects yet: they are
        not looked up (the server answers 429 while a new CRD's storage
        initialises). One created meanwhile by someone else is adopted when
        its apply finds it (see :meth:`apply_one`).
        """
        batches: dict[tuple[str, str], tuple[list[tuple[JSON, Resource]], list[JSON]]] = {
            kind: ([], []) for kind, change in crds.items() if change.ok}
        for obj, resource in served:
            batches.setdefault(_served_kind(obj), ([], []))[0].append((obj, resource))
        for obj in objects:
            batches.setdefault(_served_kind(obj), ([], []))[1].append(obj)

        async def apply_kind(crd: Change | None, items: list[tuple[JSON, Resource]],
                             unresolved: list[JSON]) -> list[Change]:
            if crd is not None and crd.ok:
                try:
                    await self.wait_established(crd)
                except Exception as error:  # whatever ended the wait (a timeout, a refused GET) is the CRD's
                    crd.action, crd.message = Action.FAILED, f"not Established: {error}"
            changes: list[Change] = []
            items = list(items)
            for obj in unresolved:
                try:
                    items.append((obj, await self.discovery.resource(obj["apiVersion"], obj["kind"])))
                except UnknownKind as error:
                    changes.append(Change(ref_of(obj), Action.FAILED, str(error)))
            if not items:
                return changes
            fresh: dict[ObjectRef, Known] = ({ref_of(obj): None for obj, _ in items}
                                             if crd is not None and crd.action is Action.CREATED else {})
            return changes + await self.apply_stage(ownership, items, {**known, **fresh}, options)

        results = await asyncio.gather(*(apply_kind(crds.get(kind), items, unresolved)
                                         for kind, (items, unresolved) in batches.items()))
        return [change for changes in results for change in changes]

    # -- CRDs ----------------------------------------------------------------------

    async def wait_established(self, change: Change) -> None:
        """Wait for one CRD's Established condition, then register its kinds with discovery.

        With a live view that watches CRDs (the operator has one), the wait
        reads its cache, which the watch keeps current, and wakes at the CRD's
        watch events: no request at all, and no polling (70 CRDs polled every
        10 ms kept a core a fifth busy during their establishment). Otherwise
        the CRD is polled.
        """
        deadline = time.monotonic() + self.crd_timeout
        if self.live is not None and self.live.is_watched("apiextensions.k8s.io", "CustomResourceDefinition"):
            while True:
                tracked = self.live.get(change.ref)
                if tracked is not None and tracked.health.state is State.FAILED:
                    raise RuntimeError(tracked.health.message)
                if tracked is not None and tracked.health.ready:
                    if change.live is not None:  # an unchanged CRD's kinds are in discovery already
                        self.discovery.register_crd(change.live)
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"still not Established after {self.crd_timeout:.0f}s")
                # Bounded, so that a wake-up lost to a watch restart costs a second, not the whole timeout.
                await self.live.next_event(change.ref, min(remaining, 1.0))
        crd = change.live
        delay = 0.02
        while True:
            conditions = {c.get("type"): c for c in ((crd or {}).get("status") or {}).get("conditions") or []}
            if crd is not None and conditions.get("Established", {}).get("status") == "True":
                self.discovery.register_crd(crd)
                return
            names = conditions.get("NamesAccepted")
            if names and names.get("status") == "False":
                raise RuntimeError(f"names not accepted: {names.get('message')}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"still not Established after {self.crd_timeout:.0f}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)
            crd = await self.kube.get(f"{_CRD_PATH}/{change.ref.name}")

    # -- deletion ------------------------------------------------------------------

    async def _remove(self, ownership: Ownership, ref: ObjectRef, version: str, dry_run: bool = False) -> Change:
        """Delete one object the owner created, or release one it adopted or a person took over.

        An object the watch cache shows as the owner's is deleted without reading it first, on the condition that it
        is still the very version the cache holds (uid and resourceVersion preconditions); anything else, or an
        object changed since, is read (its metadata only) and judged on what the server says.
        """
        try:
            resource = await self.discovery.resource_for_ref(ref, version)
        except UnknownKind:
            return Change(ref, Action.GONE, "kind no longer served")
        path = resource.path_of(ref)
        cached = self.live.get(ref) if self.live is not None and not dry_run else None
        if cached is not None and ownership.claim(cached.meta) is Claim.OURS and not ownership.opted_out(cached.meta):
            try:
                await self.kube.request("DELETE", path, body=_delete_body(cached.uid, cached.resource_version),
                                        accept=_ONE_METADATA_ONLY)
                return Change(ref, Action.DELETED)
            except KubeApiError as error:
                if error.status == 404:
                    return Change(ref, Action.GONE)
                if error.status != 409:  # 409: changed since the cache saw it: read it and judge again
                    raise
        for _ in range(3):
            live = await self.kube.get(path, accept=_ONE_METADATA_ONLY)
            if live is None:
                return Change(ref, Action.GONE)
            meta = live.get("metadata") or {}
            claim = ownership.claim(meta)
            if claim is Claim.ADOPTED or (claim is Claim.OURS and ownership.opted_out(meta)):
                await self.kube.request("PATCH", path, body=ownership.release_patch(), params=_dry_run(dry_run),
                                        content_type=_MERGE_PATCH)
                why = "existed before" if claim is Claim.ADOPTED else "reconcile disabled on the object"
                return Change(ref, Action.RELEASED, f"{why}; kept")
            if claim is not Claim.OURS:
                return Change(ref, Action.SKIPPED, f"not owned ({claim.value}); kept")
            if meta.get("deletionTimestamp"):
                return Change(ref, Action.DELETED)
            try:
                await self.kube.request("DELETE", path, body=_delete_body(meta.get("uid")), params=_dry_run(dry_run),
                                        accept=_ONE_METADATA_ONLY)
                return Change(ref, Action.DELETED)
            except KubeApiError as error:
                if error.status == 404:
                    return Change(ref, Action.GONE)
                if error.status != 409:  # 409: replaced since the GET (uid precondition): judge the new one
                    raise
        return Change(ref, Action.FAILED, "replaced by another object again and again while being deleted; kept")

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
        removed = await self._gather([self._remove(ownership, ref, version, dry_run) for ref, version in rest])
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
        resource = await self.discovery.resource_for_ref(*next(iter(roles.values())))
        try:
            listing = await self.kube.request("GET", resource.collection_path())
            live = [item for item in listing.get("items") or [] if (item.get("metadata") or {}).get("name") in roles]
        except KubeApiError as error:
            if error.status != 403:
                raise
            read = await self._gather([self.kube.get(resource.path_of(ref)) for ref, _ in roles.values()])
            live = [item for item in read if isinstance(item, dict)]
        for item in live:  # list items carry no apiVersion/kind
            item.update(apiVersion=resource.api_version, kind=resource.kind)
        return [roles[name] for name in aggregation.deletion_order(live)]

    def _failed(self, ref: ObjectRef, error: BaseException) -> Change:
        return Change(ref, Action.FAILED, self.describe(error) if isinstance(error, KubeApiError) else str(error))

    @staticmethod
    def _waves(objects: Mapping[ObjectRef, str]) -> list[list[tuple[ObjectRef, str]]]:
        return ordering.teardown_waves(list(objects.items()), lambda item: item[0].kind,
                                       is_custom=lambda item: ordering.is_custom_group(item[0].group))

    async def prune(self, ownership: Ownership, stale: Mapping[ObjectRef, str], *, dry_run: bool = False) -> ChangeSet:
        """Remove objects no longer desired (``{ref: version}``), in teardown order, without waiting.

        ``dry_run``: the deletes and releases are server-side dry runs.
        """
        changes = ChangeSet()
        for wave in self._waves(stale):
            answers = await self._remove_wave(ownership, wave, dry_run)
            changes.extend(answer if isinstance(answer, Change) else self._failed(ref, answer)
                           for (ref, _), answer in zip(wave, answers, strict=True))
        return changes

    async def teardown(self, ownership: Ownership, inventory: Mapping[ObjectRef, str], *, wave_timeout: float = 60.0,
                       progress: Progress | None = None) -> TeardownResult:
        """Delete (or release) everything in the inventory, wave by wave, waiting until each wave is gone."""
        result = TeardownResult()
        done = 0
        for wave in self._waves(inventory):
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
            gone = await self._gather([self._wait_gone(ownership, ref, version, wave_timeout)
                                       for ref, version in pending])
            for (ref, _), waited in zip(pending, gone, strict=True):
                if waited is True:
                    result.changes.extend([Change(ref, Action.DELETED)])
                else:
                    result.remaining.append((ref, waited if isinstance(waited, str) else f"still there: {waited}"))
            done += len(wave)
            log.info("%s: teardown wave of %d object(s) (%s): deletes sent in %.2f s, waited on until %.2f s",
                     ownership, len(wave), ", ".join(sorted({ref.kind for ref, _ in wave})), sent_s,
                     time.monotonic() - wave_started)
            if progress is not None:
                await progress("teardown", done, len(inventory))
        return result

    async def _wait_gone(self, ownership: Ownership, ref: ObjectRef, version: str, timeout: float) -> bool | str:
        """True once the object is gone; else why it is still there (finalizers) after ``timeout``.

        Objects of watched kinds are awaited on the cache, waking at their watch events (no requests); others are
        polled, by their metadata (a CRD is read whole every few seconds, for its conditions). A CRD whose cleanup
        kube-apiserver failed and left alone is made to retry (:meth:`_retry_crd_cleanup`).
        """
        resource = await self.discovery.resource_for_ref(ref, version)
        path = resource.path_of(ref)
        is_crd = (ref.group, ref.kind) == ("apiextensions.k8s.io", "CustomResourceDefinition")
        watched = self.live if self.live is not None and self.live.is_watched(ref.group, ref.kind, ref.namespace) \
            else None
        started = time.monotonic()
        deadline, read_whole_at = started + timeout, started + _CLEANUP_PATIENCE_S
        delay = 0.02
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
                live = await self.kube.get(path, accept="application/json" if whole else _ONE_METADATA_ONLY)
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
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)

    async def _still_there(self, ref: ObjectRef, path: str, timeout: float) -> bool | str:
        """True when the object is gone after all; else why it is still there: its finalizers, and what keeps a
        Namespace or a CRD (their conditions)."""
        live = await self.kube.get(path)
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
            await self.kube.request("PATCH", path, content_type=_MERGE_PATCH, accept=_ONE_METADATA_ONLY,
                                    body=ownership.touch_patch())
        except KubeApiError as error:
            if error.status != 404:  # gone meanwhile: nothing to retry
                log.warning("%s: could not ask kube-apiserver to retry its cleanup: %s", ref, self.describe(error))


def _delete_body(uid: str | None, resource_version: str | None = None) -> JSON:
    """DeleteOptions that delete only the very object judged (its uid; with ``resource_version``, also only that
    version of it), dependents in the background."""
    body: JSON = {"propagationPolicy": "Background"}
    preconditions = {key: value for key, value in (("uid", uid), ("resourceVersion", resource_version)) if value}
    if preconditions:
        body["preconditions"] = preconditions
    return body


def _dry_run(dry_run: bool) -> dict[str, str] | None:
    return {"dryRun": "All"} if dry_run else None
