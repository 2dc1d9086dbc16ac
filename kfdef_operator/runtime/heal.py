"""Self-healing: put back exactly what was deleted or changed, fast, without fighting forever.

Driven by the tracker's watch events (no polling). :class:`HealPolicy` (:mod:`~kfdef_operator.runtime.heal_policy`)
decides which events call for a heal, when it may start and what a failed one waits for; :class:`Healer` carries
its requests out:

- each through the stack's resource manager, as the stack's identity (:meth:`Identities.manager`, which may
  impersonate the KfDef's service account): :meth:`ResourceManager.restore` creates an absent object create-only
  and re-asserts a drifted one, by the apply's ownership rule (an object someone else holds or re-created
  meanwhile is theirs: reported when it replaced a deleted one, never taken over; an opted-out one is left);
- a Namespace or CRD put back is followed by what it holds that is missing (a CRD once it is Established):
  objects of a parent that is itself being deleted cannot come back before it, and wait for its heal;
- a heal refused for the object's content is reported, not retried (sending the same object again cannot help);
  any other failure is retried on the request's own backoff.

Every heal result goes back into the stack (a healed object counts as applied again, a failed heal as failed),
then ``report(stack)`` refreshes its status. Each stack's requests are queued on a
:class:`~kfdef_operator.runtime.keyed_worker.KeyedWorker`: a burst (a namespace's worth of deletes) is coalesced
into one batch, batches run side by side, one object at most once at a time, so a heal never waits for an earlier
one of another object (a slow answer, a CRD's Established wait).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping

from kfdef_operator.api.types import JSON
from kfdef_operator.runtime import metrics
from kfdef_operator.runtime.events import EventRecorder
from kfdef_operator.runtime.heal_policy import (
    DELETED,
    DRIFT,
    FIGHT_WINDOW_S,
    PARENT_KINDS,
    HealPolicy,
    HealRequest,
    Setback,
)
from kfdef_operator.runtime.identity import Identities
from kfdef_operator.runtime.keyed_worker import KeyedWorker, Run
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.ssa.changeset import Action, Change, refusal
from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.live import LiveObject, LiveView, OwnWrites
from kfdef_operator.ssa.manager import ResourceManager

log = logging.getLogger(__name__)

#: Why a run-once object (a Job with a TTL) that went away is not put back.
RUN_ONCE = "run once: not re-created once gone"
#: A deleted object someone else created again before the heal: theirs.
TAKEN = "deleted, then created again by someone else; left alone (delete it to let the stack re-create it)"


class Healer:
    """Per-stack queues of objects to put back, each drained by its stack's keyed worker.

    ``identities`` gives the resource manager of the identity a stack acts as (a stack has none before its first
    reconcile: nothing of it is healed then); ``live`` is the watch cache; ``stacks`` is the live registry of stacks
    by key; ``report(stack)`` is called after every heal result so that the stack's status is refreshed;
    ``own_writes`` says which versions of objects the operator's own applies produced.
    """

    def __init__(self, identities: Identities, live: LiveView, events: EventRecorder,
                 stacks: Mapping[tuple[str, str], Stack], report: Callable[[Stack], None],
                 own_writes: OwnWrites | None = None) -> None:
        self._identities = identities
        self._live = live
        self._events = events
        self._stacks = stacks
        self._report = report
        self._policy = HealPolicy(own_writes)
        # Per stack, its objects to put back, each due when its fight backoff or retry allows.
        self._workers: dict[tuple[str, str], KeyedWorker[ObjectRef, HealRequest]] = {}
        self._background: set[asyncio.Task[None]] = set()

    def halt(self) -> None:
        """Cancel every heal in progress and drop the pending ones; synchronous, so nothing more is sent."""
        self._cancel()

    async def stop(self) -> None:
        await asyncio.gather(*self._cancel(), return_exceptions=True)

    def drop(self, stack: Stack) -> None:
        """Stop healing the stack at once: synchronous, so no heal of it starts after this returns (one whose
        request is already on the wire may still land). The cancelled tasks are awaited by :meth:`stop`."""
        self._close(stack.key)
        self._policy.forget(stack)

    async def forget(self, stack: Stack) -> None:
        """:meth:`drop`, and wait until the heals under way have stopped (before a teardown deletes)."""
        tasks = self._close(stack.key)
        self.drop(stack)
        await asyncio.gather(*tasks, return_exceptions=True)

    def _cancel(self) -> list[asyncio.Task[None]]:
        """Close every worker and cancel the background tasks; the tasks cancelled."""
        tasks = [task for worker in self._workers.values() for task in worker.close()]
        tasks += self._background
        for task in self._background:
            task.cancel()
        self._workers.clear()
        self._policy.halt()
        return tasks

    def _close(self, key: tuple[str, str]) -> list[asyncio.Task[None]]:
        """Close the stack's worker; its cancelled tasks, also awaited by :meth:`stop`."""
        worker = self._workers.pop(key, None)
        tasks = worker.close() if worker is not None else []
        for task in tasks:
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        return tasks

    # -- events --------------------------------------------------------------------

    def observe(self, stack: Stack, event_type: str, live: LiveObject, obj: JSON | None) -> HealRequest | None:
        """Heal the object a watch event of the stack is about if the policy asks for it (:meth:`HealPolicy.decide`;
        ``obj``: the event's object); the heal scheduled, if any."""
        request = self._policy.decide(stack, event_type, live, obj, now=time.monotonic())
        if request is not None:
            self._schedule(stack, request)
        return request

    def applied(self, stack: Stack) -> None:
        """The stack's apply finished: check the drift suspicions collected meanwhile."""
        for request in self._policy.applied(stack, now=time.monotonic()):
            self._schedule(stack, request)

    def _schedule(self, stack: Stack, request: HealRequest) -> None:
        if request.held_back:  # a fight: named in the stack's problems until a whole window passes without a heal
            asyncio.get_running_loop().call_later(request.held_back + FIGHT_WINDOW_S, self._fight_over, stack.key,
                                                  request.ref)
            self._report(stack)
        worker = self._worker(stack.key)
        if request.ref in worker.queue:
            worker.wake()  # the request pending for the object stands; it may start now if it could not before
        else:
            worker.put(request.ref, request, request.due)

    def _worker(self, key: tuple[str, str]) -> KeyedWorker[ObjectRef, HealRequest]:
        """The stack's worker: a batch of its due heals at a time, an object in one batch at a time."""
        worker = self._workers.get(key)
        if worker is None:
            worker = KeyedWorker(functools.partial(self._start, key), name=f"heal {key}", at_least=0.01)
            self._workers[key] = worker
        return worker

    def _fight_over(self, key: tuple[str, str], ref: ObjectRef) -> None:
        stack = self._stacks.get(key)
        if stack is not None and self._policy.fight_over(stack, ref, now=time.monotonic()):
            self._report(stack)

    # -- heals ---------------------------------------------------------------------

    def _start(self, key: tuple[str, str], refs: list[ObjectRef]) -> list[Run[ObjectRef]]:
        """One batch of the stack's due heals (none while the stack is gone, deleting or suspended)."""
        stack = self._stacks.get(key)
        worker = self._workers.get(key)
        if stack is None or stack.deleting or stack.suspended or worker is None:
            return []
        due = [worker.queue.pop(ref) for ref in refs]
        return [Run(refs, self._heal_batch(stack, due), f"heal batch {key}")]

    async def _heal_batch(self, stack: Stack, due: list[HealRequest]) -> None:
        """Parents first (their children may need them back), then the rest; then the stack's status."""
        await asyncio.gather(*(self._heal(stack, request) for request in due if request.ref.kind in PARENT_KINDS))
        await asyncio.gather(*(self._heal(stack, request) for request in due
                               if request.ref.kind not in PARENT_KINDS))
        self._report(stack)

    async def _heal(self, stack: Stack, request: HealRequest) -> None:
        ref = request.ref
        resource = stack.resources.get(ref)
        if ref not in stack.desired or resource is None or stack.deleting or stack.suspended:
            return
        if stack.identity is None:
            return
        manager = self._identities.manager(stack.identity)
        try:
            # A deletion the watch reported needs no read first while the watch still shows the object absent.
            change = await manager.restore(stack.owner, stack.desired[ref], resource, expected_uid=request.uid,
                                           known_absent=request.cause == DELETED and self._live.get(ref) is None,
                                           keep_absent=RUN_ONCE if ref in stack.run_once else None)
        except KubeApiError as error:
            self._failed(stack, manager, request, error)
            return
        if change.action is Action.UNCHANGED and change.live is not None:
            self._policy.disproved(ref, change.live)
        elif change.action is Action.CONFLICT and request.cause == DELETED:
            stack.record_heal(Change(ref, Action.CONFLICT, TAKEN))
        elif change.action in (Action.CREATED, Action.CONFIGURED) and change.live is not None:
            await self._healed(stack, manager, request, change, change.live)

    async def _healed(self, stack: Stack, manager: ResourceManager, request: HealRequest, change: Change,
                      restored: JSON) -> None:
        """Count, record and announce a heal; then bring back what a parent put back holds."""
        ref = request.ref
        now = time.monotonic()
        elapsed = now - request.observed_at
        cause = DELETED if change.action is Action.CREATED else DRIFT
        self._policy.healed(ref, now=now)
        metrics.HEALS.labels(cause).inc()
        metrics.HEAL_SECONDS.observe(elapsed)
        verb = "re-created" if cause == DELETED else "re-asserted the managed fields of"
        log.info("healed %s of %s: %s it in %.0f ms", ref, stack.owner, verb, elapsed * 1000)
        stack.record_heal(change)
        self._post(stack, "Normal", "Healed", f"{verb} {ref} ({cause}) in {elapsed * 1000:.0f} ms")
        if ref.kind not in PARENT_KINDS:
            return
        if ref.kind == "CustomResourceDefinition":
            await manager.wait_established(change)
        missing = self._policy.children(stack, ref, restored, self._live)
        now = time.monotonic()
        await asyncio.gather(*(self._heal(stack, HealRequest(child, DELETED, now)) for child in missing))

    def _failed(self, stack: Stack, manager: ResourceManager, request: HealRequest, error: KubeApiError) -> None:
        ref = request.ref
        setback = self._policy.failed(stack, ref, error)
        if setback is Setback.PARENT:  # the parent's own heal brings this back
            log.debug("heal of %s waits for its parent: %s", ref, error.message)
            return
        if setback is Setback.CONTENT:  # the next reconcile of a new generation, new sources or the resync sends it
            log.warning("heal of %s of %s refused for its content: %s", ref, stack.owner, error)
            stack.record_heal(refusal(ref, f"heal failed: {manager.describe(error)}"))
            return
        delay = request.retry_delay
        log.warning("heal of %s of %s failed, retrying in %.1fs: %s", ref, stack.owner, delay, error)
        stack.record_heal(Change(ref, Action.FAILED, f"heal failed: {manager.describe(error)}"))
        worker = self._workers.get(stack.key)
        if worker is not None:  # else the stack was dropped meanwhile
            worker.put(ref, request.retried(), time.monotonic() + delay)

    def _post(self, stack: Stack, event_type: str, reason: str, message: str) -> None:
        """Post an event without holding up the heal."""
        task = asyncio.create_task(self._events.record(stack.owner, event_type, reason, message))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
