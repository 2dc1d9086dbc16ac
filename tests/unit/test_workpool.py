"""The work pool: at most ``size`` jobs at once, the rest in order; when it counts as stuck."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from kfdef_operator.controller.workpool import WorkPool

REQUEST = contextvars.ContextVar("request", default="")


def test_at_most_size_jobs_run_and_the_rest_wait_in_order():
    async def scenario():
        pool = WorkPool(2)
        release = threading.Event()
        started: list[int] = []

        def job(number: int) -> int:
            started.append(number)
            release.wait(5)
            return number * 10

        tasks = [asyncio.create_task(pool.run(job, n)) for n in range(5)]
        for _ in range(100):
            await asyncio.sleep(0.01)
            if pool.running == 2:
                break
        assert (pool.running, pool.waiting, sorted(started)) == (2, 3, [0, 1])
        release.set()
        results = await asyncio.gather(*tasks)
        assert results == [0, 10, 20, 30, 40] and started[2:] == [2, 3, 4]
        assert (pool.running, pool.waiting) == (0, 0)
        pool.shutdown()

    asyncio.run(scenario())


def test_jobs_see_the_callers_context_and_keyword_arguments():
    async def scenario():
        pool = WorkPool(1)
        REQUEST.set("kfdef ns/a")
        assert await pool.run(lambda suffix="": REQUEST.get() + suffix, suffix="!") == "kfdef ns/a!"
        pool.shutdown()

    asyncio.run(scenario())


def test_stuck_only_when_every_thread_holds_one_job_too_long():
    async def scenario():
        now = [0.0]
        pool = WorkPool(2, clock=lambda: now[0])
        release = threading.Event()
        first = asyncio.create_task(pool.run(release.wait, 5))
        while pool.running < 1:
            await asyncio.sleep(0.01)
        now[0] = 1000.0
        assert pool.stuck(600) is None  # one thread is still free
        second = asyncio.create_task(pool.run(release.wait, 5))
        while pool.running < 2:
            await asyncio.sleep(0.01)
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
