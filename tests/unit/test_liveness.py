"""/healthz of the real probe server: it fails when the event loop's executor or the work pool is stuck."""

from __future__ import annotations

import asyncio
import threading
import types
from concurrent.futures import ThreadPoolExecutor

import aiohttp

from kfdef_dev.controlplane import free_port
from kfdef_operator.controller.heartbeat import Heartbeat
from kfdef_operator.controller.server import ProbeServer
from kfdef_operator.controller.workpool import WorkPool


async def _healthz(port: int) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
            return response.status, await response.text()


async def _until(port: int, status: int, timeout: float = 5.0) -> tuple[int, str, float]:
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        code, text = await _healthz(port)
        if code == status or loop.time() - started > timeout:
            return code, text, loop.time() - started
        await asyncio.sleep(0.05)


def test_healthz_fails_while_the_default_executor_is_stuck_and_recovers():
    async def scenario():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(2))  # the threads asyncio resolves names on
        port = free_port()
        server = ProbeServer(types.SimpleNamespace(work_pool=WorkPool(1)), f"127.0.0.1:{port}",
                             heartbeat=Heartbeat(interval=0.1, stale_after=1.0))
        await server.start()
        try:
            assert await _healthz(port) == (200, "ok\n")
            release = threading.Event()
            blockers = [loop.run_in_executor(None, release.wait, 30) for _ in range(2)]
            code, text, waited = await _until(port, 503)
            assert code == 503 and "no heartbeat" in text and "default executor are stuck" in text, (code, text)
            assert 0.9 <= waited < 3, f"/healthz failed after {waited:.1f} s, the limit is 1 s"
            release.set()
            await asyncio.gather(*blockers)
            code, text, _ = await _until(port, 200)
            assert (code, text) == (200, "ok\n")
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_healthz_fails_when_every_work_thread_is_held_too_long():
    async def scenario():
        now = [0.0]
        pool = WorkPool(1, clock=lambda: now[0])
        port = free_port()
        server = ProbeServer(types.SimpleNamespace(work_pool=pool), f"127.0.0.1:{port}", work_stuck_after=600)
        await server.start()
        release = threading.Event()
        job = asyncio.create_task(pool.run(release.wait, 30))
        try:
            while pool.running < 1:
                await asyncio.sleep(0.01)
            assert await _healthz(port) == (200, "ok\n")  # busy is not stuck
            now[0] = 601.0
            code, text = await _healthz(port)
            assert code == 503 and "all 1 work threads have run the same fetch or render for over 600 s" in text
        finally:
            release.set()
            await job
            await server.stop()
            pool.shutdown()

    asyncio.run(scenario())
