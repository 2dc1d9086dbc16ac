"""A total deadline for one fetch, enforced on blocking I/O.

A per-read timeout does not bound a download: a server sending one byte every second never lets a read time
out. A :class:`Deadline` is a point in time by which the whole fetch (every attempt, redirect, retry pause and
the unpacking) must be done. Waits are bounded by :meth:`Deadline.bound`; what blocks in a system call (a
socket read, a git subprocess) is registered with :meth:`Deadline.on_expiry`, and a timer thread shuts the
socket down or kills the process when the deadline passes, so the blocked call returns at once. An
:class:`~kfdef_operator.source.interrupt.Interrupt` (the fetch is no longer wanted) fires the deadline early.

When the operator stops, :func:`expire_all` ends every fetch at once the same way (and any fetch started after it),
so that no fetch keeps the process alive past its grace period.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kfdef_operator.source.interrupt import Interrupt


class DeadlineExceeded(Exception):
    """The fetch ran out of time (or the operator is stopping)."""


_active: set[Deadline] = set()
_active_lock = threading.Lock()
_stopping = threading.Event()


def stopping() -> bool:
    """Whether :func:`expire_all` was called."""
    return _stopping.is_set()


def expire_all() -> None:
    """End every fetch now, and any fetch entered from now on: the process is stopping."""
    _stopping.set()
    with _active_lock:
        running = list(_active)
    for deadline in running:
        deadline._fire()


class Deadline:
    """``seconds`` from now (on ``clock``), or sooner when ``interrupt`` is set. Use as a context manager to enforce
    it on registered I/O."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic,
                 interrupt: Interrupt | None = None) -> None:
        self.seconds = seconds
        self._clock = clock
        self._at = clock() + seconds
        self._expiry = Interrupt()  # fired by the timer, the operator stopping or ``interrupt``
        self._woken = threading.Event()  # set when the deadline fires: ends a pause at once
        self._expiry.on_interrupt(self._woken.set)
        self._interrupt = interrupt
        self._unlinks: list[Callable[[], None]] = []
        self._timer: threading.Timer | None = None

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self._at - self._clock())

    @property
    def expired(self) -> bool:
        return self._expiry.reason is not None or self.remaining() <= 0 or _stopping.is_set()

    def check(self) -> None:
        """Raise :class:`DeadlineExceeded` once the deadline has passed."""
        if self.expired:
            raise DeadlineExceeded(f"not done within the {self.seconds:g} s deadline")

    def bound(self, timeout: float) -> float:
        """``timeout`` shortened to what is left; raises :class:`DeadlineExceeded` when nothing is left."""
        self.check()
        return min(timeout, self.remaining())

    def pause(self, seconds: float) -> None:
        """Wait ``seconds`` (a retry's pause), cut short by the deadline; raises :class:`DeadlineExceeded` when the
        deadline ends it."""
        self._woken.wait(self.bound(seconds))
        self.check()

    def on_expiry(self, action: Callable[[], None]) -> None:
        """Run ``action`` (e.g. shut a socket down) when the deadline passes; at once if it already has."""
        self._unlinks.append(self._expiry.on_interrupt(action))

    def __enter__(self) -> Deadline:
        self._timer = threading.Timer(self.remaining(), self._fire)
        self._timer.daemon = True
        self._timer.start()
        with _active_lock:
            _active.add(self)
        if self._interrupt is not None:
            self._unlinks.append(self._interrupt.on_interrupt(self._fire))
        if _stopping.is_set():
            self._fire()
        return self

    def __exit__(self, *_: object) -> None:
        with _active_lock:
            _active.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        for unlink in self._unlinks:  # what the fetch registered is done with; nothing may fire it any more
            unlink()
        self._unlinks.clear()

    def _fire(self) -> None:
        self._expiry.interrupt("expired")
