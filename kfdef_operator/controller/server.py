"""HTTP endpoints for kubelet probes and Prometheus: ``/healthz``, ``/readyz``, ``/metrics``."""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from kfdef_operator.runtime import metrics


class Probes(Protocol):
    """What the probe endpoints ask of the operator."""

    def alive(self) -> bool:
        """The process is doing its work (liveness: false means restart me)."""

    def ready(self) -> bool:
        """The operator can serve (readiness)."""


class ProbeServer:
    """A small aiohttp server bound to ``host:port``."""

    def __init__(self, probes: Probes, address: str) -> None:
        host, _, port = address.rpartition(":")
        self._host, self._port = host or "0.0.0.0", int(port)
        self._probes = probes
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        alive = self._probes.alive()
        return web.Response(text="ok\n" if alive else "stuck\n", status=200 if alive else 503)

    async def _readyz(self, _: web.Request) -> web.Response:
        ready = self._probes.ready()
        return web.Response(text="ready\n" if ready else "starting\n", status=200 if ready else 503)

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=metrics.exposition(), content_type="text/plain", charset="utf-8",
                            headers={"X-Content-Type-Options": "nosniff"})
