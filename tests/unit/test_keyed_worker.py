"""The keyed worker the work queue and the healer share, in virtual time: keys due together start together, a busy
key waits for its run to end, a worker whose owner starts nothing waits for the next put, a closed one starts
nothing more."""

from __future__ import annotations

import asyncio

from kfdef_operator.runtime.keyed_worker import KeyedWorker, Run
from tests import virtual_time


class Owner:
    """Starts one run per call for every due key, which takes ``seconds``; records (time, keys) of each start."""

    def __init__(self, seconds: float = 1.0) -> None:
        self.seconds = seconds
        self.started: list[tuple[float, list[str]]] = []
        self.refuse = False
        self.worker: KeyedWorker[str, str] = KeyedWorker(self.start, name="test", at_least=0.01)

    def start(self, keys: list[str]) -> list[Run[str]]:
        if self.refuse:
            return []
        self.started.append((round(virtual_time.now(), 2), keys))
        for key in keys:
            self.worker.queue.pop(key)
        return [Run(keys, asyncio.sleep(self.seconds), f"run {keys}")]


def test_keys_due_together_start_in_one_run_and_later_ones_at_their_time() -> None:
    async def scenario() -> list[tuple[float, list[str]]]:
        owner = Owner()
        start = virtual_time.now()
        for key in "abc":
            owner.worker.put(key, key, start)
        owner.worker.put("d", "d", start + 5)
        await asyncio.sleep(10)
        await owner.worker.stop()
        return [(round(at - start, 2), keys) for at, keys in owner.started]

    assert virtual_time.run(scenario()) == [(0.0, ["a", "b", "c"]), (5.0, ["d"])]


def test_a_key_queued_while_its_run_is_under_way_starts_once_that_run_ends() -> None:
    async def scenario() -> list[tuple[float, list[str]]]:
        owner = Owner(seconds=3.0)
        start = virtual_time.now()
        owner.worker.put("a", "first", start)
        await asyncio.sleep(1)
        owner.worker.put("a", "second", start + 1)
        owner.worker.put("b", "other", start + 1)  # another key does not wait
        await asyncio.sleep(10)
        await owner.worker.stop()
        return [(round(at - start, 2), keys) for at, keys in owner.started]

    assert virtual_time.run(scenario()) == [(0.0, ["a"]), (1.0, ["b"]), (3.0, ["a"])]


def test_an_owner_that_starts_nothing_is_asked_again_at_the_next_wake() -> None:
    async def scenario() -> tuple[list, list]:
        owner = Owner()
        owner.refuse = True
        owner.worker.put("a", "a", virtual_time.now())
        await asyncio.sleep(5)
        refused = list(owner.started)
        owner.refuse = False
        owner.worker.wake()
        await asyncio.sleep(1)
        await owner.worker.stop()
        return refused, owner.started

    refused, started = virtual_time.run(scenario())
    assert refused == []
    assert [keys for _, keys in started] == [["a"]]


def test_a_closed_worker_cancels_its_runs_and_starts_nothing_more() -> None:
    async def scenario() -> tuple[list, bool]:
        owner = Owner(seconds=10.0)
        owner.worker.put("a", "a", virtual_time.now())
        await asyncio.sleep(1)
        run = owner.worker.run_of("a")
        owner.worker.put("b", "b", virtual_time.now() + 1)
        cancelled = owner.worker.close()
        await asyncio.gather(*cancelled, return_exceptions=True)
        owner.worker.put("c", "c", virtual_time.now())
        await asyncio.sleep(5)
        return owner.started, run is not None and run.cancelled()

    started, cancelled = virtual_time.run(scenario())
    assert [keys for _, keys in started] == [["a"]]
    assert cancelled


def test_a_gate_opening_ends_the_wait_for_a_key_it_held() -> None:
    async def scenario() -> float:
        gate = asyncio.Event()
        started: list[float] = []

        def start(keys: list[str]) -> list[Run[str]]:
            started.append(virtual_time.now())
            for key in keys:
                worker.queue.pop(key)
            return [Run(keys, asyncio.sleep(0), "run")]

        worker: KeyedWorker[str, None] = KeyedWorker(start, name="gated", startable=lambda _: gate.is_set(),
                                                     gate=gate)
        begin = virtual_time.now()
        worker.put("a", None, begin)
        await asyncio.sleep(3)
        assert started == []
        gate.set()
        await asyncio.sleep(1)
        await worker.stop()
        return started[0] - begin

    assert round(virtual_time.run(scenario()), 2) == 3.0
