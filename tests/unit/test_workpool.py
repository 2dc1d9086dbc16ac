"""The work pool: ``size`` jobs at once, shared between tenants (tests/unit/test_fairshare.py has the policy), jobs
interrupted when their callers leave, when it counts as stuck, and threads that never hold the process."""

from __future__ import annotations

import asyncio
import contextvars
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from kfdef_operator.controller.workpool import NOT_WANTED, WorkPool
from kfdef_operator.source.interrupt import Interrupt

REQUEST = contextvars.ContextVar("request", default="")


async def until(check, what: str) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not reached: {what}")


def test_at_most_size_jobs_of_one_tenant_run_and_the_rest_wait_in_order():
    async def scenario():
        pool = WorkPool(2)
        release = threading.Event()
        started: list[int] = []

        def job(number: int) -> int:
            started.append(number)
            release.wait(5)
            return number * 10

        tasks = [asyncio.create_task(pool.run("ns", lambda _, n=n: job(n))) for n in range(5)]
        await until(lambda: pool.running == 2, "two jobs running")
        await asyncio.sleep(0.05)
        assert (pool.running, pool.waiting, sorted(started)) == (2, 3, [0, 1])
        release.set()
        results = await asyncio.gather(*tasks)
        assert results == [0, 10, 20, 30, 40] and started[2:] == [2, 3, 4]
        assert (pool.running, pool.waiting) == (0, 0)
        pool.shutdown()

    asyncio.run(scenario())


def test_another_tenants_job_runs_while_one_tenant_holds_every_thread():
    """Issue 39, item 1: hostile KfDefs of one namespace held the whole pool until their 600 s limit."""
    async def scenario():
        pool = WorkPool(2)
        release = threading.Event()
        hostile = [asyncio.create_task(pool.run("hostile", lambda _: release.wait(30))) for _ in range(4)]
        await until(lambda: pool.running == 2, "the hostile jobs holding both threads")
        assert await asyncio.wait_for(pool.run("small", lambda _: "rendered"), timeout=5) == "rendered"
        assert (pool.running, pool.waiting) == (2, 2)
        release.set()
        await asyncio.gather(*hostile)
        pool.shutdown()

    asyncio.run(scenario())


def test_a_cancelled_caller_takes_its_waiting_job_back_and_interrupts_its_running_one():
    async def scenario():
        pool = WorkPool(1)
        interrupts: list[Interrupt] = []
        ran: list[str] = []

        def blocking(interrupt: Interrupt) -> str:
            interrupts.append(interrupt)
            woken = threading.Event()
            interrupt.on_interrupt(woken.set)
            woken.wait(30)
            return "interrupted" if interrupt.reason else "done"

        running = asyncio.create_task(pool.run("ns", blocking))
        await until(lambda: interrupts, "the job running")
        waiting = asyncio.create_task(pool.run("ns", lambda _: ran.append("waiting job")))
        await until(lambda: pool.waiting == 1, "the second job waiting")
        waiting.cancel()
        running.cancel()
        started = time.monotonic()
        await until(lambda: pool.running == 0, "the interrupted job's thread free")
        assert time.monotonic() - started < 5
        assert interrupts[0].reason == NOT_WANTED and pool.waiting == 0
        assert await pool.run("ns", lambda _: "next") == "next" and ran == []
        pool.shutdown()

    asyncio.run(scenario())


def test_jobs_see_the_callers_context():
    async def scenario():
        pool = WorkPool(1)
        REQUEST.set("kfdef ns/a")
        assert await pool.run("ns", lambda _: REQUEST.get() + "!") == "kfdef ns/a!"
        with pytest.raises(ZeroDivisionError):
            await pool.run("ns", lambda _: 1 / 0)
        pool.shutdown()

    asyncio.run(scenario())


def test_stuck_only_when_size_jobs_have_each_run_too_long():
    async def scenario():
        now = [0.0]
        pool = WorkPool(2, clock=lambda: now[0])
        release = threading.Event()
        first = asyncio.create_task(pool.run("ns", lambda _: release.wait(5)))
        await until(lambda: pool.running == 1, "one job running")
        now[0] = 1000.0
        assert pool.stuck(600) is None  # one thread is still free
        second = asyncio.create_task(pool.run("ns", lambda _: release.wait(5)))
        await until(lambda: pool.running == 2, "two jobs running")
        assert pool.stuck(600) is None  # the second job is young
        now[0] = 1700.0
        assert pool.stuck(600) == ("all 2 work threads have run the same fetch or render for over 600 s "
                                   "(the shortest for 700 s)")
        release.set()
        await asyncio.gather(first, second)
        assert pool.stuck(600) is None
        pool.shutdown()

    asyncio.run(scenario())
    with pytest.raises(ValueError):
        WorkPool(0)


def test_a_job_blocked_for_ever_does_not_keep_the_process_alive():
    """Issue 39, item 4: a work thread blocked in open() of a FIFO kept the operator running after SIGTERM (the
    interpreter joins executor threads at exit)."""
    program = textwrap.dedent("""
        import asyncio, threading
        from kfdef_operator.controller.workpool import WorkPool

        async def main():
            pool = WorkPool(1)
            started = threading.Event()
            job = asyncio.create_task(pool.run("ns", lambda _: (started.set(), threading.Event().wait())))
            while not started.is_set():
                await asyncio.sleep(0.01)
            job.cancel()
            pool.shutdown()
            print("leaving", flush=True)

        asyncio.run(main())
    """)
    try:
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail("the process did not exit while a work thread was blocked")
    assert (done.returncode, done.stdout) == (0, "leaving\n"), done.stderr
