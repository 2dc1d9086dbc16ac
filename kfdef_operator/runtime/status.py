"""The one writer of a KfDef's status.

Every step reports into the KfDef's :class:`~kfdef_operator.runtime.stack.Stack`;
:class:`StatusWriter` computes the whole status from it (:func:`status_of`,
pure) and merge-patches what differs from the status last written, one write
at a time. Conditions therefore always describe the current generation's
results: ``Ready=True`` for generation N only once N is fully applied and
healthy, never from an older generation's outcomes while N is under way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

from kfdef_operator.api.names import kfdef_path
from kfdef_operator.api.types import JSON
from kfdef_operator.runtime import conditions as cond
from kfdef_operator.runtime import inventory, metrics
from kfdef_operator.runtime.events import EventRecorder
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.ssa.changeset import REFUSED_NOTE, Action
from kfdef_operator.ssa.client import KubeApiError, KubeClient
from kfdef_operator.ssa.foreign import spelled
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.live import LiveView
from kfdef_operator.ssa.webhooks import BLOCKED_BY_OWN_WEBHOOK, explain

log = logging.getLogger(__name__)

_COUNTS = ("total", "applied", "ready", "failed")


def readiness(stack: Stack, live: LiveView) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(failures, unhealthy) of a stack, from its results and the live health in the watch cache."""
    failures = [(str(c.ref), c.message) for c in stack.rejected]
    unhealthy = []
    for ref in stack.desired:
        change = stack.changes.get(ref)
        if change is not None and not change.ok:
            failures.append((str(ref), change.message))
            continue
        tracked = live.get(ref)
        if tracked is None:
            # Run-once objects that went away (a finished Job's TTL) and deliberately skipped ones are not missing.
            gone_on_purpose = ref in stack.run_once or (change is not None and change.action is Action.SKIPPED)
            if live.is_watched(ref.group, ref.kind, ref.namespace) and not gone_on_purpose:
                unhealthy.append((str(ref), "missing"))
        elif not tracked.health.ready:
            unhealthy.append((str(ref), explain(tracked.health.message, stack.webhooks)))
    # Objects held up by the stack's own webhooks first: the message lists only the first few, and those name
    # what to fix (the webhook and its Service), where the rest usually wait on them.
    unhealthy.sort(key=lambda item: BLOCKED_BY_OWN_WEBHOOK not in item[1])
    return failures, unhealthy


def health_clock(stack: Stack) -> float | None:
    """When (seconds since the epoch) the stack's objects began to count against the health deadline: when its
    status last recorded the reconcile of its generation done (the Reconciling condition with reason ``Done``, its
    ``lastUpdateTime``); None while it records none, as during the run that applies a new generation."""
    reconciling = _condition(stack.status, cond.RECONCILING) or {}
    if reconciling.get("reason") != "Done" or reconciling.get("observedGeneration") != stack.generation:
        return None
    return cond.seconds_of(reconciling.get("lastUpdateTime"))


def health_overdue(stack: Stack, *, health_timeout: float, now: float) -> bool:
    """Whether the stack's objects are past the health deadline at ``now`` (seconds since the epoch): as its status
    says already (``Degraded`` with ``HealthCheckTimeout`` for its generation: a deadline passed stays passed, also
    while suspended), or by its :func:`health_clock`. Both come from the status alone, so an operator restarted
    over the same state keeps the deadline where it was, and writes nothing."""
    degraded = _condition(stack.status, cond.DEGRADED) or {}
    if (degraded.get("status"), degraded.get("reason"), degraded.get("observedGeneration")) == (
            "True", "HealthCheckTimeout", stack.generation):
        return True
    started = health_clock(stack)
    return started is not None and now - started > health_timeout


def health_deadline_in(stack: Stack, *, health_timeout: float, now: float) -> float:
    """Seconds from ``now`` until the stack's health deadline passes: the whole ``health_timeout`` while its
    :func:`health_clock` has not started, 0 once it has passed."""
    started = health_clock(stack)
    return health_timeout if started is None else max(0.0, started + health_timeout - now)


def verdict(stack: Stack, live: LiveView, *, health_timeout: float, now: float) -> cond.Verdict:
    """The three conditions the stack's results call for (pure but for reading the cache); ``now`` in seconds
    since the epoch, as the conditions' timestamps."""
    if stack.deleting:
        message, stuck = stack.teardown or ("deleting the stack", False)
        return cond.terminating(message, stuck)
    if stack.failure is not None:
        result = cond.failed(stack.failure.reason, stack.failure.message, retrying=stack.failure.retrying)
    elif stack.step is not None:
        result = cond.progressing(*stack.step)
    elif stack.applied_generation != stack.generation:
        result = cond.progressing("Progressing", f"generation {stack.generation} is not applied yet")
    else:
        failures, unhealthy = readiness(stack, live)
        result = cond.applied(len(stack.desired) + len(stack.rejected), failures, unhealthy,
                              list(stack.problems.values()),
                              health_overdue=health_overdue(stack, health_timeout=health_timeout, now=now))
    if stack.suspended:
        result = replace(result, reconciling=cond.SUSPENDED)
    return result


