"""KfDef status: conditions and summaries (pure).

Conditions follow the Kubernetes API conventions (no phases):

- ``Ready``: True once every object is applied and healthy.
- ``Reconciling``: True while the operator works on a generation (abnormal-true,
  as in kstatus/Flux).
- ``Degraded``: True when something needs a person: invalid spec, source or
  render failure, objects the API server refused, conflicts, heal fights,
  stuck teardown.

``lastTransitionTime`` changes only when a condition's status changes;
``lastUpdateTime`` (kfctl's field) whenever its reason or message does.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.changeset import Change

READY, RECONCILING, DEGRADED = "Ready", "Reconciling", "Degraded"
MAX_FAILURES_LISTED = 50
MAX_MESSAGE = 1024


_TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime(_TIMESTAMP)


def seconds_of(timestamp: object) -> float | None:
    """A condition's timestamp (as :func:`now` writes it) in seconds since the epoch; None when it is not one."""
    try:
        return datetime.datetime.strptime(str(timestamp), _TIMESTAMP).replace(tzinfo=datetime.UTC).timestamp()
    except ValueError:
        return None


def truncate(text: str, limit: int = MAX_MESSAGE, *, hint: str = "") -> str:
    """``text`` then ``hint`` in at most ``limit`` characters: the text is cut (ending in …), never the hint.

    The hint says what to do next ("Retrying with backoff.", "see status.failures for all"): cutting it
    would leave the person on call with the problem and without the way out.
    """
    if len(text) + len(hint) <= limit:
        return text + hint
    room = max(limit - len(hint), 1)
    return text[: room - 1] + "…" + hint[: limit - room]


def counted(count: int, noun: str) -> str:
    """``1 source``, ``3 sources``: a count with its noun in the right number."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def set_condition(conditions: list[JSON], type_: str, status: bool, reason: str, message: str,
                  generation: int | None, timestamp: str | None = None) -> list[JSON]:
    """A new condition list with ``type_`` set; other conditions untouched."""
    timestamp = timestamp or now()
    value = "True" if status else "False"
    message = truncate(message)
    previous = next((c for c in conditions if c.get("type") == type_), None)
    condition = {"type": type_, "status": value, "reason": reason, "message": message,
                 "observedGeneration": generation,
                 "lastTransitionTime": timestamp, "lastUpdateTime": timestamp}
    if previous is not None:
        if previous.get("status") == value:
            condition["lastTransitionTime"] = previous.get("lastTransitionTime", timestamp)
            if previous.get("reason") == reason and previous.get("message") == message:
                condition["lastUpdateTime"] = previous.get("lastUpdateTime", timestamp)
    if generation is None:
        condition.pop("observedGeneration")
    return [c for c in conditions if c.get("type") != type_] + [condition]


def conditions_equal(a: list[JSON], b: list[JSON]) -> bool:
    """Equal ignoring timestamps (what decides whether a status write is needed)."""
    def key(conditions: list[JSON]) -> list[tuple[Any, ...]]:
        return sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message"),
                       c.get("observedGeneration")) for c in conditions)
    return key(a) == key(b)


@dataclass(frozen=True)
class Verdict:
    """The three conditions for one moment of a KfDef's life."""

    ready: tuple[bool, str, str]
    reconciling: tuple[bool, str, str]
    degraded: tuple[bool, str, str]

    def apply_to(self, conditions: list[JSON], generation: int | None) -> list[JSON]:
        timestamp = now()
        for type_, (status, reason, message) in ((READY, self.ready), (RECONCILING, self.reconciling),
                                                 (DEGRADED, self.degraded)):
            conditions = set_condition(conditions, type_, status, reason, message, generation, timestamp)
        return conditions


NOT_DEGRADED = (False, "AsExpected", "no problems found")
SUSPENDED = (False, "Suspended", "reconciliation is suspended by the annotation kfdef.apps.kubeflow.org/suspend; "
                                 "nothing is applied, healed or pruned until it is removed")


def progressing(step: str, message: str) -> Verdict:
    """Work under way: the step (``Fetching``, ``Rendering``, ``Applying``...) is the reason of Ready too, so
    ``kubectl get kfdef`` shows it in its Status column."""
    return Verdict(ready=(False, step, message), reconciling=(True, step, message), degraded=NOT_DEGRADED)


def failed(reason: str, message: str, *, retrying: bool) -> Verdict:
    """A failure before anything could be applied (spec, source, render, upgrade)."""
    hint = " Retrying with backoff." if retrying else " Fix the KfDef to retry."
    told = truncate(message, hint=hint)
    return Verdict(ready=(False, reason, told), reconciling=(retrying, reason, told), degraded=(True, reason, told))


def failure_summary(failures: Sequence[Change]) -> str:
    """``2 objects not applied: <object>: <why>; ...`` (the first five)."""
    return truncate(f"{counted(len(failures), 'object')} not applied: " + "; ".join(
        f"{change.ref}: {change.message}" for change in failures[:5]))


def list_objects(items: Iterable[str], limit: int = 8, budget: int = 640) -> str:
    """``a, b, c and 5 more``: at most ``limit`` items and about ``budget`` characters, so that the count of
    the rest always fits in a condition message."""
    items = list(items)
    shown: list[str] = []
    used = 0
    for item in items[:limit]:
        if shown and used + len(item) > budget:
            break
        shown.append(truncate(item, budget))
        used += len(shown[-1]) + 2
    rest = len(items) - len(shown)
    return ", ".join(shown) + (f" and {rest} more" if rest else "")


def applied(total: int, failures: list[tuple[str, str]], unhealthy: list[tuple[str, str]],
            problems: list[str], *, health_overdue: bool = False) -> Verdict:
    """The verdict after an apply: failures are (object, message), unhealthy (object, why).

    ``health_overdue``: the objects have been unhealthy for longer than the
    health deadline, which makes them a problem for a person, not a wait.
    """
    not_ready = f"{len(unhealthy)} of {total} objects not ready: " + list_objects(f"{o} ({w})" for o, w in unhealthy)
    if failures:
        message = truncate(f"{len(failures)} of {total} objects not applied: "
                           + list_objects((f"{o} ({m})" for o, m in failures[:3]), budget=800),
                           hint="; see status.failures for all" if len(failures) > 3 else "")
        degraded = (True, "ApplyFailed", message)
    elif unhealthy and health_overdue:
        degraded = (True, "HealthCheckTimeout", f"still unhealthy after the health deadline: {not_ready}")
    elif problems:
        degraded = (True, "Attention", "; ".join(problems))
    else:
        degraded = NOT_DEGRADED
    if failures:
        ready = (False, "ApplyFailed", degraded[2])
    elif unhealthy:
        ready = (False, "HealthCheckTimeout" if health_overdue else "WaitingForHealth", not_ready)
    else:
        ready = (True, "Ready", f"all {total} objects applied and ready")
    return Verdict(ready=ready, reconciling=(False, "Done", "reconciled"), degraded=degraded)


def terminating(message: str, stuck: bool) -> Verdict:
    return Verdict(ready=(False, "Terminating", message), reconciling=(True, "Terminating", message),
                   degraded=(True, "TeardownStuck", message) if stuck else NOT_DEGRADED)
