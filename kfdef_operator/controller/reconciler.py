"""The operator's core: one KfDef in, its whole stack applied, healed, reported and torn down.

:class:`Reconciler` is the coordinator the :class:`WorkQueue` calls. The operator's parts are built once, at
start-up, by the composition root (:func:`~kfdef_operator.controller.wiring.assemble`); the reconciler keeps the
KfDefs' latest bodies and the leadership switch, and hands each run to them:

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
from kfdef_operator.controller.builder import quietly
from kfdef_operator.controller.failures import Fail, explain
from kfdef_operator.controller.finalizer import patch_finalizers
from kfdef_operator.controller.outcome import Retry, RunOutcome, StatusWrite, failed
from kfdef_operator.controller.queue import WorkQueue
from kfdef_operator.controller.registry import Key
from kfdef_operator.controller.wiring import Parts
from kfdef_operator.runtime import metrics
from kfdef_operator.runtime.memory import release_free_memory
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.runtime.status import StatusWriter
from kfdef_operator.ssa.changeset import Action
from kfdef_operator.ssa.client import KubeApiError

log = logging.getLogger(__name__)


class Reconciler:
    """Coordinates a running operator's :class:`Parts` (:func:`~kfdef_operator.controller.wiring.assemble`); kopf
    handlers call :meth:`observe`."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self._gate = parts.gate
        self.queue = WorkQueue(self._work, gate=parts.gate, standby=self._prepare if parts.gate is not None else None)
        self._verified: set[Key] = set()  # KfDefs read afresh since this replica began leading
        self._bodies: dict[Key, JSON] = {}
        self._triggers: dict[Key, tuple[Any, ...]] = {}

    @property
    def stacks(self) -> dict[Key, Stack]:
        return self.parts.registry.stacks

    @property
    def writers(self) -> dict[Key, StatusWriter]:
        return self.parts.registry.writers

    async def start(self) -> None:
        await self.parts.discovery.refresh()
        self.parts.liveness.start()
        self.parts.housekeeper.start()

    def ready(self) -> bool:
        """Readiness: discovery is loaded, so KfDefs can be worked on."""
        return self.parts.discovery.cached("v1", "Namespace") is not None

    def alive(self) -> bool:
        """Liveness: the event loop and its threads make progress (controller/heartbeat.py)."""
        return self.parts.liveness.alive()

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
        self.parts.healer.halt()
        self.parts.refresher.halt()
        self.parts.registry.clear()
        self.queue.forget()
        for key in list(self._bodies):
            self.queue.request(key)

    async def stop(self) -> None:
        await self.queue.stop()
        await self.parts.healer.stop()
        self.parts.refresher.halt()
        await self.parts.tracker.close()
        await self.parts.housekeeper.stop()
        await self.parts.liveness.stop()
        self.parts.work_pool.shutdown()

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
            if previous is not None and previous[:3] != trigger[:3] and self.parts.builder.building(key):
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
        known = self.parts.registry.stacks.get(key)
        stack = self.parts.registry.stack_for(body)
        if stack is not known or (not deleting and stack.generation != (body["metadata"].get("generation") or 0)):
            self.queue.forget(key)  # a KfDef new here, or a new generation of it, backs off from the start
        writer = self.parts.registry.writers[key]
        try:
            outcome = await (self.parts.teardown.run(stack, body, writer.update) if deleting
                             else self.parts.apply_step.run(stack, body, writer.update))
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
        if outcome.status is not StatusWrite.NONE and not await self.parts.registry.writers[stack.key].update() and (
                outcome.status is StatusWrite.REQUIRED):
            raise Fail("StatusNotWritten", "the status could not be written (see the operator log); retrying",
                       retry=True)
        for event in outcome.events:
            await self.parts.events.record(stack.owner, event.type, event.reason, event.message)
        if outcome.released:
            await patch_finalizers(self.parts.kube, stack, add=False)
            await self._forget(stack.key)
        if isinstance(outcome.next_run, Retry):
            return self.queue.retry_delay(stack.key, base=outcome.next_run.base, cap=outcome.next_run.cap)
        if outcome.next_run is not None:
            self.queue.forget(stack.key)
        return outcome.next_run

    async def _read_afresh(self, key: Key) -> None:
        """The first run since this replica began leading reads its KfDef, status included, from the API server.

        The previous leader may have written after the last watch event arrived here; its inventory and status
        are the base of everything this replica writes.
        """
        try:
            body = await self.parts.kube.get(kfdef_path(*key))
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
        stack = self.parts.registry.stacks.get(key)
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
        stack = self.parts.registry.stack_for(body)
        try:
            kfdef = parse_kfdef(body)
            stack.suspended = kfdef.annotations.get(SUSPEND_ANNOTATION, "").lower() == "true"
            stack.take((await self.parts.builder.build(stack.owner, kfdef, body, quietly)).plan)
            await self.parts.tracker.watch(self.parts.registry.targets([stack]))
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

    # -- forgetting a KfDef ----------------------------------------------------------------

    def _release(self, key: Key) -> None:
        """Stop everything that writes for this KfDef: its heals, status refreshes and status writes; forget its
        failures.

        Synchronous, so that nothing starts for it once the watch says it is gone here (deleted, or moved to
        another shard, which may be writing for it already); :meth:`_forget` then cleans up.
        """
        self.queue.forget(key)
        stack = self.parts.registry.release(key)
        if stack is not None:
            self.parts.healer.drop(stack)

    async def _forget(self, key: Key) -> None:
        self._release(key)
        await self.parts.housekeeper.forget(*key)  # its render directory, cached render and sources
        stacks = self.parts.registry.stacks.values()
        self.parts.identities.retain(s.identity for s in stacks if s.identity is not None)
        # Watches of kinds no remaining KfDef holds are closed: at rest, only needed watches stay open.
        await self.parts.tracker.retain(self.parts.registry.targets(stacks))
