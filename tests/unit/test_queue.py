"""The work queue: a closed gate runs standby work only, an open one real work; interrupted work stays due."""

from __future__ import annotations

import asyncio

from kfdef_operator.controller.queue import WorkQueue


class Recorder:
    """Work functions that record their calls; ``block`` holds the real work until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.block = asyncio.Event()
        self.block.set()
        self.started = asyncio.Event()

    async def work(self, key: str) -> float | None:
        self.calls.append(("work", key))
        self.started.set()
        await self.block.wait()
        return None

    async def standby(self, key: str) -> None:
        self.calls.append(("standby", key))


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_closed_gate_runs_standby_work_once_per_request_and_real_work_when_it_opens() -> None:
    async def scenario() -> list[tuple[str, str]]:
        gate, recorder = asyncio.Event(), Recorder()
        queue = WorkQueue(recorder.work, gate=gate, standby=recorder.standby)
        queue.request("a")
        await settle()
        await settle()
        assert recorder.calls == [("standby", "a")]  # once, not in a loop
        queue.request("a")  # the KfDef changed while standby: prepare again
        await settle()
        assert recorder.calls == [("standby", "a"), ("standby", "a")]
        gate.set()
        await settle()
        await queue.stop()
        return recorder.calls

    assert asyncio.run(scenario()) == [("standby", "a"), ("standby", "a"), ("work", "a")]


def test_interrupt_cancels_running_work_and_the_key_runs_again_when_the_gate_reopens() -> None:
    async def scenario() -> list[tuple[str, str]]:
        gate, recorder = asyncio.Event(), Recorder()
        gate.set()
        recorder.block.clear()
        queue = WorkQueue(recorder.work, gate=gate, standby=recorder.standby)
        queue.request("a")
        await recorder.started.wait()
        gate.clear()
        queue.interrupt()
        await settle()
        assert not queue.busy()
        recorder.block.set()
        gate.set()
        await settle()
        await queue.stop()
        return recorder.calls

    # Interrupted while leading, prepared as a standby, worked again once leading.
    assert asyncio.run(scenario()) == [("work", "a"), ("standby", "a"), ("work", "a")]


def test_without_a_gate_work_runs_at_once_and_no_standby_work_runs() -> None:
    async def scenario() -> list[tuple[str, str]]:
        recorder = Recorder()
        queue = WorkQueue(recorder.work)
        queue.request("a")
        await settle()
        await queue.stop()
        return recorder.calls

    assert asyncio.run(scenario()) == [("work", "a")]


def test_a_request_during_a_run_runs_the_key_again_after_it_and_never_twice_at_once() -> None:
    async def scenario() -> list[tuple[str, str]]:
        recorder = Recorder()
        recorder.block.clear()
        queue = WorkQueue(recorder.work)
        queue.request("a")
        await recorder.started.wait()
        queue.request("a")
        await settle()
        assert recorder.calls == [("work", "a")] and queue.due_in("a") == 0.0
        recorder.block.set()
        await settle()
        await queue.stop()
        return recorder.calls

    assert asyncio.run(scenario()) == [("work", "a"), ("work", "a")]


def test_a_request_moves_a_pending_run_earlier_never_later() -> None:
    async def scenario() -> None:
        queue = WorkQueue(Recorder().work)
        queue.request("a", 60.0)
        queue.request("a", 120.0)
        assert 59.0 < (queue.due_in("a") or 0.0) <= 60.0
        queue.request("a", 30.0)
        assert 29.0 < (queue.due_in("a") or 0.0) <= 30.0
        await queue.stop()

    asyncio.run(scenario())