def summary_of(stack: Stack, live: LiveView) -> tuple[JSON, list[JSON]]:
    """Counts for the whole stack and per application."""
    counts: dict[str, dict[str, int]] = {name: dict.fromkeys(_COUNTS, 0) for name in application_names(stack)}
    for ref, app in stack.application_of.items():
        row = counts[app]
        row["total"] += 1
        change = stack.changes.get(ref)
        if change is not None and change.ok:
            row["applied"] += 1
            tracked = live.get(ref)
            if tracked is not None and tracked.health.ready:
                row["ready"] += 1
        elif change is not None:
            row["failed"] += 1
    summary: JSON = {key: sum(r[key] for r in counts.values()) for key in _COUNTS}
    summary["total"] += len(stack.rejected)
    summary["failed"] += len(stack.rejected)
    summary["upgraded"] = (stack.reported.get("upgrades") or {}).get("count", 0)
    return summary, [{"name": name, **row} for name, row in counts.items()]


def inventory_of(stack: Stack, inventory_format: inventory.InventoryFormat) -> JSON:
    """``status.inventory``: each object the current render holds under its application, the rest as stale."""
    def rendered_by(ref: ObjectRef) -> str | None:
        return stack.application_of.get(ref) if ref in stack.desired else None

    return inventory_format.encode(stack.inventory, rendered_by, application_names(stack))


def application_names(stack: Stack) -> list[str]:
    """The applications in ``status.applications`` order: the KfDef's, then any other an object names."""
    return list(dict.fromkeys([*stack.applications, *stack.application_of.values()]))


def failures_of(stack: Stack) -> list[JSON]:
    """``status.failures``: the objects that failed or were never sent, with why (the first few)."""
    return [{"object": str(c.ref), "message": cond.truncate(c.message, 512),
             **({"application": stack.application_of[c.ref]} if c.ref in stack.application_of else {})}
            for c in stack.failed_changes()][: cond.MAX_FAILURES_LISTED]


def settled_refusals(stack: Stack, *, announce: bool, now: float) -> dict[ObjectRef, str]:
    """The objects whose refusal for their content ``status.failures`` reports (:func:`failures_of`), when nothing
    that could change the answer changed since: no new generation (the run does not ``announce`` one, nor follow a
    failure), the same source revisions, and no resync due by ``now`` (monotonic; the first run since a start is
    none). With the message reported, to report again."""
    status = stack.status
    resync_due = stack.resync_at is not None and now >= stack.resync_at
    if announce or resync_due or status.get("sources") != stack.reported.get("sources"):
        return {}
    desired = {str(ref): ref for ref in stack.desired}
    return {desired[failure["object"]]: failure["message"] for failure in status.get("failures") or []
            if failure.get("object") in desired and str(failure.get("message", "")).startswith(REFUSED_NOTE)}


def status_of(stack: Stack, live: LiveView, *, health_timeout: float, now: float,
              inventory_format: inventory.InventoryFormat) -> JSON:
    """The KfDef status the stack calls for, as a whole (the writer sends only what differs)."""
    result = verdict(stack, live, health_timeout=health_timeout, now=now)
    status: JSON = {
        "conditions": result.apply_to(list(stack.status.get("conditions") or []), stack.generation),
        "inventory": inventory_of(stack, inventory_format),
    }
    if not stack.deleting:
        status["observedGeneration"] = stack.generation
    if stack.applied:
        summary, rows = summary_of(stack, live)
        status.update(summary=summary, applications=rows, failures=failures_of(stack), **stack.reported)
        notes = [*stack.held, *adoption_warnings(stack, live)]
        if notes:  # first: they may call for action, the render's notes never do
            status["warnings"] = [*notes, *(stack.reported.get("warnings") or [])][: cond.MAX_FAILURES_LISTED]
    return status


ADOPTION_HINT = (". Remove those fields from the object, or set spec.force: true on the KfDef to replace its content "
                 "with exactly what the stack renders (force also lets an immutable-field change re-create objects "
                 "that may hold data).")


def adoption_warnings(stack: Stack, live: LiveView) -> list[str]:
    """A note for each adopted object that keeps fields other managers set and the stack does not render: the
    fields its last apply judged so (:attr:`Change.foreign`), as long as the watch cache still sees them held, so
    that a note goes as soon as its fields do. Sorted by object, each at most 512 characters."""
    notes = []
    for ref, change in sorted(stack.changes.items(), key=lambda item: str(item[0])):
        if not change.foreign or ref not in stack.desired:
            continue
        tracked = live.get(ref)
        if tracked is None and live.is_watched(ref.group, ref.kind, ref.namespace):
            continue  # gone
        fields = [field for field in change.foreign if tracked is None or field in tracked.foreign]
        if fields:
            notes.append(cond.truncate(f"{ref} was adopted and keeps fields the stack does not render, set by other "
                                       f"field managers: {spelled(fields)}", 512, hint=ADOPTION_HINT))
    return notes


