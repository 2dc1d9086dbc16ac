"""When to heal, decided without I/O: which watch events call for a heal, how long a fight holds one back, what a
failed heal waits for, and which objects come back with a parent.

:class:`HealPolicy` reads a stack (its desired state, results and lifecycle), the watch events' objects and the
watch cache, and is told the time; it answers with :class:`HealRequest` values, which the healer
(:mod:`~kfdef_operator.runtime.heal`) carries out. The rules:

- ``DELETED`` of an object its KfDef still wants: put it back; not a run-once object (a Job with a TTL: meant to
  go away), nor before the stack's first apply has ended (that apply creates it anyway).
- ``ADDED``/``MODIFIED``/``SYNC`` of an object the stack holds (its own or adopted) whose digest or managed fields
  no longer match the desired state (:func:`~kfdef_operator.ssa.drift.drifted`, a local comparison): re-assert
  it. Drift seen before the stack's first apply has ended (the first listing after a start, a standby's watches)
  is checked once that apply is done (:meth:`HealPolicy.applied`): an object whose digest still matches is
  skipped by that apply, so a drift made while the operator was down is only caught here.
- Never an object a person opted out, nor anything of a suspended or deleting stack.
- An object healed :data:`FIGHT_THRESHOLD` times within :data:`FIGHT_WINDOW_S` (someone fights the operator) is
  held back exponentially (:func:`fight_backoff`) and named in the stack's problems (its Degraded condition) until
  a whole window passes without another heal of it.
- A heal that failed (:meth:`HealPolicy.failed`) waits for its parent Namespace or CRD when that is going away and
  the stack brings it back; is reported, not retried, when refused for its content; else is retried after 0.5 s,
  doubling to :data:`MAX_RETRY_S` (not a fight: nothing was healed).

What it remembers, so that the same event is not judged twice: live versions found in line with the desired state
they were compared with (a status-only update of such a version needs no new comparison while that desired state
stands; a comparison decodes, stamps and walks the desired object, and a CRD's schema weighs hundreds of KiB), the
versions the operator's own applies produced (:class:`~kfdef_operator.ssa.live.OwnWrites`), suspicions the server
disproved with a dry run, the drift deferred until a stack's first apply ends, the heal times of each object, and
the objects waiting for their parent's heal.
"""

from __future__ import annotations

import enum
from collections import defaultdict, deque
from dataclasses import dataclass, replace

from kfdef_operator.api.names import RECONCILE_ANNOTATION, RECONCILE_DISABLED
from kfdef_operator.api.types import JSON
from kfdef_operator.backoff import exponential
from kfdef_operator.runtime.ownership import opted_out
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.ssa.apply import is_content_refusal
from kfdef_operator.ssa.claims import Claim
from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.ssa.drift import drifted
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.live import LiveObject, LiveView, OwnWrites

FIGHT_WINDOW_S = 60.0
FIGHT_THRESHOLD = 3      # heals of one object within the window before backing off
MAX_BACKOFF_S = 300.0
MAX_RETRY_S = 60.0       # longest wait between attempts of a heal the API server refuses
#: Kinds whose objects hold others: healed before the rest of a batch, and followed by what they hold.
PARENT_KINDS = ("Namespace", "CustomResourceDefinition")
_PARENT_GONE_HINTS = ("being terminated", "is terminating", "not found", "could not find the requested resource",
                      "the server could not find", "not allowed while custom resource definition is terminating")

DELETED, DRIFT = "deleted", "drift"

Key = tuple[str, str]


@dataclass(frozen=True)
class HealRequest:
    """A heal of ``ref`` asked for by an event that arrived at ``observed_at`` (monotonic), for its ``cause``."""

    ref: ObjectRef
    cause: str           # DELETED | DRIFT
    observed_at: float
    uid: str = ""        # of the object that was deleted: a live object with another uid is someone else's
    failures: int = 0    # failed attempts so far
    held_back: float = 0.0  # seconds a fight over the object holds the heal back

    @property
    def due(self) -> float:
        """When the heal may first start (monotonic); a retry is due :attr:`retry_delay` after the attempt failed."""
        return self.observed_at + self.held_back

    @property
    def retry_delay(self) -> float:
        """Seconds before the next attempt after this one failed: 0.5 doubling to :data:`MAX_RETRY_S`."""
        return exponential(self.failures, base=0.5, cap=MAX_RETRY_S)

    def retried(self) -> HealRequest:
        """The request once more after a failed attempt."""
        return replace(self, failures=self.failures + 1)


