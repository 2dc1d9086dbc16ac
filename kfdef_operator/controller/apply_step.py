"""A leader's run for a KfDef that is not being deleted: its desired state applied, the rest pruned.

:class:`ApplyStep` takes a run from the parsed KfDef to its :class:`~kfdef_operator.controller.outcome.RunOutcome`:
the finalizer first, then (unless suspended) the identity settled, the desired state built
(:class:`DesiredStateBuilder`) and taken by the stack, the intent recorded in the inventory (written before
anything is applied), the staged apply and the prune of that identity's :class:`ResourceManager`. The outcome holds
the changes, the Events they call for and when the next run is due (a retry backoff after failures, the resync
interval after success); the reconciler writes the status and posts the Events. A new generation's steps are
written as they go.

An object the API server refused for its content is reported once (status and one Event) and then left alone:
runs that nothing could have changed its answer for (the same generation and source revisions as the report in
``status.failures``, no resync due) do not send it again, and do not back off for it. The report is read from the
KfDef's status, so a restart over the same state sends and writes nothing either.
"""

from __future__ import annotations

import logging
import time

from kfdef_operator.api.kfdef import InvalidKfDef, KfDef, parse_kfdef
from kfdef_operator.api.names import SUSPEND_ANNOTATION
from kfdef_operator.api.types import JSON
from kfdef_operator.backoff import jittered
from kfdef_operator.controller.builder import DesiredStateBuilder
from kfdef_operator.controller.desired import DesiredState, applied_digest, kept_absent
from kfdef_operator.controller.failures import Fail
from kfdef_operator.controller.finalizer import ensure_finalizer
from kfdef_operator.controller.outcome import Event, Retry, RunOutcome, StatusWrite, WriteStatus
from kfdef_operator.controller.refresher import StatusRefresher
from kfdef_operator.controller.registry import StackRegistry
from kfdef_operator.runtime import conditions as cond
from kfdef_operator.runtime.heal import Healer
from kfdef_operator.runtime.identity import Identities, StackIdentity
from kfdef_operator.runtime.inventory import InventoryEntry
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.runtime.status import failures_of, health_deadline_in, settled_refusals
from kfdef_operator.runtime.tracker import Tracker
from kfdef_operator.ssa.apply import FORGED_STAMP_NOTE, ApplyOptions
from kfdef_operator.ssa.changeset import Action, ChangeSet
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.inventory import ObjectRef, version_of
from kfdef_operator.ssa.manager import ResourceManager

log = logging.getLogger(__name__)


