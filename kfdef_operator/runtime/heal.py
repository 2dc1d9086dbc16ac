"""Self-healing: put back exactly what was deleted or changed, fast, without fighting forever.

Driven by the tracker's watch events (no polling):

- ``DELETED`` of an object its KfDef still wants: re-apply that object only.
  Objects inside a Namespace or of a CRD that is itself being deleted cannot
  come back before their parent; they wait, and the parent's own heal
  re-creates them once it is back (the Namespace after it is really gone, the
  CRD once it is Established again).
- ``ADDED``/``MODIFIED`` whose managed fields no longer match the desired
  state: re-assert them with server-side apply (fields other managers own,
  such as a user's extra label, stay). A suspicion from the local comparison
  is confirmed with a server-side dry-run first, so defaulting differences
  never cause writes.
- An object annotated ``kfdef.apps.kubeflow.org/reconcile: disabled`` is left
  alone.
- An object healed again and again (someone fights the operator) is backed
  off exponentially per object and named in the KfDef's Degraded condition.

Bursts (a namespace's worth of deletes) are coalesced into one batch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kfdef_operator.runtime import metrics
from kfdef_operator.ssa.manager import FAILED, Outcome
from kfdef_operator.ssa.drift import comparable, drifted
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.runtime.ownership import ADOPTED_ANNOTATION, DIGEST_ANNOTATION, reconcile_disabled
from kfdef_operator.runtime.tracker import LiveObject

if TYPE_CHECKING:
    from kfdef_operator.controller.reconciler import Operator, Stack

log = logging.getLogger(__name__)

JSON = dict[str, Any]

FIGHT_WINDOW_S = 60.0
FIGHT_THRESHOLD = 3      # heals of one object within the window before backing off
MAX_BACKOFF_S = 300.0
_PARENT_GONE_HINTS = ("being terminated", "is terminating", "not found", "could not find the requested resource",
                      "the server could not find", "not allowed while custom resource definition is terminating")


@dataclass
class _Request:
    cause: str           # "deleted" | "drift"
    observed_at: float   # monotonic time the event arrived
    adopted: bool
    not_before: float = 0.0


def fight_backoff(heal_times: deque[float], now: float) -> float:
    """Delay before the next heal of an object healed at ``heal_times`` (pure)."""
    while heal_times and now - heal_times[0] > FIGHT_WINDOW_S:
        heal_times.popleft()
    excess = len(heal_times) - FIGHT_THRESHOLD
    # The exponent is bounded first: 2.0 ** 1100 overflows.
    return 0.0 if excess < 0 else min(2.0 ** min(excess, 32), MAX_BACKOFF_S)


class Healer:
    """Per-stack queues of objects to put back, drained by one worker task per stack."""

    def __init__(self, operator: "Operator") -> None:
        self._op = operator
        self._pending: dict[tuple[str, str], dict[ObjectRef, _Request]] = defaultdict(dict)
        self._workers: dict[tuple[str, str], asyncio.Task] = {}
        self._wake: dict[tuple[str, str], asyncio.Event] = {}
        self._history: dict[ObjectRef, deque[float]] = defaultdict(deque)
        self._in_sync: dict[ObjectRef, tuple[str, str]] = {}  # drift suspicions the server disproved
        self._waiting_for_parent: dict[tuple[str, str], set[ObjectRef]] = defaultdict(set)
        self._deferred: dict[tuple[str, str], dict[ObjectRef, bool]] = defaultdict(dict)  # ref -> adopted

    async def stop(self) -> None:
        for task in self._workers.values():
            task.cancel()
        await asyncio.gather(*self._workers.values(), return_exceptions=True)

    async def forget(self, stack: "Stack") -> None:
        task = self._workers.pop(stack.key, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._pending.pop(stack.key, None)
        self._waiting_for_parent.pop(stack.key, None)
        self._deferred.pop(stack.key, None)

    # -- events --------------------------------------------------------------------

    def observe(self, stack: "Stack", event_type: str, ref: ObjectRef, live: LiveObject, obj: JSON | None) -> None:
        if reconcile_disabled(live.meta):
            return
        adopted = live.meta["annotations"].get(ADOPTED_ANNOTATION) == "true"
        if event_type == "DELETED":
            if stack.outcomes:  # before the first apply, the reconcile in progress creates it anyway
                self._schedule(stack, ref, _Request("deleted", time.monotonic(), adopted))
            return
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return
        desired = self._op.desired_stamped(stack, ref, adopted=adopted)
        digest_changed = live.digest != desired["metadata"]["annotations"][DIGEST_ANNOTATION]
        if not stack.outcomes:
            # The first listing after a start, while the first apply runs: an object whose digest still
            # matches is skipped by that apply, so a drift made while the operator was down is only
            # caught here. Check it once the apply is done.
            if not digest_changed and drifted(desired, obj):
                self._deferred[stack.key][ref] = adopted
            return
        if digest_changed:
            if stack.outcomes.get(ref) is not None and stack.outcomes[ref].ok:
                self._schedule(stack, ref, _Request("drift", time.monotonic(), adopted))
            return
        if drifted(desired, obj) and self._in_sync.get(ref) != self._sync_key(obj):
            self._schedule(stack, ref, _Request("drift", time.monotonic(), adopted))

    def applied(self, stack: "Stack") -> None:
        """The stack's apply finished: check the drift suspicions collected meanwhile."""
        now = time.monotonic()
        for ref, adopted in self._deferred.pop(stack.key, {}).items():
            if ref in stack.desired:
                self._schedule(stack, ref, _Request("drift", now, adopted))

    @staticmethod
    def _sync_key(obj: JSON) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        version = str(meta.get("generation") or meta.get("resourceVersion"))
        return version, repr(sorted((meta.get("labels") or {}).items())) + repr(sorted((meta.get("annotations") or {}).items()))

    def _schedule(self, stack: "Stack", ref: ObjectRef, request: _Request) -> None:
        history = self._history[ref]
        delay = fight_backoff(history, request.observed_at)
        if delay:
            request.not_before = request.observed_at + delay
            stack.problems[f"fight:{ref}"] = (
                f"{ref} was healed {len(history)} times in {FIGHT_WINDOW_S:.0f}s: something keeps deleting or "
                f"changing it; backing off {delay:.0f}s. Annotate it kfdef.apps.kubeflow.org/reconcile=disabled "
                f"to take it over by hand")
        self._pending[stack.key].setdefault(ref, request)
        self._wake.setdefault(stack.key, asyncio.Event()).set()
        worker = self._workers.get(stack.key)
        if worker is None or worker.done():
            self._workers[stack.key] = asyncio.create_task(self._work(stack.key), name=f"heal {stack.key}")

    # -- worker --------------------------------------------------------------------

    async def _work(self, key: tuple[str, str]) -> None:
        wake = self._wake.setdefault(key, asyncio.Event())
        while True:
            wake.clear()
            await asyncio.sleep(0)  # let the rest of a burst of events arrive: one batch for all
            pending = self._pending.get(key) or {}
            now = time.monotonic()
            due = {ref: req for ref, req in pending.items() if req.not_before <= now}
            for ref in due:
                pending.pop(ref, None)
            if due:
                stack = self._op.stacks.get(key)
                if stack is None or stack.deleting:
                    return
                await self._heal_batch(stack, due)
                continue
            if not pending:
                return
            timeout = max(min(req.not_before for req in pending.values()) - now, 0.01)
            try:
                await asyncio.wait_for(wake.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    async def _heal_batch(self, stack: "Stack", due: dict[ObjectRef, _Request]) -> None:
        parents = {ref: req for ref, req in due.items() if ref.kind in ("Namespace", "CustomResourceDefinition")}
        children = {ref: req for ref, req in due.items() if ref not in parents}
        await asyncio.gather(*(self._heal(stack, ref, req) for ref, req in parents.items()))
        await asyncio.gather(*(self._heal(stack, ref, req) for ref, req in children.items()))

    async def _heal(self, stack: "Stack", ref: ObjectRef, request: _Request) -> Outcome | None:
        if ref not in stack.desired or stack.deleting:
            return None
        resource = stack.resources.get(ref)
        if resource is None:
            return None
        desired = self._op.desired_stamped(stack, ref, adopted=request.adopted)
        kube, engine = self._op.kube, self._op.engine
        try:
            if request.cause == "drift":
                live = await kube.get(resource.path_of(ref))
                if live is None:
                    request.cause = "deleted"
                elif ((live["metadata"].get("annotations") or {}).get(DIGEST_ANNOTATION)
                      == desired["metadata"]["annotations"][DIGEST_ANNOTATION]):
                    dry, _, _ = await engine.server_side_apply(ref, desired, resource, dry_run=True)
                    if comparable(dry) == comparable(live):
                        self._in_sync[ref] = self._sync_key(live)
                        return None
            applied, _, _ = await engine.server_side_apply(ref, desired, resource)
        except KubeApiError as error:
            return await self._heal_failed(stack, ref, request, error)
        elapsed = time.monotonic() - request.observed_at
        self._history[ref].append(time.monotonic())
        metrics.HEALS.inc(request.cause)
        metrics.HEAL_SECONDS.observe(elapsed)
        verb = "re-created" if request.cause == "deleted" else "re-asserted managed fields of"
        log.info("healed %s: %s in %.0f ms", ref, verb, elapsed * 1000)
        asyncio.create_task(self._op.events.record_for(
            stack.owner, "Normal", "Healed", f"{verb} {ref} ({request.cause}) in {elapsed * 1000:.0f} ms"))
        outcome = Outcome(ref, "created", live=applied)
        if ref.kind == "Namespace":
            await self._sweep(stack, lambda r: r.namespace == ref.name)
        elif ref.kind == "CustomResourceDefinition":
            await self._op.engine.wait_established(outcome)
            spec = applied.get("spec") or {}
            kind = (spec.get("names") or {}).get("kind")
            await self._sweep(stack, lambda r: r.group == spec.get("group") and r.kind == kind)
        return outcome

    async def _heal_failed(self, stack: "Stack", ref: ObjectRef, request: _Request, error: KubeApiError) -> None:
        text = error.message.lower()
        parent_gone = any(hint in text for hint in _PARENT_GONE_HINTS) or error.status in (404, 405)
        if parent_gone and self._parent_in_stack(stack, ref):
            # The parent Namespace or CRD is going away; its own heal brings this back.
            self._waiting_for_parent[stack.key].add(ref)
            log.debug("heal of %s waits for its parent: %s", ref, error.message)
            return None
        log.warning("heal of %s failed: %s", ref, error)
        stack.outcomes[ref] = Outcome(ref, FAILED, f"heal failed: {error.message}")
        self._history[ref].append(time.monotonic())
        request.observed_at = time.monotonic()
        self._schedule(stack, ref, request)
        return None

    @staticmethod
    def _parent_in_stack(stack: "Stack", ref: ObjectRef) -> bool:
        """Whether the Namespace or CRD this object lives in is one the stack itself re-creates.

        Only then is waiting for the parent's heal right; a parent outside the
        stack never comes back by itself, so the object is retried and reported.
        """
        if ref.namespace and ObjectRef("", "Namespace", "", ref.namespace) in stack.desired:
            return True
        return any(parent.kind == "CustomResourceDefinition"
                   and (stack.desired[parent].get("spec") or {}).get("group") == ref.group
                   and ((stack.desired[parent].get("spec") or {}).get("names") or {}).get("kind") == ref.kind
                   for parent in stack.desired)

    async def _sweep(self, stack: "Stack", belongs) -> None:
        """Re-apply the children of a re-created parent that are missing."""
        waiting = self._waiting_for_parent.get(stack.key, set())
        missing = [ref for ref in stack.desired
                   if belongs(ref) and (ref in waiting or self._op.tracker.get(ref) is None)]
        for ref in missing:
            waiting.discard(ref)
        now = time.monotonic()
        await asyncio.gather(*(self._heal(stack, ref, _Request("deleted", now, False)) for ref in missing))