class Setback(enum.Enum):
    """What a heal that failed waits for."""

    PARENT = "its parent's heal"      # the Namespace or CRD it lives in is going away, and the stack brings it back
    CONTENT = "a new desired state"   # refused for its content: sending it again unchanged cannot help
    RETRY = "its retry"               # anything else: tried again on its own backoff


def fight_backoff(heal_times: deque[float], now: float) -> float:
    """Delay before the next heal of an object healed at ``heal_times`` (pure; drops times past the window)."""
    while heal_times and now - heal_times[0] > FIGHT_WINDOW_S:
        heal_times.popleft()
    excess = len(heal_times) - FIGHT_THRESHOLD
    return 0.0 if excess < 0 else exponential(excess, base=1.0, cap=MAX_BACKOFF_S)


def parent_in_stack(stack: Stack, ref: ObjectRef) -> bool:
    """Whether the Namespace or CRD this object lives in is one the stack itself re-creates.

    Only then is waiting for the parent's heal right; a parent outside the
    stack never comes back by itself, so the object is retried and reported.
    """
    if ref.namespace and ObjectRef("", "Namespace", "", ref.namespace) in stack.desired:
        return True
    return (ref.group, ref.kind) in stack.crd_kinds


def _fight_key(ref: ObjectRef) -> str:
    return f"fight:{ref}"


def _sync_key(obj: JSON) -> tuple[str, str]:
    """What tells one version of a live object from another for drift: identity, generation, stamps."""
    meta = obj.get("metadata") or {}
    # The uid too: an object deleted and created again starts at generation 1 with the same stamps.
    version = f'{meta.get("uid")}/{meta.get("generation") or meta.get("resourceVersion")}'
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return version, repr(sorted(labels.items())) + repr(sorted(annotations.items()))