def _differs(key: str, old: object, new: object) -> bool:
    if key == "conditions":
        return not cond.conditions_equal(old or [], new)  # type: ignore[arg-type]
    return old != new


def merge_patch(old: object, new: object) -> object:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``: objects patched key by key, a key ``new``
    lacks removed (null), anything else replaced whole. A nested object sent whole would be merged into the old one
    instead, keeping keys that ``new`` dropped (an inventory's old format, a run-once digest no longer held)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, object] = {key: None for key in old if key not in new}
    patch.update((key, merge_patch(old.get(key), value)) for key, value in new.items()
                 if key not in old or old[key] != value)
    return patch


class StatusWriter:
    """Writes one KfDef's status from its stack, one write at a time."""

    def __init__(self, kube: KubeClient, stack: Stack, live: LiveView, events: EventRecorder, *,
                 health_timeout: float, inventory_format: inventory.InventoryFormat) -> None:
        self._kube = kube
        self._stack = stack
        self._live = live
        self._events = events
        self._health_timeout = health_timeout
        self._inventory_format = inventory_format
        self._lock = asyncio.Lock()
        self._degraded_reason: str | None = None  # the reason exported in kfdef_degraded_reason

    async def update(self) -> bool:
        """Write what changed; False when the API server refused the write (it is retried with the next one)."""
        async with self._lock:
            stack = self._stack
            was_ready = _ready(stack.status)
            self._inventory_format.observe(stack.status.get("inventory"))
            while True:  # again only when a write changed what is known of the CRD's format: twice at most
                known = self._inventory_format.strings_kept
                wanted = status_of(stack, self._live, health_timeout=self._health_timeout, now=time.time(),
                                   inventory_format=self._inventory_format)
                diff = {key: value for key, value in wanted.items() if _differs(key, stack.status.get(key), value)}
                if not diff:  # nothing to write: the metrics still go out (a new leader's first run)
                    break
                patch = {key: merge_patch(stack.status.get(key), value) for key, value in diff.items()}
                try:
                    written = await self._kube.request("PATCH", kfdef_path(*stack.owner.key) + "/status",
                                                       body={"status": patch},
                                                       content_type="application/merge-patch+json")
                except KubeApiError as error:
                    if error.status == 404:  # the KfDef is gone
                        return True
                    log.error("%s: status not written: %s", stack.owner, error)
                    return False
                except (TimeoutError, OSError) as error:
                    log.error("%s: status not written: %s", stack.owner, error or type(error).__name__)
                    return False
                stack.status.update(diff)
                answer = written.get("status") if isinstance(written, dict) else None
                if "inventory" not in diff or not isinstance(answer, dict):
                    break
                kept = answer.get("inventory")
                stack.status["inventory"] = kept if isinstance(kept, dict) else {}  # what the CRD let through
                self._inventory_format.learn(diff["inventory"], kept)
                if self._inventory_format.strings_kept == known:
                    break
        self._export()
        ready = _ready(stack.status)
        if ready is not None and ready.get("status") == "True" and not (was_ready or {}).get("status") == "True":
            await self._events.record(stack.owner, "Normal", "Ready", ready.get("message", "ready"))
        return True

    def _export(self) -> None:
        owner = self._stack.owner
        for condition in self._stack.status.get("conditions") or []:
            metrics.CONDITION.labels(owner.namespace, owner.name, condition["type"]).set(
                1.0 if condition["status"] == "True" else 0.0)
        summary = self._stack.status.get("summary") or {}
        for state in _COUNTS:
            metrics.OBJECTS.labels(owner.namespace, owner.name, state).set(summary.get(state, 0))
        degraded = _condition(self._stack.status, cond.DEGRADED) or {}
        reason = degraded.get("reason", "") if degraded.get("status") == "True" else None
        if reason != self._degraded_reason:
            self._forget_degraded_reason()
            if reason is not None:
                metrics.DEGRADED_REASON.labels(owner.namespace, owner.name, reason).set(1.0)
            self._degraded_reason = reason

    def _forget_degraded_reason(self) -> None:
        if self._degraded_reason is not None:
            metrics.remove_series(metrics.DEGRADED_REASON, self._stack.owner.namespace, self._stack.owner.name,
                    self._degraded_reason)
            self._degraded_reason = None

    def forget(self) -> None:
        """The KfDef is gone: drop its metrics."""
        owner = self._stack.owner
        for condition_type in (cond.READY, cond.RECONCILING, cond.DEGRADED):
            metrics.remove_series(metrics.CONDITION, owner.namespace, owner.name, condition_type)
        for state in _COUNTS:
            metrics.remove_series(metrics.OBJECTS, owner.namespace, owner.name, state)
        self._forget_degraded_reason()


def _ready(status: JSON) -> JSON | None:
    return _condition(status, cond.READY)


def _condition(status: JSON, type_: str) -> JSON | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == type_), None)
