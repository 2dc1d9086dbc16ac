"""The keyed delay queue shared by the work queue and the healer: due order, early wake-ups, filtered waits."""

from __future__ import annotations

import asyncio
import time

from kfdef_operator.runtime.delay_queue import DelayQueue


def test_only_due_keys_are_taken_in_the_order_they_were_queued() -> None:
    async def scenario() -> None:
        queue: DelayQueue[str, int] = DelayQueue()
        now = time.monotonic()
        queue.put("later", 1, now + 60)
        queue.put("b", 2, now - 1)
        queue.put("a", 3, now)
        queue.put("b", 4, now - 2)  # a key holds one item; replacing it keeps its place
        assert queue.take_ready(now) == {"b": 4, "a": 3}
        assert dict(queue) == {"later": 1} and queue.due("later") == now + 60 and queue.due("a") is None

    asyncio.run(scenario())


def test_a_wait_ends_when_the_earliest_key_is_due() -> None:
    async def scenario() -> float:
        queue: DelayQueue[str, None] = DelayQueue()
        queue.put("soon", None, time.monotonic() + 0.05)
        queue.put("late", None, time.monotonic() + 60)
        started = time.monotonic()
        await asyncio.wait_for(queue.wait(), 5)
        return time.monotonic() - started

    assert 0.04 <= asyncio.run(scenario()) < 1.0


def test_a_put_or_a_wake_ends_a_wait_early() -> None:
    async def scenario() -> None:
        queue: DelayQueue[str, None] = DelayQueue()
        queue.put("late", None, time.monotonic() + 60)
        waiting = asyncio.create_task(queue.wait())
        await asyncio.sleep(0)
        queue.put("now", None, time.monotonic())
        await asyncio.wait_for(waiting, 1)
        waiting = asyncio.create_task(queue.wait(lambda key: key == "late"))
        await asyncio.sleep(0)
        queue.wake()
        await asyncio.wait_for(waiting, 1)

    asyncio.run(scenario())


def test_keys_a_wait_does_not_accept_neither_end_it_nor_count_as_due() -> None:
    async def scenario() -> None:
        queue: DelayQueue[str, None] = DelayQueue()
        queue.put("running", None, time.monotonic() - 1)
        assert queue.ready(time.monotonic(), lambda key: key != "running") == []
        waiting = asyncio.create_task(queue.wait(lambda key: key != "running"))
        await asyncio.sleep(0.05)
        assert not waiting.done()  # no spinning on a due key the consumer cannot start
        waiting.cancel()

    asyncio.run(scenario())
