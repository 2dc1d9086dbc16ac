"""Self-healing: put back exactly what was deleted or changed, fast, without fighting forever.

Driven by the tracker's watch events (no polling):

- ``DELETED`` of an object its KfDef still wants: re-create that object only,
  and only if it is still absent (an object someone else re-created meanwhile
  is theirs: reported, never taken over). The create itself is create-only
  (:meth:`ResourceManager.restore`), so an object that appears between the
  check and the create is not overwritten either. Objects inside a Namespace or of a
  CRD that is itself being deleted cannot come back before their parent; they
  wait, and the parent's own heal re-creates them once it is back.
- ``ADDED``/``MODIFIED``/``SYNC`` whose managed fields no longer match the
  desired state: re-assert them with server-side apply (fields other managers
  own, such as a user's extra label, stay). A suspicion from the local
  comparison is confirmed with a server-side dry-run first, so defaulting
  differences never cause writes.
- Never healed: objects annotated ``kfdef.apps.kubeflow.org/reconcile:
  disabled``, run-once objects (Jobs with a TTL) that went away, and
  everything of a suspended or deleting KfDef.
- A heal the API server refuses for the object's content is reported, not
  retried (sending the same object again cannot help).
- An object healed again and again (someone fights the operator) is backed
  off exponentially per object and named in the KfDef's Degraded condition
  until the fight has been over for a whole window.

Every request of a heal is made with the stack's identity (its
``ResourceManager``, which may impersonate the KfDef's service account).
Every heal result goes back into the stack (a healed object counts as applied
again, a failed heal as failed) and the stack's status is refreshed.
Bursts (a namespace's worth of deletes) are coalesced into one batch. Batches
run side by side, one object at most once at a time: a heal never waits for
an earlier one of another object (a slow answer, a CRD's Established wait).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kfdef_operator.api.names import RECONCILE_ANNOTATION, RECONCILE_DISABLED
from kfdef_operator.api.types import JSON
from kfdef_operator.backoff import exponential
from kfdef_operator.runtime import metrics
from kfdef_operator.runtime.delay_queue import DelayQueue
from kfdef_operator.runtime.events import EventRecorder
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.ssa.apply import is_content_refusal
from kfdef_operator.ssa.changeset import Action, Change, refusal
from kfdef_operator.ssa.claims import Claim
from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.ssa.drift import drifted
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.live import LiveObject, LiveView, OwnWrites
from kfdef_operator.ssa.manager import ResourceManager

log = logging.getLogger(__name__)

FIGHT_WINDOW_S = 60.0
FIGHT_THRESHOLD = 3      # heals of one object within the window before backing off
MAX_BACKOFF_S = 300.0
MAX_RETRY_S = 60.0       # longest wait between attempts of a heal the API server refuses
_PARENT_GONE_HINTS = ("being terminated", "is terminating", "not found", "could not find the requested resource",
                      "the server could not find", "not allowed while custom resource definition is terminating")

DELETED, DRIFT = "deleted", "drift"
#: Why a run-once object (a Job with a TTL) that went away is not put back.
RUN_ONCE = "run once: not re-created once gone"
#: A deleted object someone else created again before the heal: theirs.
TAKEN = "deleted, then created again by someone else; left alone (delete it to let the stack re-create it)"


@dataclass
class _Request:
    cause: str           # DELETED | DRIFT
    observed_at: float   # monotonic time the event arrived
    uid: str = ""        # of the object that was deleted: a live object with another uid is someone else's
    failures: int = 0    # failed attempts so far: retried after 0.5 s doubling to 60 s


def fight_backoff(heal_times: deque[float], now: float) -> float:
    """Delay before the next heal of an object healed at ``heal_times`` (pure; drops times past the window)."""
    while heal_times and now - heal_times[0] > FIGHT_WINDOW_S:
        heal_times.popleft()
    excess = len(heal_times) - FIGHT_THRESHOLD
    return 0.0 if excess < 0 else exponential(excess, base=1.0, cap=MAX_BACKOFF_S)


def _fight_key(ref: ObjectRef) -> str:
    return f"fight:{ref}"


class Healer:
    """Per-stack queues of objects to put back, drained by one worker task per stack.

    ``managers(stack)`` gives the resource manager acting with the stack's
    identity (None while it has none: nothing is healed then); ``stacks`` is the live registry of stacks by key;
    ``report(stack)`` is called after every heal result so that the stack's
    status is refreshed; ``own_writes`` says which versions of objects the operator's own applies produced.
    """

    def __init__(self, managers: Callable[[Stack], ResourceManager | None], live: LiveView, events: EventRecorder,
                 stacks: Mapping[tuple[str, str], Stack], report: Callable[[Stack], None],
                 own_writes: OwnWrites | None = None) -> None:
        self._managers = managers
        self._own_writes = own_writes or OwnWrites()
        self._live = live
        self._events = events
        self._stacks = stacks
        self._report = report
        self._pending: dict[tuple[str, str], DelayQueue[ObjectRef, _Request]] = defaultdict(DelayQueue)
        self._workers: dict[tuple[str, str], asyncio.Task[None]] = {}
        # The batches under way per stack, by the objects they heal.
        self._running: dict[tuple[str, str], dict[ObjectRef, asyncio.Task[None]]] = defaultdict(dict)
        self._history: dict[ObjectRef, deque[float]] = defaultdict(deque)
        self._in_sync: dict[ObjectRef, tuple[str, str]] = {}  # drift suspicions the server disproved
        # Live versions found in line with the desired state (its version) they were compared with: a status-only
        # update of such a version needs no new comparison while that desired state stands.
        self._matched: dict[ObjectRef, tuple[tuple[str, str], int]] = {}
        self._waiting_for_parent: dict[tuple[str, str], set[ObjectRef]] = defaultdict(set)
        self._deferred: dict[tuple[str, str], set[ObjectRef]] = defaultdict(set)
        self._background: set[asyncio.Task[None]] = set()

    def halt(self) -> None:
        """Cancel every heal in progress and drop the pending ones; synchronous, so nothing more is sent."""
        for task in self._tasks():
            task.cancel()
        self._workers.clear()
        self._running.clear()
        self._pending.clear()
        self._waiting_for_parent.clear()

    async def stop(self) -> None:
        tasks = self._tasks()
        self.halt()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _tasks(self, key: tuple[str, str] | None = None) -> list[asyncio.Task[None]]:
        """The workers, batches and background tasks (of one stack's heals: its worker and batches)."""
        if key is not None:
            worker = self._workers.get(key)
            return [*([worker] if worker else []), *set(self._running.get(key, {}).values())]
        batches = {task for running in self._running.values() for task in running.values()}
        return [*self._workers.values(), *batches, *self._background]

    def drop(self, stack: Stack) -> None:
        """Stop healing the stack at once: synchronous, so no heal of it starts after this returns (one whose
        request is already on the wire may still land). The cancelled tasks are awaited by :meth:`stop`."""
        for task in self._tasks(stack.key):
            task.cancel()
            self._background.add(task)
            task.add_done_callback(self._background.discard)
        self._workers.pop(stack.key, None)
        self._running.pop(stack.key, None)
        self._pending.pop(stack.key, None)
        self._waiting_for_parent.pop(stack.key, None)
        self._deferred.pop(stack.key, None)
        for ref in stack.desired:
            self._matched.pop(ref, None)

    async def forget(self, stack: Stack) -> None:
        """:meth:`drop`, and wait until the heals under way have stopped (before a teardown deletes)."""
        tasks = self._tasks(stack.key)
        self.drop(stack)
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- events --------------------------------------------------------------------

    def observe(self, stack: Stack, event_type: str, ref: ObjectRef, live: LiveObject, obj: JSON | None) -> None:
        """Decide whether a watch event about one of the stack's objects calls for a heal."""
        opted_out_here = live.meta["annotations"].get(RECONCILE_ANNOTATION) == RECONCILE_DISABLED
        if stack.suspended or stack.deleting or opted_out_here:
            return
        if event_type == "DELETED":
            if ref in stack.run_once:
                return  # meant to go away (a finished Job's TTL): never re-created
            if stack.changes:  # before the first apply, the reconcile in progress creates it anyway
                self._schedule(stack, ref, _Request(DELETED, time.monotonic(), live.uid))
            return
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return
        if stack.owner.claim(obj.get("metadata")) not in (Claim.OURS, Claim.ADOPTED):
            return
        sync_key = self._sync_key(obj)
        if self._matched.get(ref) == (sync_key, stack.desired.version):
            # The same generation, labels and annotations as a version found in line with this desired state: a
            # status update (a new CRD's or Deployment's several, during the first apply), nothing to compare.
            return
        if self._own_writes.produced(ref, live.resource_version):
            # The object as an apply of this operator's just left it (its answer had this version): in line.
            self._matched[ref] = (sync_key, stack.desired.version)
            return
        desired = self._stamped(stack, ref, adopted=stack.owner.claim(live.meta) is Claim.ADOPTED)
        digest_changed = not stack.owner.unchanged(live.meta, desired)
        if not stack.changes:
            # The first listing after a start, while the first apply runs: an object whose digest still
            # matches is skipped by that apply, so a drift made while the operator was down is only
            # caught here. Check it once the apply is done.
            if not digest_changed:
                if drifted(desired, obj):
                    self._deferred[stack.key].add(ref)
                else:
                    self._matched[ref] = (sync_key, stack.desired.version)
            return
        if digest_changed:
            change = stack.changes.get(ref)
            if change is not None and change.ok:
                self._schedule(stack, ref, _Request(DRIFT, time.monotonic()))
            return
        if not drifted(desired, obj):
            self._matched[ref] = (sync_key, stack.desired.version)
        elif self._in_sync.get(ref) != sync_key:
            self._schedule(stack, ref, _Request(DRIFT, time.monotonic()))

    def applied(self, stack: Stack) -> None:
        """The stack's apply finished: check the drift suspicions collected meanwhile."""
        now = time.monotonic()
        for ref in self._deferred.pop(stack.key, set()):
            if ref in stack.desired:
                self._schedule(stack, ref, _Request(DRIFT, now))

    @staticmethod
    def _stamped(stack: Stack, ref: ObjectRef, *, adopted: bool) -> JSON:
        resource = stack.resources.get(ref)
        return stack.owner.stamp(stack.desired[ref], namespaced=resource.namespaced if resource else True,
                                 adopted=adopted)

    @staticmethod
    def _sync_key(obj: JSON) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        # The uid too: an object deleted and created again starts at generation 1 with the same stamps.
        version = f'{meta.get("uid")}/{meta.get("generation") or meta.get("resourceVersion")}'
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        return version, repr(sorted(labels.items())) + repr(sorted(annotations.items()))

    def _schedule(self, stack: Stack, ref: ObjectRef, request: _Request) -> None:
        history = self._history[ref]
        delay = fight_backoff(history, request.observed_at)
        if delay:
            stack.problems[_fight_key(ref)] = (
                f"{ref} was healed {len(history)} times in {FIGHT_WINDOW_S:.0f}s: something keeps deleting or "
                f"changing it; backing off {delay:.0f}s. Annotate it {RECONCILE_ANNOTATION}={RECONCILE_DISABLED} "
                f"to take it over by hand")
            # The problem goes once a whole window passes without another heal.
            asyncio.get_running_loop().call_later(delay + FIGHT_WINDOW_S, self._fight_over, stack.key, ref)
            self._report(stack)
        pending = self._pending[stack.key]
        if ref not in pending:  # a request already pending for the object stands
            pending.put(ref, request, request.observed_at + delay)
        self._ensure_worker(stack.key)

    def _ensure_worker(self, key: tuple[str, str]) -> None:
        worker = self._workers.get(key)
        if worker is None or worker.done():
            self._workers[key] = asyncio.create_task(self._work(key), name=f"heal {key}")

    def _fight_over(self, key: tuple[str, str], ref: ObjectRef) -> None:
        stack = self._stacks.get(key)
        if stack is None or _fight_key(ref) not in stack.problems:
            return
        if fight_backoff(self._history[ref], time.monotonic()) == 0.0:
            del stack.problems[_fight_key(ref)]
            self._report(stack)

    # -- worker --------------------------------------------------------------------

    async def _work(self, key: tuple[str, str]) -> None:
        """Start a batch of the stack's due heals, over and over, until none is queued."""
        running = self._running[key]

        def idle(ref: ObjectRef) -> bool:  # an object being healed waits for that heal to end
            return ref not in running

        while True:
            await asyncio.sleep(0)  # let the rest of a burst of events arrive: one batch for all
            pending = self._pending.get(key)
            if not pending:
                return
            refs = pending.ready(time.monotonic(), idle)
            if refs:
                stack = self._stacks.get(key)
                if stack is None or stack.deleting or stack.suspended:
                    return
                due = {ref: pending.pop(ref) for ref in refs}
                batch = asyncio.create_task(self._run_batch(stack, due, running), name=f"heal batch {key}")
                running.update(dict.fromkeys(due, batch))
                continue
            await pending.wait(idle, at_least=0.01)

    async def _run_batch(self, stack: Stack, due: dict[ObjectRef, _Request],
                         running: dict[ObjectRef, asyncio.Task[None]]) -> None:
        try:
            await self._heal_batch(stack, due)
            self._report(stack)
        finally:
            for ref in due:
                running.pop(ref, None)
            pending = self._pending.get(stack.key)
            if pending:  # what waited for these objects may go now
                pending.wake()
                self._ensure_worker(stack.key)

    async def _heal_batch(self, stack: Stack, due: dict[ObjectRef, _Request]) -> None:
        parents = {ref: req for ref, req in due.items() if ref.kind in ("Namespace", "CustomResourceDefinition")}
        children = {ref: req for ref, req in due.items() if ref not in parents}
        await asyncio.gather(*(self._heal(stack, ref, req) for ref, req in parents.items()))
        await asyncio.gather(*(self._heal(stack, ref, req) for ref, req in children.items()))

    async def _heal(self, stack: Stack, ref: ObjectRef, request: _Request) -> None:
        resource = stack.resources.get(ref)
        if ref not in stack.desired or resource is None or stack.deleting or stack.suspended:
            return
        manager = self._managers(stack)
        if manager is None:
            return
        try:
            # A deletion the watch reported needs no read first while the watch still shows the object absent.
            change = await manager.restore(stack.owner, stack.desired[ref], resource, expected_uid=request.uid,
                                           known_absent=request.cause == DELETED and self._live.get(ref) is None,
                                           keep_absent=RUN_ONCE if ref in stack.run_once else None)
        except KubeApiError as error:
            await self._heal_failed(stack, manager, ref, request, error)
            return
        if change.action is Action.UNCHANGED and change.live is not None:  # the server disproved the suspicion
            self._in_sync[ref] = self._sync_key(change.live)
            return
        if change.action is Action.CONFLICT and request.cause == DELETED:
            stack.record_heal(Change(ref, Action.CONFLICT, TAKEN))
            return
        if change.action not in (Action.CREATED, Action.CONFIGURED) or change.live is None:
            return
        applied = change.live
        cause = DELETED if change.action is Action.CREATED else DRIFT
        elapsed = time.monotonic() - request.observed_at
        self._history[ref].append(time.monotonic())
        metrics.HEALS.labels(cause).inc()
        metrics.HEAL_SECONDS.observe(elapsed)
        verb = "re-created" if cause == DELETED else "re-asserted the managed fields of"
        log.info("healed %s of %s: %s it in %.0f ms", ref, stack.owner, verb, elapsed * 1000)
        stack.record_heal(change)
        self._post(stack, "Normal", "Healed", f"{verb} {ref} ({cause}) in {elapsed * 1000:.0f} ms")
        if ref.kind == "Namespace":
            await self._sweep(stack, lambda r: r.namespace == ref.name)
        elif ref.kind == "CustomResourceDefinition":
            await manager.wait_established(change)
            spec = applied.get("spec") or {}
            kind = (spec.get("names") or {}).get("kind")
            await self._sweep(stack, lambda r: r.group == spec.get("group") and r.kind == kind)

    def _post(self, stack: Stack, event_type: str, reason: str, message: str) -> None:
        """Post an event without holding up the heal."""
        task = asyncio.create_task(self._events.record(stack.owner, event_type, reason, message))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _heal_failed(self, stack: Stack, manager: ResourceManager, ref: ObjectRef, request: _Request,
                           error: KubeApiError) -> None:
        text = error.message.lower()
        parent_gone = any(hint in text for hint in _PARENT_GONE_HINTS) or error.status in (404, 405)
        if parent_gone and self._parent_in_stack(stack, ref):
            # The parent Namespace or CRD is going away; its own heal brings this back.
            self._waiting_for_parent[stack.key].add(ref)
            log.debug("heal of %s waits for its parent: %s", ref, error.message)
            return
        if is_content_refusal(error):
            # Sending the same object again cannot help: the next reconcile of a new generation, new sources or
            # the resync sends it again.
            log.warning("heal of %s of %s refused for its content: %s", ref, stack.owner, error)
            stack.record_heal(refusal(ref, f"heal failed: {manager.describe(error)}"))
            return
        delay = exponential(request.failures, base=0.5, cap=MAX_RETRY_S)
        log.warning("heal of %s of %s failed, retrying in %.1fs: %s", ref, stack.owner, delay, error)
        stack.record_heal(Change(ref, Action.FAILED, f"heal failed: {manager.describe(error)}"))
        # A failed heal is retried on its own backoff; it is not a fight (nothing was healed).
        retry = _Request(request.cause, request.observed_at, request.uid, request.failures + 1)
        self._pending[stack.key].put(ref, retry, time.monotonic() + delay)

    @staticmethod
    def _parent_in_stack(stack: Stack, ref: ObjectRef) -> bool:
        """Whether the Namespace or CRD this object lives in is one the stack itself re-creates.

        Only then is waiting for the parent's heal right; a parent outside the
        stack never comes back by itself, so the object is retried and reported.
        """
        if ref.namespace and ObjectRef("", "Namespace", "", ref.namespace) in stack.desired:
            return True
        return (ref.group, ref.kind) in stack.crd_kinds

    async def _sweep(self, stack: Stack, belongs: Callable[[ObjectRef], bool]) -> None:
        """Re-apply the children of a re-created parent that are missing."""
        waiting = self._waiting_for_parent.get(stack.key, set())
        missing = [ref for ref in stack.desired
                   if belongs(ref) and (ref in waiting or self._live.get(ref) is None)]
        for ref in missing:
            waiting.discard(ref)
        now = time.monotonic()
        await asyncio.gather(*(self._heal(stack, ref, _Request(DELETED, now)) for ref in missing))
