"""What one run of a KfDef came to: a :class:`RunOutcome`, reported in one place once the run is over.

A run (:class:`~kfdef_operator.controller.apply_step.ApplyStep`, :class:`~kfdef_operator.controller.teardown.Teardown`)
works on the KfDef's stack and returns its outcome; a failure it raises becomes one (:func:`failed`). The reconciler
then reports the outcome, in this order: the metrics of what the run changed, the status, the Events, the finalizer
of a stack torn down, and the delay of the next run, from the failures the work queue counts for the KfDef. This is
controller-runtime's ``Result`` and Flux's deferred ``finalizeStatus``: a run says what happened, one place says it
to the cluster.

Before its outcome, a run writes status only through the ``WriteStatus`` callback it is given: the steps a person
watches while a new generation is worked on, and the inventory recorded ahead of an apply.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from kfdef_operator.controller.failures import Fail, explain
from kfdef_operator.runtime.stack import Failure
from kfdef_operator.ssa.changeset import ChangeSet

#: Writes the status the stack calls for now, during a run; False when the API server refused it.
WriteStatus = Callable[[], Awaitable[bool]]


class StatusWrite(enum.Enum):
    """Whether reporting an outcome writes the status, and what a refused write means."""

    NONE = "none"            # nothing the status shows changed: not written
    ATTEMPT = "attempt"      # written; a refused write waits for the next one
    REQUIRED = "required"    # written, or the run failed (StatusNotWritten) and is retried


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event to post about the KfDef."""

    type: str       # Normal or Warning
    reason: str
    message: str


@dataclass(frozen=True)
class Retry:
    """The next run after a failure: ``base`` seconds, doubling with each failure of the KfDef since its last
    success or new generation, up to ``cap``."""

    base: float
    cap: float = 600.0


@dataclass(frozen=True)
class RunOutcome:
    """What one run came to, for the reconciler to report."""

    status: StatusWrite = StatusWrite.ATTEMPT
    events: tuple[Event, ...] = ()
    #: What the apply did to each object (counted in the metrics).
    changes: ChangeSet = field(default_factory=ChangeSet)
    #: Why the run stopped short; the stack shows it once reported.
    failure: Failure | None = None
    #: When the next run is due: a :class:`Retry`, seconds after a success (which forgets the failures counted), or
    #: None: only when the KfDef changes.
    next_run: Retry | float | None = None
    #: The stack is torn down: its finalizer is removed once the status is written, then everything held for it.
    released: bool = False


def failed(error: BaseException, *, deleting: bool) -> RunOutcome:
    """The outcome of a run that raised ``error``: its condition and a Warning Event, retried with a backoff unless
    only a change of the KfDef can help (a :class:`Fail` says which; any other error is retried)."""
    failure = error.failure if isinstance(error, Fail) else explain(error)
    base = error.base if isinstance(error, Fail) else 5.0
    return RunOutcome(events=(Event("Warning", failure.reason, failure.message),), failure=failure,
                      next_run=Retry(base, cap=120.0 if deleting else 600.0) if failure.retrying else None)
