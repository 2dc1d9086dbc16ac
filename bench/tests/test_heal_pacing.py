"""How the heal trials are paced and timed: a trial ends with its Deployment available again, the collector of the
measuring process is held off while a heal is timed, the next trial waits for a whole stack, and trials are spaced
past the operator's status refresh of the last heal.

Real :class:`EventStream` objects on a fake client seam: ``watch`` yields what the test (or a fake DELETE) queues.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest

from bench import heal
from bench.context import Bench
from bench.operator_runs import Deployed
from bench.streams import EventStream
from kfdef_operator.api.types import JSON
from kfdef_operator.controller.refresher import COALESCE_S

PATH = "/apis/apps/v1/namespaces/ns-1/deployments/api"


def deployment(uid: str, *, available: int | None = None) -> JSON:
    obj: JSON = {"metadata": {"name": "api", "namespace": "ns-1", "uid": uid, "resourceVersion": uid,
                              "generation": 1},
                 "spec": {"replicas": 1}}
    if available is not None:
        obj["status"] = {"observedGeneration": 1, "availableReplicas": available}
    return obj


def kfdef(resource_version: str, *, ready: int, total: int = 3) -> JSON:
    return {"metadata": {"name": "stack", "resourceVersion": resource_version},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready == total else "False"}],
                       "summary": {"ready": ready, "total": total}}}


class FakeKube:
    """The bench's client seam: GETs answer from ``objects``, a DELETE queues what the cluster would show after it."""

    def __init__(self) -> None:
        self.events: asyncio.Queue[JSON] = asyncio.Queue()
        self.collector_enabled_at_delete: list[bool] = []
        self.on_delete: list[JSON] = []

    async def request(self, method: str, path: str, **_: Any) -> JSON:
        if method == "GET" and path == PATH:
            return deployment("old", available=1)
        if method == "GET":
            return {"metadata": {"resourceVersion": "1"}}
        assert (method, path) == ("DELETE", PATH)
        self.collector_enabled_at_delete.append(gc.isenabled())
        for event in self.on_delete:
            self.events.put_nowait(event)
        return {}

    async def watch(self, path: str, **_: Any) -> AsyncIterator[JSON]:
        while True:
            yield await self.events.get()


async def until(condition: Any) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never met")


@pytest.mark.parametrize("replicas_available", [0, None])
def test_a_trial_ends_once_its_deployment_is_available_again_timed_until_it_is_back(
        replicas_available: int | None) -> None:
    asyncio.run(_trial_ends_once_available(replicas_available))


async def _trial_ends_once_available(replicas_available: int | None) -> None:
    kube = FakeKube()
    stream = await EventStream(cast(Any, kube), "/apis/apps/v1/deployments").start()
    kube.on_delete = [{"type": "DELETED", "object": deployment("old", available=1)},
                      {"type": "ADDED", "object": deployment("new", available=replicas_available)}]
    try:
        trial = asyncio.create_task(heal._trial(cast(Bench, SimpleNamespace(kube=kube)), stream, "ns-1", "api", 5))
        await until(lambda: len(stream.events) == 2)
        await until(gc.isenabled)  # held off only while the heal is timed: on again once it is back
        await asyncio.sleep(0.01)
        assert not trial.done()  # back, but its ReplicaSet and Pods not made yet: the next trial must wait
        kube.events.put_nowait({"type": "MODIFIED", "object": deployment("new", available=1)})
        ms = await asyncio.wait_for(trial, 5)
    finally:
        await stream.close()
    back, available = stream.events[1], stream.events[2]
    assert ms <= (back.at - stream.events[0].at) * 1000 + 1  # the back event ends the measurement, not availability
    assert available.at > back.at
    assert kube.collector_enabled_at_delete == [False]
    assert gc.isenabled()


def test_available_needs_the_controller_to_have_seen_the_spec_and_every_replica() -> None:
    assert heal.available(deployment("u", available=1))
    assert not heal.available(deployment("u"))
    assert not heal.available(deployment("u", available=0))
    stale = deployment("u", available=1)
    stale["metadata"]["generation"] = 2
    assert not heal.available(stale)


def test_the_next_trial_waits_for_the_kfdefs_latest_status_to_be_whole() -> None:
    asyncio.run(_next_trial_waits_for_a_whole_stack())


async def _next_trial_waits_for_a_whole_stack() -> None:
    kube = FakeKube()
    kfdefs = await EventStream(cast(Any, kube), "/kfdefs").start()
    bench = cast(Bench, SimpleNamespace(kfdefs=kfdefs))
    deployed = cast(Deployed, SimpleNamespace(name="stack"))
    try:
        kube.events.put_nowait({"type": "MODIFIED", "object": kfdef("2", ready=3)})
        kube.events.put_nowait({"type": "MODIFIED", "object": kfdef("3", ready=2)})  # the heal under way
        await until(lambda: len(kfdefs.events) == 2)
        settle = asyncio.create_task(heal._settle(bench, deployed, 5))
        await until(lambda: kube.events.empty())
        await asyncio.sleep(0.01)
        assert not settle.done()  # an earlier whole status does not count: the latest one is not
        kube.events.put_nowait({"type": "MODIFIED", "object": kfdef("4", ready=3)})
        await asyncio.wait_for(settle, 5)
        await asyncio.wait_for(heal._settle(bench, deployed, 5), 1)  # whole already: no wait
    finally:
        await kfdefs.close()


def test_trials_start_no_sooner_than_the_spacing_after_the_last_delete(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trials 50 ms apart met the operator's status write of the heal two trials before at kube-apiserver (written
    once its refresher's coalescing window had passed): each trial now starts past that window."""
    started: list[tuple[str, float]] = []

    async def trial(bench: Any, stream: Any, namespace: str, name: str, timeout: float) -> float:
        started.append((name, time.monotonic()))
        return 1.0  # back and available at once: only the pacing holds the next trial

    async def settled(*_: Any) -> None:
        pass

    class Floor:
        stream = SimpleNamespace()

        def __init__(self, *_: Any) -> None:
            pass

        async def start(self, originals: Any) -> Floor:
            return self

        async def close(self) -> None:
            pass

    async def opened(*_: Any) -> Any:
        async def close() -> None:
            pass
        return SimpleNamespace(close=close)

    monkeypatch.setattr(heal, "_trial", trial)
    monkeypatch.setattr(heal, "_settle", settled)
    monkeypatch.setattr(heal, "HealFloor", Floor)
    monkeypatch.setattr(heal, "_open", opened)
    workload = SimpleNamespace(deployments=[("ns-1", "a"), ("ns-1", "b")], suffix="s")
    samples = asyncio.run(heal.deployments(cast(Bench, None), cast(Deployed, SimpleNamespace(workload=workload)), 2))
    assert samples == {"operator": [1.0, 1.0], "floor": [1.0, 1.0]}
    assert [name for name, _ in started] == ["a", "a-floor", "b", "b-floor"]
    times = [at for _, at in started]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) > COALESCE_S, gaps
    assert min(gaps) >= heal.TRIAL_SPACING_S - 0.005, gaps
