"""An interrupt for one fetch or render whose result is no longer wanted (its KfDef was deleted or changed).

The work runs on a thread of the operator's work pool while the reconcile that wants it awaits it on the event loop;
cancelling the reconcile does not stop a thread. :class:`Interrupt` is the thread's side of that cancellation: what
blocks registers how to be woken (:meth:`Interrupt.on_interrupt`: a fetch's deadline fires, which shuts its sockets
down and kills its git; a render's process group is killed), and :meth:`Interrupt.interrupt` runs those actions at
once, from any thread. The work then fails fast, and its thread is free for the next job.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

_numbers = itertools.count()


class Interrupt:
    """Set at most once, with a reason; actions registered before run when it is set, those registered after at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._actions: dict[int, Callable[[], None]] = {}

    @property
    def reason(self) -> str | None:
        """Why the work was interrupted; None while it was not."""
        return self._reason

    def interrupt(self, reason: str) -> None:
        """Interrupt the work: run every registered action (later calls change nothing)."""
        with self._lock:
            if self._reason is not None:
                return
            self._reason = reason
            actions, self._actions = list(self._actions.values()), {}
        for action in actions:
            _quietly(action)

    def on_interrupt(self, action: Callable[[], None]) -> Callable[[], None]:
        """Run ``action`` when the work is interrupted (at once if it already was); returns what unregisters it."""
        number = next(_numbers)
        with self._lock:
            if self._reason is None:
                self._actions[number] = action
                return lambda: self._forget(number)
        _quietly(action)
        return lambda: None

    def _forget(self, number: int) -> None:
        with self._lock:
            self._actions.pop(number, None)


def _quietly(action: Callable[[], None]) -> None:
    try:
        action()
    except OSError:
        pass  # what it would stop (a socket, a process) ended meanwhile
