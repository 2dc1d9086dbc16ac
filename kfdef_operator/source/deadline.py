"""A total deadline for one fetch, enforced on blocking I/O.

A per-read timeout does not bound a download: a server sending one byte every second never lets a read time
out. A :class:`Deadline` is a point in time by which the whole fetch (every attempt, redirect, retry pause and
the unpacking) must be done. Waits are bounded by :meth:`Deadline.bound`; what blocks in a system call (a
socket read, a git subprocess) is registered with :meth:`Deadline.on_expiry`, and a timer thread shuts the
socket down or kills the process when the deadline passes, so the blocked call returns at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class DeadlineExceeded(Exception):
    """The fetch ran out of time."""


class Deadline:
    """``seconds`` from now (on ``clock``). Use as a context manager to enforce it on registered I/O."""

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._clock = clock
        self._at = clock() + seconds
        self._lock = threading.Lock()
        self._expiry_actions: list[Callable[[], None]] = []
        self._fired = False
        self._timer: threading.Timer | None = None

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self._at - self._clock())

    @property
    def expired(self) -> bool:
        return self._fired or self.remaining() <= 0

    def check(self) -> None:
        """Raise :class:`DeadlineExceeded` once the deadline has passed."""
        if self.expired:
            raise DeadlineExceeded(f"not done within the {self.seconds:g} s deadline")

    def bound(self, timeout: float) -> float:
        """``timeout`` shortened to what is left; raises :class:`DeadlineExceeded` when nothing is left."""
        self.check()
        return min(timeout, self.remaining())

    def on_expiry(self, action: Callable[[], None]) -> None:
        """Run ``action`` (e.g. shut a socket down) when the deadline passes; at once if it already has."""
        with self._lock:
            if not self._fired:
                self._expiry_actions.append(action)
                return
        _quietly(action)

    def __enter__(self) -> Deadline:
        self._timer = threading.Timer(self.remaining(), self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            self._expiry_actions.clear()

    def _fire(self) -> None:
        with self._lock:
            self._fired = True
            actions, self._expiry_actions = self._expiry_actions, []
        for action in actions:
            _quietly(action)


def _quietly(action: Callable[[], None]) -> None:
    try:
        action()
    except OSError:
        pass  # the socket was closed or the process ended meanwhile
