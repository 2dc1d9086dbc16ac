"""/healthz of the real probe server and the reconciler's liveness: it fails when the event loop's executor or the
work pool is stuck."""

from __future__ import annotations

import asyncio
import threading
import types
from concurrent.futures import ThreadPoolExecutor

import aiohttp

from kfdef_dev.controlplane import free_port
from kfdef_operator.controller.heartbeat import Heartbeat, Liveness
from kfdef_operator.controller.server import ProbeServer
from kfdef_operator.controller.workpool import WorkPool


def probes(liveness: Liveness) -> types.SimpleNamespace:
    """What the reconciler hands the probe server: its liveness, and readiness (not under test)."""
    return types.SimpleNamespace(alive=liveness.alive, ready=lambda: True)


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
        liveness = Liveness(WorkPool(1), heartbeat=Heartbeat(interval=0.1, stale_after=1.0))
        liveness.start()
        server = ProbeServer(probes(liveness), f"127.0.0.1:{port}")
        await server.start()
        try:
            assert await _healthz(port) == (200, "ok\n")
            release = threading.Event()
            blockers = [loop.run_in_executor(None, release.wait, 30) for _ in range(2)]
            code, _, waited = await _until(port, 503)
            assert code == 503, "/healthz stayed 200 while the default executor was stuck"
            assert 0.9 <= waited < 3, f"/healthz failed after {waited:.1f} s, the limit is 1 s"
            assert "default executor are stuck" in (liveness.problem() or "")
            release.set()
            await asyncio.gather(*blockers)
            code, text, _ = await _until(port, 200)
            assert (code, text) == (200, "ok\n")
        finally:
            await server.stop()
            await liveness.stop()

    asyncio.run(scenario())


def test_healthz_fails_when_every_work_thread_is_held_too_long():
    async def scenario():
        now = [0.0]
        pool = WorkPool(1, clock=lambda: now[0])
        port = free_port()
        liveness = Liveness(pool, work_stuck_after=600)
        server = ProbeServer(probes(liveness), f"127.0.0.1:{port}")
        await server.start()
        release = threading.Event()
        job = asyncio.create_task(pool.run("ns", lambda _: release.wait(30)))
        try:
            while pool.running < 1:
                await asyncio.sleep(0.01)
            assert await _healthz(port) == (200, "ok\n")  # busy is not stuck
            now[0] = 601.0
            assert (await _healthz(port))[0] == 503
            assert "all 1 work threads have run the same fetch or render for over 600 s" in (liveness.problem() or "")
        finally:
            release.set()
            await job
            await server.stop()
            pool.shutdown()

    asyncio.run(scenario())
