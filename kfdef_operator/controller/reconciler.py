"""The operator's core: one KfDef in, its whole stack applied, healed, reported and torn down.

:class:`Reconciler` is the coordinator the :class:`WorkQueue` calls. It builds the operator's shared parts and its
collaborators once, at start-up, and hands each run to them:

- :class:`~kfdef_operator.controller.registry.StackRegistry`: one :class:`~kfdef_operator.runtime.stack.Stack` and
  :class:`~kfdef_operator.runtime.status.StatusWriter` per KfDef, the watches the stacks need;
- :class:`~kfdef_operator.controller.builder.DesiredStateBuilder`: fetch, render, upgrade, desired state;
- :class:`~kfdef_operator.controller.apply_step.ApplyStep`: a leader's run (finalizer, identity, intent,
  staged apply, prune), returning its outcome;
- :class:`~kfdef_operator.controller.teardown.Teardown`: a deleted KfDef's stack torn down, returning its outcome;
- :class:`~kfdef_operator.controller.refresher.StatusRefresher`: status re-evaluated between runs.

KfDef watch events only *request* work (:meth:`Reconciler.observe`); the queue runs it, one run at a time per
KfDef, so a new generation preempts a pending retry and nothing waits behind kopf's handler progress. A run
returns a :class:`~kfdef_operator.controller.outcome.RunOutcome`, and an exception it raises becomes one;
:meth:`Reconciler._work` reports it in one place: metrics, status, Events, the finalizer of a stack torn down, and
the delay of the next run, backed off by the failures the queue counts for the KfDef.

With a ``gate`` (leader election), only the leader works; a standby runs :meth:`Reconciler._prepare` instead, the
pipeline up to the desired state and the watches of its kinds, writing nothing, so that it takes over warm.
:meth:`Reconciler.take_over` and :meth:`Reconciler.step_down` switch between the two.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Hashable
from typing import Any

from kfdef_operator.api.kfdef import InvalidKfDef, parse_kfdef
from kfdef_operator.api.names import (
    API_UPGRADE_ANNOTATION,
    REQUESTED_AT_ANNOTATION,
    SUSPEND_ANNOTATION,
    kfdef_path,
)
from kfdef_operator.api.types import JSON
from kfdef_operator.controller.apply_step import ApplyStep
from kfdef_operator.controller.builder import DesiredStateBuilder, quietly
from kfdef_operator.controller.failures import Fail, explain
from kfdef_operator.controller.finalizer import patch_finalizers
from kfdef_operator.controller.heartbeat import Liveness
from kfdef_operator.controller.housekeeping import Housekeeper
from kfdef_operator.controller.outcome import Retry, RunOutcome, StatusWrite, failed
from kfdef_operator.controller.queue import WorkQueue
from kfdef_operator.controller.refresher import StatusRefresher
from kfdef_operator.controller.registry import Key, StackRegistry
from kfdef_operator.controller.settings import Settings
from kfdef_operator.controller.teardown import Teardown
from kfdef_operator.controller.workpool import WorkPool
from kfdef_operator.runtime import metrics
from kfdef_operator.runtime.events import EventRecorder
from kfdef_operator.runtime.heal import Healer
from kfdef_operator.runtime.identity import Identities
from kfdef_operator.runtime.memory import release_free_memory
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.runtime.status import StatusWriter
from kfdef_operator.runtime.tracker import Tracker, instance_label
from kfdef_operator.ssa.changeset import Action
from kfdef_operator.ssa.client import KubeApiError, KubeClient
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.live import LiveObject, OwnWrites
from kfdef_operator.ssa.manager import ResourceManager

log = logging.getLogger(__name__)


class Reconciler:
    """Shared state of a running operator; kopf handlers call :meth:`observe`."""

    def __init__(self, kube: KubeClient, settings: Settings, *, gate: asyncio.Event | None = None) -> None:
        """``gate``: set while this replica leads (None: always leads, no leader election)."""
        self.kube = kube
        self.settings = settings
        self.discovery = Discovery(kube)
        self.tracker = Tracker(kube, self._on_object_event)
        own_writes = OwnWrites()  # what the applies wrote, so that the healer need not compare its watch events
        self.identities = Identities(kube, self.discovery, self.tracker, concurrency=settings.concurrency,
                                     default_service_account=settings.default_service_account,
                                     own_writes=own_writes)
        self.events = EventRecorder(kube)
        self.registry = StackRegistry(kube, self.tracker, self.events, health_timeout=settings.health_timeout,
                                      scoped=bool(settings.namespaces))
        self.refresher = StatusRefresher(self.registry, self.leading)
        self.healer = Healer(self.manager_for, self.tracker, self.events, self.registry.stacks, self.refresh,
                             own_writes)
        self._gate = gate
        self.queue = WorkQueue(self._work, gate=gate, standby=self._prepare if gate is not None else None)
        self._verified: set[Key] = set()  # KfDefs read afresh since this replica began leading
        self.work_pool = WorkPool(settings.work_threads)  # fetch and render, off the event loop's default executor
        metrics.watch_work_pool(lambda: self.work_pool.running, lambda: self.work_pool.waiting)
        self.liveness = Liveness(self.work_pool)
        self.builder = DesiredStateBuilder(self.discovery, self.work_pool, work_dir=settings.work_dir,
                                           fetch_options=settings.fetch_options, renderer=settings.renderer,
                                           api_upgrade_default=settings.api_upgrade_default,
                                           namespaces=settings.namespaces)
        self.housekeeper = Housekeeper(settings.work_dir, self.builder.source_cache, self.builder.render_cache,
                                       self.work_pool, live=lambda: set(self.registry.stacks))
        self.apply_step = ApplyStep(kube, self.builder, self.registry, self.refresher, self.identities, self.tracker,
                                    self.discovery, self.healer, interval=settings.interval,
                                    health_timeout=settings.health_timeout)
        self.teardown = Teardown(self.identities, self.healer, wave_timeout=settings.teardown_wave_timeout)
        self._bodies: dict[Key, JSON] = {}
        self._triggers: dict[Key, tuple[Any, ...]] = {}

    @property
    def stacks(self) -> dict[Key, Stack]:
        return self.registry.stacks

    @property
    def writers(self) -> dict[Key, StatusWriter]:
        return self.registry.writers

    async def start(self) -> None:
        await self.discovery.refresh()
        self.liveness.start()
        self.housekeeper.start()

    def ready(self) -> bool:
        """Readiness: discovery is loaded, so KfDefs can be worked on."""
        return self.discovery.cached("v1", "Namespace") is not None

    def alive(self) -> bool:
        """Liveness: the event loop and its threads make progress (controller/heartbeat.py)."""
        return self.liveness.alive()

    def leading(self) -> bool:
        return self._gate is None or self._gate.is_set()

    # -- leadership ----------------------------------------------------------------------

    def take_over(self) -> None:
        """This replica leads now: run every KfDef at once, each first read afresh (the last leader wrote last)."""
        assert self._gate is not None
        self._verified.clear()
        self._gate.set()
        for key in list(self._bodies):
            self.queue.request(key)

    def step_down(self) -> None:
        """This replica no longer leads: stop every write at once (synchronously), then keep caches warm.

        Stacks built while leading hold results another leader will change; they are dropped and built again
        as standby stacks.
        """
        assert self._gate is not None
        self._gate.clear()
        self.queue.interrupt()
        self.healer.halt()
        self.refresher.halt()
        self.registry.clear()
        self.queue.forget()
        for key in list(self._bodies):
            self.queue.request(key)

    async def stop(self) -> None:
        await self.queue.stop()
        await self.healer.stop()
        self.refresher.halt()
        await self.tracker.close()
        await self.housekeeper.stop()
        await self.liveness.stop()
        self.work_pool.shutdown()

    # -- KfDef events ------------------------------------------------------------------

    def observe(self, event_type: str | None, body: JSON) -> None:
        """A KfDef watch event: keep its latest body; request a run when something that matters changed.

        Status writes (our own) and other metadata churn change nothing that matters, so they cause no run. A new
        generation or the deletion interrupts a run still fetching or rendering the KfDef as it was.
        """
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if event_type == "DELETED":  # deleted, or no longer selected (moved to another shard): stop at once
            log.info("KfDef %s/%s is no longer served here (deleted, or no longer selected by this instance)", *key)
            self._release(key)
            self._bodies.pop(key, None)
            self._triggers.pop(key, None)
            self.queue.interrupt(key)
            self.queue.request(key)
            return
        self._bodies[key] = body
        annotations = meta.get("annotations") or {}
        trigger = (meta.get("uid"), meta.get("generation"), bool(meta.get("deletionTimestamp")),
                   annotations.get(SUSPEND_ANNOTATION), annotations.get(API_UPGRADE_ANNOTATION),
                   annotations.get(REQUESTED_AT_ANNOTATION))
        previous = self._triggers.get(key)
        if previous != trigger:
            self._triggers[key] = trigger
            if previous is not None and previous[:3] != trigger[:3] and self.builder.building(key):
                # Fetching or rendering what the KfDef no longer is (a new generation, or it is being deleted): the
                # fetch or render stops now, its work thread is free, and the run starts over for what it is.
                log.info("KfDef %s/%s changed while its sources were fetched or rendered: starting over", *key)
                self.queue.interrupt(key)
            self.queue.request(key)

    async def _work(self, key: Hashable) -> float | None:
        """One run of the KfDef: its apply or teardown, then its outcome reported (:meth:`_report`), once."""
        assert isinstance(key, tuple)
        if self._gate is not None and key not in self._verified:
            await self._read_afresh(key)
        body = self._bodies.get(key)
        if body is None:
            await self._forget(key)
            return None
        started = time.monotonic()
        deleting = bool(body["metadata"].get("deletionTimestamp"))
        known = self.registry.stacks.get(key)
        stack = self.registry.stack_for(body)
        if stack is not known or (not deleting and stack.generation != (body["metadata"].get("generation") or 0)):
            self.queue.forget(key)  # a KfDef new here, or a new generation of it, backs off from the start
        writer = self.registry.writers[key]
        try:
            outcome = await (self.teardown.run(stack, body, writer.update) if deleting
                             else self.apply_step.run(stack, body, writer.update))
            delay = await self._report(stack, outcome)
        except Exception as error:  # every error becomes a condition and an Event, then a retry
            self._log_failure(stack, error)
            delay = await self._report(stack, failed(error, deleting=deleting))
        failed_run = stack.failure or stack.failed_changes() or (stack.teardown and stack.teardown[1])
        metrics.RECONCILE_SECONDS.labels("error" if failed_run else "success").observe(time.monotonic() - started)
        release_free_memory()  # what the run decoded is freed: hand its pages back
        return delay

    async def _report(self, stack: Stack, outcome: RunOutcome) -> float | None:
        """Say what a run came to: metrics, status, Events, the finalizer of a stack torn down; the next run's delay.

        A status write the outcome requires and the API server refuses raises :class:`Fail` (StatusNotWritten)."""
        for change in outcome.changes:
            if change.action.wrote:
                metrics.OBJECTS_APPLIED.labels(change.action.value).inc()
            if change.action is Action.FAILED:
                metrics.APPLY_ERRORS.labels(metrics.kind_label(change.ref.kind)).inc()
        if outcome.failure is not None:
            stack.fail(outcome.failure)
        if outcome.status is not StatusWrite.NONE and not await self.registry.writers[stack.key].update() and (
                outcome.status is StatusWrite.REQUIRED):
            raise Fail("StatusNotWritten", "the status could not be written (see the operator log); retrying",
                       retry=True)
        for event in outcome.events:
            await self.events.record(stack.owner, event.type, event.reason, event.message)
        if outcome.released:
            await patch_finalizers(self.kube, stack, add=False)
            await self._forget(stack.key)
        if isinstance(outcome.next_run, Retry):
            return self.queue.retry_delay(stack.key, base=outcome.next_run.base, cap=outcome.next_run.cap)
        if outcome.next_run is not None:
            self.queue.forget(stack.key)
        return outcome.next_run

    def manager_for(self, stack: Stack) -> ResourceManager | None:
        """The resource manager acting as the stack's identity (None before its first reconcile or teardown)."""
        return self.identities.manager(stack.identity) if stack.identity is not None else None

    async def _read_afresh(self, key: Key) -> None:
        """The first run since this replica began leading reads its KfDef, status included, from the API server.

        The previous leader may have written after the last watch event arrived here; its inventory and status
        are the base of everything this replica writes.
        """
        try:
            body = await self.kube.get(kfdef_path(*key))
        except (KubeApiError, OSError, TimeoutError) as error:
            log.warning("KfDef %s/%s: could not read it afresh (using the watched copy): %s", *key, error)
            return
        self._verified.add(key)
        if key not in self._bodies:
            return  # deleted, or no longer selected by this replica, meanwhile
        if body is None:
            self._bodies.pop(key)
            return
        self._bodies[key] = body
        stack = self.registry.stacks.get(key)
        if stack is not None and stack.owner.uid == body["metadata"].get("uid"):
            stack.reload(body.get("status") or {})

    async def _prepare(self, key: Hashable) -> None:
        """A standby's run: what a reconcile reads and builds, nothing it writes (no status, event, finalizer).

        Sources are fetched, applications rendered (into the render cache), the desired state is built and the
        watches of its kinds are started, so that heals can be decided the moment this replica leads and its
        first reconcile only confirms the live state. Drift seen meanwhile is noted by the healer and checked
        after that reconcile. Problems are the leader's to report: they are only logged here.
        """
        assert isinstance(key, tuple)
        body = self._bodies.get(key)
        if body is None:
            await self._forget(key)
            return
        if body["metadata"].get("deletionTimestamp"):
            return
        stack = self.registry.stack_for(body)
        try:
            kfdef = parse_kfdef(body)
            stack.suspended = kfdef.annotations.get(SUSPEND_ANNOTATION, "").lower() == "true"
            stack.take((await self.builder.build(stack.owner, kfdef, body, quietly)).plan)
            await self.tracker.watch(self.registry.targets([stack]))
            log.info("%s: prepared as a standby: %d objects desired, their kinds watched", stack.owner,
                     len(stack.desired))
        except (Fail, InvalidKfDef) as error:
            log.debug("%s: standby preparation stopped: %s", stack.owner, error)
        except Exception as error:  # noqa: BLE001 (the leader reports it; a standby only logs)
            log.info("%s: standby preparation failed: %s", stack.owner, error or type(error).__name__)

    @staticmethod
    def _log_failure(stack: Stack, error: Exception) -> None:
        if isinstance(error, Fail):
            log.warning("%s: %s: %s", stack.owner, error.failure.reason, error.failure.message)
        else:
            log.error("%s: reconcile failed: %s", stack.owner, explain(error).message, exc_info=error)

    # -- readiness from watch events --------------------------------------------------------

    def refresh(self, stack: Stack) -> None:
        """Re-evaluate a stack's status soon (coalesced: one write for a burst of events); only while leading."""
        self.refresher.refresh(stack)

    def _on_object_event(self, event_type: str, ref: ObjectRef, live: LiveObject, obj: JSON | None) -> None:
        stack = self.registry.labelled(instance_label(live) or "")
        if stack is None or stack.deleting or ref not in stack.desired:
            return
        self.healer.observe(stack, event_type, ref, live, obj)
        if stack.changes:
            self.refresh(stack)

    # -- forgetting a KfDef ----------------------------------------------------------------

    def _release(self, key: Key) -> None:
        """Stop everything that writes for this KfDef: its heals, status refreshes and status writes; forget its
        failures.

        Synchronous, so that nothing starts for it once the watch says it is gone here (deleted, or moved to
        another shard, which may be writing for it already); :meth:`_forget` then cleans up.
        """
        self.queue.forget(key)
        stack = self.registry.release(key)
        if stack is not None:
            self.healer.drop(stack)

    async def _forget(self, key: Key) -> None:
        self._release(key)
        await self.housekeeper.forget(*key)  # its render directory, cached render and sources
        stacks = self.registry.stacks.values()
        self.identities.retain(s.identity for s in stacks if s.identity is not None)
        # Watches of kinds no remaining KfDef holds are closed: at rest, only needed watches stay open.
        await self.tracker.retain(self.registry.targets(stacks))
