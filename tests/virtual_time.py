"""Run a test's coroutine in virtual time: sleeps, timeouts and backoffs of minutes take no wall time.

The loop is looptime's (``looptime.new_event_loop``): its clock jumps to the next timer whenever every task waits.
The product measures durations with ``time.monotonic()`` (lease deadlines, heal backoffs, CRD waits), so for the
length of the run that function reads the loop's clock when called on the loop's thread (plus a nanosecond per
read, so that it never stands still); other threads keep the real clock.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import looptime

T = TypeVar("T")

START = 1_000.0  # virtual seconds at the start of every run (a clock at 0 would make "never" look recent)


def run(main: Coroutine[Any, Any, T], *, limit: float = 3_600.0) -> T:
    """Run ``main`` on a virtual-time loop; every task still waiting ``limit`` virtual seconds on fails with
    :class:`looptime.LoopTimeoutError` (a test that would hang fails instead)."""
    loop = looptime.new_event_loop(start=START, end=START + limit)
    real_monotonic = time.monotonic
    reads = itertools.count(1)

    def monotonic() -> float:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return real_monotonic()
        if running is not loop:
            return real_monotonic()
        # A nanosecond more per read, as reading a real clock takes time: a loop that waits "until the deadline has
        # passed" in steps of "what is left" would otherwise see the deadline reached but never passed.
        return running.time() + next(reads) * 1e-9

    time.monotonic = monotonic
    try:
        with asyncio.Runner(loop_factory=lambda: loop) as runner:
            return runner.run(main)
    finally:
        time.monotonic = real_monotonic


def now() -> float:
    """The running loop's (virtual) time."""
    return asyncio.get_running_loop().time()
