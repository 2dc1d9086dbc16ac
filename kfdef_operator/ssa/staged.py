"""A whole set applied in stages (see :mod:`ordering`), each object as early as what it needs allows.

:class:`StagedApply` owns the order: namespaces and cluster-wide classes first; then, at once, the CRDs followed
by each kind's custom resources once its own CRD is Established (no "run it twice"; CRDs no object of the set needs
go after the others and are not waited for), and the other objects of the resources stage, which wait for no CRD;
admission objects last. Live metadata of the later stages is looked up
while the first is applied. The objects themselves are applied by :class:`~kfdef_operator.ssa.apply.Applier`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa import ordering
from kfdef_operator.ssa.apply import Applier, ApplyOptions
from kfdef_operator.ssa.changeset import Action, Change, ChangeSet, Progress
from kfdef_operator.ssa.claims import Ownership
from kfdef_operator.ssa.discovery import Discovery, Resource, UnknownKind
from kfdef_operator.ssa.inventory import ObjectRef, ref_of
from kfdef_operator.ssa.lookup import Known, LiveLookup
from kfdef_operator.ssa.waits import Waits


def _served_kind(obj: JSON) -> tuple[str, str]:
    """(group, kind) of a custom resource, or of the kind a CRD serves."""
    ref = ref_of(obj)
    if (ref.group, ref.kind) == ("apiextensions.k8s.io", "CustomResourceDefinition"):
        spec = obj.get("spec") or {}
        return spec.get("group", ""), (spec.get("names") or {}).get("kind", "")
    return ref.group, ref.kind


class StagedApply:
    """Applies whole sets through ``applier``, waiting for CRDs with ``waits``."""

    def __init__(self, applier: Applier, lookup: LiveLookup, waits: Waits, discovery: Discovery) -> None:
        self.applier = applier
        self.lookup = lookup
        self.waits = waits
        self.discovery = discovery

    async def apply_all(self, ownership: Ownership, objects: list[tuple[JSON, Resource]], resolve_later: list[JSON],
                        options: ApplyOptions = ApplyOptions(), progress: Progress | None = None) -> ChangeSet:
        """Apply a whole set, each object as early as what it needs allows.

        ``objects`` are resolved already; ``resolve_later`` are objects whose
        kind is not served yet (custom resources of CRDs in this set): they are
        resolved once the set's CRDs are Established.

        Namespaces and cluster-wide classes go first. Then two branches run at
        once: the CRDs, then each kind's custom resources once its CRD is
        Established (CRDs of kinds with no object in the set go after the
        others and are not waited for); and the other objects of the resources
        stage, which need no CRD. Admission objects go last (see :mod:`ordering`).
        """
        apply_stage = self.applier.apply_stage
        stages = ordering.group_by_stage(objects, lambda item: item[0]["kind"])
        total = len(objects) + len(resolve_later)
        crds = [item for item in stages[ordering.PREREQUISITES] if item[0]["kind"] == "CustomResourceDefinition"]
        first = [item for item in stages[ordering.PREREQUISITES] if item[0]["kind"] != "CustomResourceDefinition"]
        # Custom resources wait for the CRDs even when their kind is served already: the set may re-create its CRD.
        custom = [item for item in stages[ordering.RESOURCES] if ordering.is_custom_group(ref_of(item[0]).group)]
        builtin = [item for item in stages[ordering.RESOURCES] if not ordering.is_custom_group(ref_of(item[0]).group)]
        with_objects = {_served_kind(obj) for obj, _ in custom} | {_served_kind(obj) for obj in resolve_later}
        needed = [item for item in crds if _served_kind(item[0]) in with_objects]
        unneeded = [item for item in crds if _served_kind(item[0]) not in with_objects]
        changes = ChangeSet()
        # Everything after the first items is looked up while those are applied, not after.
        later_items = [(ref_of(obj), resource) for obj, resource in
                       [*crds, *builtin, *custom, *stages[ordering.ADMISSION]]]
        lookup = asyncio.create_task(self.lookup.lookup(later_items))

        async def report(stage: str) -> None:
            if progress is not None:
                await progress(stage, sum(1 for c in changes if c.ok), total)

        async def apply_unneeded() -> list[Change]:
            return await apply_stage(ownership, unneeded, await lookup, options) if unneeded else []

        async def custom_branch() -> list[Change]:
            # kube-apiserver makes new CRDs Established one after another, in the order they were created (v1.11.0's
            # 70: some 7 s): the CRDs of kinds this set has objects of are created first, the others once those are
            # answered. Only the first are waited for; the others' Established is the KfDef's readiness, like a
            # Deployment's availability.
            applied = await apply_stage(ownership, needed, await lookup, options) if needed else []
            if options.dry_run:
                return (applied + await apply_unneeded()
                        + (await apply_stage(ownership, custom, await lookup, options) if custom else []))
            by_kind = {_served_kind(obj): change for (obj, _), change in zip(needed, applied, strict=True)}
            custom_changes, unneeded_changes = await asyncio.gather(
                self._apply_custom(ownership, custom, resolve_later, by_kind, await lookup, options),
                apply_unneeded())
            return applied + unneeded_changes + custom_changes

        async def builtin_branch() -> list[Change]:
            return await apply_stage(ownership, builtin, await lookup, options) if builtin else []

        try:
            if first:
                changes.extend(await apply_stage(ownership, first, None, options))
            if options.dry_run and resolve_later:  # their CRDs were not created: the server cannot check them
                changes.extend(Change(ref_of(obj), Action.CREATED, "not checked by the API server: its kind is "
                                      "served once this set's CRDs are installed") for obj in resolve_later)
            custom_changes, builtin_changes = await asyncio.gather(custom_branch(), builtin_branch())
            changes.extend(custom_changes)
            await report(ordering.PREREQUISITES)
            changes.extend(builtin_changes)
            await report(ordering.RESOURCES)
            if stages[ordering.ADMISSION]:
                changes.extend(await apply_stage(ownership, stages[ordering.ADMISSION], await lookup, options))
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
        its apply finds it (see :meth:`Applier.apply_one`).
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
                    await self.waits.established(crd)
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
            return changes + await self.applier.apply_stage(ownership, items, {**known, **fresh}, options)

        results = await asyncio.gather(*(apply_kind(crds.get(kind), items, unresolved)
                                         for kind, (items, unresolved) in batches.items()))
        return [change for changes in results for change in changes]
