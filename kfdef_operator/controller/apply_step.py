"""A leader's run for a KfDef that is not being deleted: its desired state applied, the rest pruned, status written.

:class:`ApplyStep` takes a run from the parsed KfDef to its status: the finalizer first, then (unless suspended)
the identity settled, the desired state built (:class:`DesiredStateBuilder`), the intent recorded in the inventory,
the staged apply and the prune of that identity's :class:`ResourceManager`, the results reported as status and
Events. It answers when the next run is due: a retry backoff after failures, the resync interval after success.

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
from kfdef_operator.controller.refresher import StatusRefresher
from kfdef_operator.controller.registry import StackRegistry
from kfdef_operator.runtime import conditions as cond
from kfdef_operator.runtime import metrics
from kfdef_operator.runtime.events import EventRecorder
from kfdef_operator.runtime.heal import Healer
from kfdef_operator.runtime.identity import Identities, StackIdentity
from kfdef_operator.runtime.inventory import InventoryEntry
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.runtime.status import health_deadline_in
from kfdef_operator.runtime.tracker import Tracker
from kfdef_operator.ssa.apply import FORGED_STAMP_NOTE, ApplyOptions
from kfdef_operator.ssa.changeset import REFUSED_NOTE, Action, ChangeSet
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.inventory import ObjectRef, version_of
from kfdef_operator.ssa.manager import ResourceManager

log = logging.getLogger(__name__)


class ApplyStep:
    """Reconciles one KfDef's stack: ``interval`` is the default resync, ``health_timeout`` the health deadline."""

    def __init__(self, kube: KubeClient, builder: DesiredStateBuilder, registry: StackRegistry,
                 refresher: StatusRefresher, identities: Identities, tracker: Tracker, discovery: Discovery,
                 events: EventRecorder, healer: Healer, *, interval: float, health_timeout: float) -> None:
        self._kube = kube
        self._builder = builder
        self._registry = registry
        self._refresher = refresher
        self._identities = identities
        self._tracker = tracker
        self._discovery = discovery
        self._events = events
        self._healer = healer
        self._interval = interval
        self._health_timeout = health_timeout

    async def run(self, stack: Stack, body: JSON) -> float | None:
        """Reconcile the stack to the KfDef ``body``; returns seconds until the next run (None: on change only)."""
        writer = self._registry.writers[stack.key]
        try:
            kfdef = parse_kfdef(body)
        except InvalidKfDef as error:
            stack.begin(body["metadata"].get("generation", 0), announce=False)
            raise Fail("InvalidSpec", str(error), retry=False) from None
        if kfdef.generation != stack.generation:
            self._registry.reset_retries(stack.key)  # a new generation starts its backoff afresh
        await ensure_finalizer(self._kube, stack, body)
        stack.suspended = kfdef.annotations.get(SUSPEND_ANNOTATION, "").lower() == "true"
        if stack.suspended:
            stack.generation = kfdef.generation
            await writer.update()
            return None
        manager = self._identities.manager(await self._settle_identity(stack, kfdef.service_account_name))
        announce = stack.status.get("observedGeneration") != kfdef.generation or stack.failure is not None
        stack.begin(kfdef.generation, announce=announce)

        async def step(reason: str, message: str) -> None:
            if announce:
                stack.step = (reason, message)
                await writer.update()

        build = await self._builder.build(stack.owner, kfdef, body, step)
        stack.take(build.plan)
        desired, upgraded = build.desired, build.upgraded
        built_at = time.monotonic()  # a watch listing from now on compares the objects with this desired state
        # Before the run's first write of the report: the status still holds the last one.
        settled = self._settled_refusals(stack, announce=announce)
        if announce:  # written with the inventory of the objects about to be created: one write
            stack.step = ("Applying", f"applying {cond.counted(len(stack.desired), 'object')}")
        first_time = await self._record_intent(stack, desired)
        if announce and not first_time:
            await writer.update()
        changes = await self._apply(stack, kfdef, desired, manager, first_time, settled)
        await self._prune(stack, manager)
        stack.record_apply(changes)
        if not announce:  # a resync: also catch drift that no watch event showed
            await self._tracker.resync(stack.owner.label, self._registry.targets([stack]),
                                       unless_listed_since=built_at)
        self._healer.applied(stack)
        # One timer instead of polling: at the health deadline, objects still unhealthy turn into Degraded.
        deadline_in = health_deadline_in(stack, health_timeout=self._health_timeout, now=time.time())
        self._refresher.refresh_after(deadline_in + 1, stack.key)
        reported = stack.status.get("failures")
        if not await writer.update():
            raise Fail("StatusNotWritten", "the status could not be written (see the operator log); retrying",
                       retry=True)
        failures = stack.failed_changes()
        if announce and stack.reported.get("warnings"):  # the generation in the message: one Event per generation
            await self._events.record(stack.owner, "Normal", "RenderWarnings",
                                      f"generation {stack.generation}: " + "; ".join(stack.reported["warnings"]))
        # Refusals for content only, and the same as reported before: nothing to tell, nothing a retry can change.
        settled_only = all(change.refused for change in failures) and stack.status.get("failures") == reported
        if upgraded and (changes.written or announce):
            await self._events.record(stack.owner, "Normal", "ApiVersionsUpgraded", upgraded)
        for change in changes:
            if change.action is Action.ADOPTED and change.message.startswith(FORGED_STAMP_NOTE):
                await self._events.record(stack.owner, "Warning", "AdoptedUnclaimed",
                                          f"{change.ref}: {change.message}")
        if changes.written or (failures and not settled_only):
            level = "Warning" if failures else "Normal"
            await self._events.record(stack.owner, level, "ApplyFailed" if failures else "Applied",
                                      f"{changes.summary()}"
                                      + (f"; {cond.failure_summary(failures)}" if failures else ""))
        if not all(change.refused for change in failures):
            return self._registry.retry_delay(stack.key, base=10.0)
        self._registry.reset_retries(stack.key)
        resync = jittered(kfdef.interval or self._interval, 0.1)
        stack.resync_at = time.monotonic() + resync
        return resync

    @staticmethod
    def _settled_refusals(stack: Stack, *, announce: bool) -> dict[ObjectRef, str]:
        """The objects whose refusal for their content ``status.failures`` reports, when nothing that could change
        the answer changed since: no new generation (the run does not ``announce`` one, nor follow a failure), the
        same source revisions, and no resync due (the first run since a start is none). With the message reported,
        to report again."""
        status = stack.status
        resync_due = stack.resync_at is not None and time.monotonic() >= stack.resync_at
        if announce or resync_due or status.get("sources") != stack.reported.get("sources"):
            return {}
        desired = {str(ref): ref for ref in stack.desired}
        return {desired[failure["object"]]: failure["message"] for failure in status.get("failures") or []
                if failure.get("object") in desired and str(failure.get("message", "")).startswith(REFUSED_NOTE)}

    async def _settle_identity(self, stack: Stack, service_account: str) -> StackIdentity:
        """Who the stack acts as from now on; :class:`Fail` when that ServiceAccount does not exist."""
        stack.identity = self._identities.of(stack.owner.namespace, service_account)
        missing = await self._identities.unavailable(stack.identity)
        if missing is not None:
            raise Fail("ServiceAccountNotFound", f"{missing}: create it, or set spec.serviceAccountName to an "
                                                 "existing ServiceAccount of this namespace; nothing is applied "
                                                 "meanwhile", retry=True, base=10.0)
        return stack.identity

    async def _record_intent(self, stack: Stack, desired: DesiredState) -> set[ObjectRef]:
        """Add the objects about to be applied for the first time to the inventory, before applying them.

        If the operator dies mid-apply and the KfDef is deleted before it comes back, the teardown still
        knows every object that may exist. Entries that were never created read as gone; objects held by
        someone else are skipped by prune and teardown (they check the claim), so a wider inventory is safe.
        Returns the objects added.
        """
        new = {ref for ref in stack.desired if ref not in stack.inventory}
        if not new:
            return new
        for ref in new:
            stack.inventory[ref] = InventoryEntry(version_of(desired.objects[ref]))
        if not await self._registry.writers[stack.key].update():
            raise Fail("StatusNotWritten", "the inventory could not be recorded before applying; retrying",
                       retry=True)
        return new

    async def _apply(self, stack: Stack, kfdef: KfDef, desired: DesiredState, manager: ResourceManager,
                     first_time: set[ObjectRef], settled: dict[ObjectRef, str]) -> ChangeSet:
        # Run-once objects applied before with this very content are not created again once gone.
        keep_absent = kept_absent(stack.owner, desired, {ref: entry.run_once for ref, entry in stack.inventory.items()})
        await self._tracker.watch(self._registry.targets([stack]))
        changes = await manager.apply_all(stack.owner, desired.served, desired.not_served_yet,
                                          ApplyOptions(force=kfdef.force, keep_absent=keep_absent, settled=settled))
        for change in changes:
            if change.action.wrote:
                metrics.OBJECTS_APPLIED.labels(change.action.value).inc()
            if change.action is Action.FAILED:
                metrics.APPLY_ERRORS.labels(metrics.kind_label(change.ref.kind)).inc()
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

    async def _prune(self, stack: Stack, manager: ResourceManager) -> None:
        """Delete what the previous inventory holds and the desired state no longer does."""
        stale = {ref: entry.version for ref, entry in stack.inventory.items() if ref not in stack.desired}
        if not stale:
            return
        pruned = await manager.prune(stack.owner, stale)
        for change in pruned:
            if change.action is Action.FAILED:  # stays in the inventory: retried by the next run or the teardown
                log.warning("%s: could not prune %s: %s", stack.owner, change.ref, change.message)
            else:
                stack.inventory.pop(change.ref, None)
        if pruned.written:
            await self._tracker.retain(self._registry.targets(self._registry.stacks.values()))
            await self._events.record(stack.owner, "Normal", "Pruned", f"pruned objects no longer rendered: "
                                                                      f"{pruned.summary()}")
