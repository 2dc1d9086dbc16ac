"""Staged server-side apply, prune and teardown of one owner's objects, through one client.

:class:`ResourceManager` is the face the layers above use; it builds its collaborators once and delegates:

- :mod:`~kfdef_operator.ssa.access` (:class:`ApiAccess`): the client, discovery, the watch cache, the concurrency
  bound and how an error is worded (a refusal, 403, with ``explain_forbidden``'s advice);
- :mod:`~kfdef_operator.ssa.lookup`: live metadata of objects before they are applied;
- :mod:`~kfdef_operator.ssa.apply`: one object, or one stage, applied (adopt, conflict, opt-out, re-create), by
  the ownership rule of :mod:`~kfdef_operator.ssa.claims`;
- :mod:`~kfdef_operator.ssa.restore`: one object put back as a heal does (create-only, never adopting), by the same
  rule;
- :mod:`~kfdef_operator.ssa.immutable`: immutable-field refusals recognised, and what a re-create would destroy;
- :mod:`~kfdef_operator.ssa.migration`: a CRD's stored versions migrated before it drops one (the plan:
  :mod:`~kfdef_operator.ssa.storedversions`);
- :mod:`~kfdef_operator.ssa.staged`: a whole set in stages, custom resources after their own CRD;
- :mod:`~kfdef_operator.ssa.teardown`: prune and teardown in waves, deletes guarded by uid;
- :mod:`~kfdef_operator.ssa.waits`: a CRD until Established, a deleted object until gone.

An object that fails is reported in its :class:`Change`; the rest still land. All requests go through one client,
which may act as another identity (see :meth:`KubeClient.impersonating`).

With :attr:`ApplyOptions.dry_run` (and ``prune(..., dry_run=True)``) the same decisions are taken and every
write is a server-side dry run: the server validates and answers with the object it would store, and nothing
changes (``kfdef-operator diff``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.access import ApiAccess
from kfdef_operator.ssa.apply import Applier, ApplyOptions
from kfdef_operator.ssa.changeset import Change, ChangeSet, Progress
from kfdef_operator.ssa.claims import Ownership
from kfdef_operator.ssa.client import KubeApiError, KubeClient
from kfdef_operator.ssa.discovery import Discovery, Resource
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.live import LiveView, OwnWrites
from kfdef_operator.ssa.lookup import Known, LiveLookup
from kfdef_operator.ssa.restore import Restorer
from kfdef_operator.ssa.staged import StagedApply
from kfdef_operator.ssa.teardown import Removal, TeardownResult
from kfdef_operator.ssa.waits import Waits


class ResourceManager:
    """Applies, prunes and tears down objects through one client; ``live`` serves lookups from a watch cache.

    ``owners`` reads whether an owner named by a stamp exists (the operator's own view; ``kube`` by default);
    ``own_writes`` is told the version each apply leaves an object at.
    """

    def __init__(self, kube: KubeClient, discovery: Discovery, live: LiveView | None = None, *,
                 concurrency: int = 24, crd_timeout: float = 120.0,
                 explain_forbidden: Callable[[KubeApiError], str] | None = None,
                 owners: KubeClient | None = None, own_writes: OwnWrites | None = None) -> None:
        self.kube = kube
        self.discovery = discovery
        self.concurrency = concurrency
        self._access = ApiAccess(kube, discovery, live, concurrency, explain_forbidden)
        self._lookup = LiveLookup(self._access)
        self._waits = Waits(self._access, crd_timeout)
        self._applier = Applier(self._access, self._lookup, self._waits, owners or kube, own_writes)
        self._restorer = Restorer(self._access, self._applier)
        self._staged = StagedApply(self._applier, self._lookup, self._waits, discovery)
        self._removal = Removal(self._access, self._waits)

    def describe(self, error: BaseException) -> str:
        """An error as one line for a person; a refusal (403) with what to do about it."""
        return self._access.describe(error)

    async def lookup(self, refs: list[tuple[ObjectRef, Resource]]) -> dict[ObjectRef, Known]:
        """Live metadata of objects the cache cannot answer for (:meth:`LiveLookup.lookup`)."""
        return await self._lookup.lookup(refs)

    async def apply_one(self, ownership: Ownership, obj: JSON, resource: Resource, live_meta: JSON | None,
                        options: ApplyOptions = ApplyOptions()) -> Change:
        """Apply one normalised object given what is known of its live copy (:meth:`Applier.apply_one`)."""
        return await self._applier.apply_one(ownership, obj, resource, live_meta, options)

    async def apply_stage(self, ownership: Ownership, items: list[tuple[JSON, Resource]],
                          known: Mapping[ObjectRef, Known] | None = None,
                          options: ApplyOptions = ApplyOptions()) -> list[Change]:
        """Apply objects of one stage concurrently (:meth:`Applier.apply_stage`)."""
        return await self._applier.apply_stage(ownership, items, known, options)

    async def apply_all(self, ownership: Ownership, objects: list[tuple[JSON, Resource]], resolve_later: list[JSON],
                        options: ApplyOptions = ApplyOptions(), progress: Progress | None = None) -> ChangeSet:
        """Apply a whole set, each object as early as what it needs allows (:meth:`StagedApply.apply_all`)."""
        return await self._staged.apply_all(ownership, objects, resolve_later, options, progress)

    async def restore(self, ownership: Ownership, obj: JSON, resource: Resource, *, expected_uid: str = "",
                      known_absent: bool = False, keep_absent: str | None = None) -> Change:
        """Put one normalised object back after it was deleted or changed (:meth:`Restorer.restore`)."""
        return await self._restorer.restore(ownership, obj, resource, expected_uid=expected_uid,
                                            known_absent=known_absent, keep_absent=keep_absent)

    async def wait_established(self, change: Change) -> None:
        """Wait for one CRD's Established condition, then register its kinds (:meth:`Waits.established`)."""
        await self._waits.established(change)

    async def prune(self, ownership: Ownership, stale: Mapping[ObjectRef, str], *, dry_run: bool = False,
                    force: bool = False) -> ChangeSet:
        """Remove objects no longer desired, in teardown order, without waiting; a Namespace or CRD holding others'
        objects is released and kept unless ``force`` (:meth:`Removal.prune`)."""
        return await self._removal.prune(ownership, stale, dry_run=dry_run, force=force)

    async def teardown(self, ownership: Ownership, inventory: Mapping[ObjectRef, str], *, wave_timeout: float = 60.0,
                       progress: Progress | None = None) -> TeardownResult:
        """Delete (or release) everything in the inventory, wave by wave (:meth:`Removal.teardown`)."""
        return await self._removal.teardown(ownership, inventory, wave_timeout=wave_timeout, progress=progress)