class HealPolicy:
    """The healer's decisions and their memory; ``own_writes`` says which versions the operator's applies produced."""

    def __init__(self, own_writes: OwnWrites | None = None) -> None:
        self._own_writes = own_writes or OwnWrites()
        self._history: dict[ObjectRef, deque[float]] = defaultdict(deque)
        self._in_sync: dict[ObjectRef, tuple[str, str]] = {}  # drift suspicions the server disproved
        # Live versions found in line with the desired state (its version) they were compared with.
        self._matched: dict[ObjectRef, tuple[tuple[str, str], int]] = {}
        self._deferred: dict[Key, set[ObjectRef]] = defaultdict(set)
        self._waiting_for_parent: dict[Key, set[ObjectRef]] = defaultdict(set)

    def decide(self, stack: Stack, event_type: str, live: LiveObject, obj: JSON | None, *,
               now: float) -> HealRequest | None:
        """The heal a watch event about one of the stack's objects calls for, if any (``obj``: the event's object).

        A fight over the object is named in the stack's problems as the request is made."""
        ref = live.ref
        if stack.suspended or stack.deleting or opted_out(live.meta):
            return None
        if event_type == "DELETED":
            if ref in stack.run_once or not stack.changes:
                return None  # meant to go away; or the first apply, still under way, creates it anyway
            if self._own_writes.deleted_to_recreate(ref, live.uid):
                return None  # an apply re-creates it (an immutable field changed): a heal would only race it
            return self._request(stack, ref, DELETED, now, live.uid)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return None
        if stack.owner.claim(obj.get("metadata")) not in (Claim.OURS, Claim.ADOPTED):
            return None
        sync_key = _sync_key(obj)
        if self._matched.get(ref) == (sync_key, stack.desired.version):
            # The same generation, labels and annotations as a version found in line with this desired state: a
            # status update (a new CRD's or Deployment's several, during the first apply), nothing to compare.
            return None
        if self._own_writes.produced(ref, live.resource_version):
            # The object as an apply of this operator's just left it (its answer had this version): in line.
            self._matched[ref] = (sync_key, stack.desired.version)
            return None
        resource = stack.resources.get(ref)
        desired = stack.owner.stamp(stack.desired[ref], namespaced=resource.namespaced if resource else True,
                                    adopted=stack.owner.claim(live.meta) is Claim.ADOPTED)
        digest_changed = not stack.owner.unchanged(live.meta, desired)
        if not stack.changes:  # the first apply is under way: its objects whose digest matches are checked after it
            if not digest_changed:
                if drifted(desired, obj):
                    self._deferred[stack.key].add(ref)
                else:
                    self._matched[ref] = (sync_key, stack.desired.version)
            return None
        if digest_changed:
            change = stack.changes.get(ref)
            return self._request(stack, ref, DRIFT, now) if change is not None and change.ok else None
        if not drifted(desired, obj):
            self._matched[ref] = (sync_key, stack.desired.version)
            return None
        return None if self._in_sync.get(ref) == sync_key else self._request(stack, ref, DRIFT, now)

    def applied(self, stack: Stack, *, now: float) -> list[HealRequest]:
        """The stack's apply finished: the drift suspicions collected meanwhile, to check."""
        return [self._request(stack, ref, DRIFT, now) for ref in self._deferred.pop(stack.key, set())
                if ref in stack.desired]

    def disproved(self, ref: ObjectRef, live: JSON) -> None:
        """A server-side dry run found ``live`` in line: its version is not suspected of drift again."""
        self._in_sync[ref] = _sync_key(live)

    def healed(self, ref: ObjectRef, *, now: float) -> None:
        """``ref`` was put back at ``now``: one more heal towards a fight."""
        self._history[ref].append(now)

    def fight_over(self, stack: Stack, ref: ObjectRef, *, now: float) -> bool:
        """Whether the fight over ``ref`` named in the stack's problems has ended by ``now``; its problem goes then."""
        if _fight_key(ref) not in stack.problems or fight_backoff(self._history[ref], now) != 0.0:
            return False
        del stack.problems[_fight_key(ref)]
        return True

    def failed(self, stack: Stack, ref: ObjectRef, error: KubeApiError) -> Setback:
        """What a heal of ``ref`` the API server answered with ``error`` waits for (one waiting for its parent is
        remembered, and healed with it: :meth:`children`)."""
        text = error.message.lower()
        parent_gone = any(hint in text for hint in _PARENT_GONE_HINTS) or error.status in (404, 405)
        if parent_gone and parent_in_stack(stack, ref):
            self._waiting_for_parent[stack.key].add(ref)
            return Setback.PARENT
        return Setback.CONTENT if is_content_refusal(error) else Setback.RETRY

    def children(self, stack: Stack, parent: ObjectRef, restored: JSON, live: LiveView) -> list[ObjectRef]:
        """The stack's objects that a re-created parent (``restored``: the Namespace or CRD as put back) holds and
        that are missing: those whose heal waits for it, and those the watch cache does not show."""
        spec = restored.get("spec") or {}
        served = (spec.get("group"), (spec.get("names") or {}).get("kind"))  # a CRD's: its custom resources

        def belongs(ref: ObjectRef) -> bool:
            return ref.namespace == parent.name if parent.kind == "Namespace" else (ref.group, ref.kind) == served

        waiting = self._waiting_for_parent.get(stack.key, set())
        missing = [ref for ref in stack.desired if belongs(ref) and (ref in waiting or live.get(ref) is None)]
        waiting.difference_update(missing)
        return missing

    def forget(self, stack: Stack) -> None:
        """The stack is no longer healed here: what was remembered for it goes."""
        self._waiting_for_parent.pop(stack.key, None)
        self._deferred.pop(stack.key, None)
        for ref in stack.desired:
            self._matched.pop(ref, None)

    def halt(self) -> None:
        """Every pending heal was dropped: no object waits for its parent's any more."""
        self._waiting_for_parent.clear()

    def _request(self, stack: Stack, ref: ObjectRef, cause: str, now: float, uid: str = "") -> HealRequest:
        """A request for ``ref``, held back (and the fight named in the stack's problems) while a fight lasts."""
        heals = self._history[ref]
        held_back = fight_backoff(heals, now)
        if held_back:
            stack.problems[_fight_key(ref)] = (
                f"{ref} was healed {len(heals)} times in {FIGHT_WINDOW_S:.0f}s: something keeps deleting or "
                f"changing it; backing off {held_back:.0f}s. Annotate it {RECONCILE_ANNOTATION}={RECONCILE_DISABLED} "
                f"to take it over by hand")
        return HealRequest(ref, cause, now, uid, held_back=held_back)
