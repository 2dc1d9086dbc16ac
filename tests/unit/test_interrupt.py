"""An interrupt ends a fetch or render no longer wanted: its actions run once, at once, and a deadline fires with it.

:func:`interrupted_on_a_thread` is how the fetch and render tests (test_sources.py, test_isolated_render.py) interrupt
real work."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from kfdef_operator.source.deadline import Deadline, DeadlineExceeded
from kfdef_operator.source.interrupt import Interrupt

REASON = "the KfDef was deleted"


def interrupted_on_a_thread(work: Callable[[Interrupt], object], ready: Callable[[], bool]
                            ) -> tuple[list[BaseException], float]:
    """Run ``work(interrupt)`` on a thread and interrupt it (``REASON``) once ``ready()`` holds: what it raised, and
    how many seconds it took to end after the interrupt (it must end within 10)."""
    interrupt = Interrupt()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            work(interrupt)
        except Exception as error:  # noqa: BLE001 (what the test looks at)
            raised.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    for _ in range(600):
        if ready():
            break
        time.sleep(0.05)
    interrupted = time.monotonic()
    interrupt.interrupt(REASON)
    thread.join(10)
    assert not thread.is_alive(), "the interrupted work is still running"
    return raised, time.monotonic() - interrupted


def test_actions_run_once_when_interrupted_and_at_once_when_registered_after():
    interrupt = Interrupt()
    ran: list[str] = []
    interrupt.on_interrupt(lambda: ran.append("first"))
    unlink = interrupt.on_interrupt(lambda: ran.append("unlinked"))
    unlink()
    assert interrupt.reason is None and ran == []
    interrupt.interrupt(REASON)
    interrupt.interrupt("again")
    assert (interrupt.reason, ran) == (REASON, ["first"])
    interrupt.on_interrupt(lambda: ran.append("late"))
    assert ran == ["first", "late"]


def test_an_interrupt_fires_the_deadline_of_the_fetch_it_is_given_and_only_while_it_runs():
    interrupt = Interrupt()
    woken: list[str] = []
    with Deadline(600, interrupt=interrupt) as deadline:
        deadline.on_expiry(lambda: woken.append("socket shut down"))
        assert not deadline.expired
        interrupt.interrupt(REASON)
        assert deadline.expired and woken == ["socket shut down"]
        with pytest.raises(DeadlineExceeded):
            deadline.pause(60)
    later = Interrupt()
    with Deadline(600, interrupt=later) as deadline:
        deadline.on_expiry(lambda: woken.append("after the fetch"))
    later.interrupt(REASON)
    assert woken == ["socket shut down"] and not deadline.expired