class ApplyStep:
    """Reconciles one KfDef's stack: ``interval`` is the default resync, ``health_timeout`` the health deadline."""

    def __init__(self, kube: KubeClient, builder: DesiredStateBuilder, registry: StackRegistry,
                 refresher: StatusRefresher, identities: Identities, tracker: Tracker, discovery: Discovery,
                 healer: Healer, *, interval: float, health_timeout: float) -> None:
        self._kube = kube
        self._builder = builder
        self._registry = registry
        self._refresher = refresher
        self._identities = identities
        self._tracker = tracker
        self._discovery = discovery
        self._healer = healer
        self._interval = interval
        self._health_timeout = health_timeout

    async def run(self, stack: Stack, body: JSON, write_status: WriteStatus) -> RunOutcome:
        """Reconcile the stack to the KfDef ``body``: its outcome, to report (status, Events, the next run).

        ``write_status`` writes the steps of a new generation as they go, and the inventory ahead of the apply."""
        try:
            kfdef = parse_kfdef(body)
        except InvalidKfDef as error:
            stack.begin(body["metadata"].get("generation", 0), announce=False)
            raise Fail("InvalidSpec", str(error), retry=False) from None
        await ensure_finalizer(self._kube, stack, body)
        stack.suspended = kfdef.annotations.get(SUSPEND_ANNOTATION, "").lower() == "true"
        if stack.suspended:
            stack.generation = kfdef.generation
            return RunOutcome()
        manager = self._identities.manager(await self._settle_identity(stack, kfdef.service_account_name))
        announce = stack.status.get("observedGeneration") != kfdef.generation or stack.failure is not None
        stack.begin(kfdef.generation, announce=announce)

        async def step(reason: str, message: str) -> None:
            if announce:
                stack.step = (reason, message)
                await write_status()

        build = await self._builder.build(stack.owner, kfdef, body, step)
        stack.take(build.plan)
        desired = build.desired
        built_at = time.monotonic()  # a watch listing from now on compares the objects with this desired state
        # Before the run's first write of the report: the status still holds the last one.
        settled = settled_refusals(stack, announce=announce, now=time.monotonic())
        if announce:  # written with the inventory of the objects about to be created: one write
            stack.step = ("Applying", f"applying {cond.counted(len(stack.desired), 'object')}")
        first_time = self._record_intent(stack, desired)
        if (first_time or announce) and not await write_status() and first_time:
            raise Fail("StatusNotWritten", "the inventory could not be recorded before applying; retrying",
                       retry=True)
        changes = await self._apply(stack, kfdef, desired, manager, first_time, settled)
        pruned = await self._prune(stack, manager, kfdef.force)
        stack.record_apply(changes)
        if not announce:  # a resync: also catch drift that no watch event showed
            await self._tracker.resync(stack.owner.label, self._registry.targets([stack]),
                                       unless_listed_since=built_at)
        self._healer.applied(stack)
        # One timer instead of polling: at the health deadline, objects still unhealthy turn into Degraded.
        deadline_in = health_deadline_in(stack, health_timeout=self._health_timeout, now=time.time())
        self._refresher.refresh_after(deadline_in + 1, stack.key)
        events = (*pruned, *self._events(stack, changes, build.upgraded, announce=announce))
        next_run: Retry | float = Retry(10.0)
        if all(change.refused for change in stack.failed_changes()):  # nothing a retry can change: the resync
            next_run = jittered(kfdef.interval or self._interval, 0.1)
            stack.resync_at = time.monotonic() + next_run
        return RunOutcome(StatusWrite.REQUIRED, events, changes, next_run=next_run)

    @staticmethod
    def _events(stack: Stack, changes: ChangeSet, upgraded: str, *, announce: bool) -> list[Event]:
        """The Events an apply calls for: render warnings and upgrades once per generation, objects adopted on a
        forged claim, and the apply's result when it wrote something or failed anew.

        A failure is not told again when every failed object was refused for its content and ``status.failures``
        reports them as they are now: nothing new to tell, and nothing a retry can change."""
        failures = stack.failed_changes()
        events = []
        if announce and stack.reported.get("warnings"):  # the generation in the message: one Event per generation
            events.append(Event("Normal", "RenderWarnings",
                                f"generation {stack.generation}: " + "; ".join(stack.reported["warnings"])))
        if upgraded and (changes.written or announce):
            events.append(Event("Normal", "ApiVersionsUpgraded", upgraded))
        events.extend(Event("Warning", "AdoptedUnclaimed", f"{change.ref}: {change.message}") for change in changes
                      if change.action is Action.ADOPTED and change.message.startswith(FORGED_STAMP_NOTE))
        settled_only = (all(change.refused for change in failures)
                        and stack.status.get("failures") == failures_of(stack))
        if changes.written or (failures and not settled_only):
            events.append(Event("Warning" if failures else "Normal", "ApplyFailed" if failures else "Applied",
                                changes.summary() + (f"; {cond.failure_summary(failures)}" if failures else "")))
        return events

    async def _settle_identity(self, stack: Stack, service_account: str) -> StackIdentity:
        """Who the stack acts as from now on; :class:`Fail` when that ServiceAccount does not exist."""
        stack.identity = self._identities.of(stack.owner.namespace, service_account)
        missing = await self._identities.unavailable(stack.identity)
        if missing is not None:
            raise Fail("ServiceAccountNotFound", f"{missing}: create it, or set spec.serviceAccountName to an "
                                                 "existing ServiceAccount of this namespace; nothing is applied "
                                                 "meanwhile", retry=True, base=10.0)
        return stack.identity

    @staticmethod
    def _record_intent(stack: Stack, desired: DesiredState) -> set[ObjectRef]:
        """Add the objects about to be applied for the first time to the inventory, to be written before applying
        them; returns the objects added.

        If the operator dies mid-apply and the KfDef is deleted before it comes back, the teardown still
        knows every object that may exist. Entries that were never created read as gone; objects held by
        someone else are skipped by prune and teardown (they check the claim), so a wider inventory is safe.
        """
        new = {ref for ref in stack.desired if ref not in stack.inventory}
        for ref in new:
            stack.inventory[ref] = InventoryEntry(version_of(desired.objects[ref]))
        return new

    async def _apply(self, stack: Stack, kfdef: KfDef, desired: DesiredState, manager: ResourceManager,
                     first_time: set[ObjectRef], settled: dict[ObjectRef, str]) -> ChangeSet:
        # Run-once objects applied before with this very content are not created again once gone.
        keep_absent = kept_absent(stack.owner, desired, {ref: entry.run_once for ref, entry in stack.inventory.items()})
        await self._tracker.watch(self._registry.targets([stack]))
        changes = await manager.apply_all(stack.owner, desired.served, desired.not_served_yet,
                                          ApplyOptions(force=kfdef.force, keep_absent=keep_absent, settled=settled))
        for change in changes:
            if change.ref not in stack.resources and change.live is not None:  # custom resources served now
                stack.resources[change.ref] = await self._discovery.resource(change.live["apiVersion"],
                                                                             change.ref.kind)
            if change.ref in stack.run_once and change.action in (Action.CREATED, Action.CONFIGURED,
                                                                   Action.UNCHANGED):
                stack.inventory[change.ref].run_once = applied_digest(stack.owner, desired, change.ref)
        await self._tracker.watch(self._registry.targets([stack]))
        for change in changes:
            # Never ours, so never in our inventory: another owner's, or refused the first time it was applied
            # (an identity that may not even read it could not delete it either). A CRD that was created but
            # never became Established failed with its live copy: it stays. So does an object refused for its
            # content (it reads as gone): its entry is not written again each time it is sent and refused.
            first_refusal = (change.action is Action.FAILED and change.live is None and change.ref in first_time
                             and not change.refused)
            if change.action is Action.CONFLICT or first_refusal:
                stack.inventory.pop(change.ref, None)
        return changes

    async def _prune(self, stack: Stack, manager: ResourceManager, force: bool) -> list[Event]:
        """Delete what the previous inventory holds and the desired state no longer does (``force``: Namespaces and
        CRDs holding objects the stack did not create too); the Events to post."""
        stale = {ref: entry.version for ref, entry in stack.inventory.items() if ref not in stack.desired}
        if not stale:
            return []
        pruned = await manager.prune(stack.owner, stale, force=force)
        for change in pruned:
            if change.action is Action.FAILED:  # stays in the inventory: retried by the next run or the teardown
                log.warning("%s: could not prune %s: %s", stack.owner, change.ref, change.message)
            else:
                stack.inventory.pop(change.ref, None)
        stack.record_prune(pruned)
        if not pruned.written:
            return []
        await self._tracker.retain(self._registry.targets(self._registry.stacks.values()))
        held = [f"{change.ref}: {change.message}" for change in pruned if change.action is Action.HELD]
        return [Event("Normal", "Pruned", f"pruned objects no longer rendered: {pruned.summary()}"),
                *([Event("Warning", "PruneHeld", "; ".join(held))] if held else [])]
