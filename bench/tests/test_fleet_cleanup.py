"""The fleet's clean-up: its namespaces are gone before the next step starts, so that the single operator's run (and
what follows it) is not measured while kube-controller-manager deletes the sharded run's hundreds of namespaces."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any, cast

from bench import fleet
from bench.context import KFDEFS_PATH, Bench
from bench.streams import Arrival
from kfdef_operator.api.types import JSON


class FakeKfdefs:
    """The watch of KfDefs: every KfDef deleted is gone at once."""

    def mark(self) -> int:
        return 0

    async def wait_for(self, predicate: Any, **_: Any) -> Arrival:
        return cast(Arrival, SimpleNamespace(at=time.monotonic()))


class FakeKube:
    """Namespaces deleted stay listed for ``lingering`` more listings (kube-controller-manager emptying them)."""

    def __init__(self, namespaces: list[str], lingering: int) -> None:
        self.namespaces = set(namespaces)
        self.deleting: set[str] = set()
        self.lingering = lingering
        self.listings = 0

    async def request(self, method: str, path: str, **_: Any) -> JSON:
        if method == "DELETE":
            if path.startswith("/api/v1/namespaces/"):
                self.deleting.add(path.rpartition("/")[2])
            else:
                assert path.startswith(KFDEFS_PATH)
            return {}
        assert (method, path) == ("GET", "/api/v1/namespaces")
        self.listings += 1
        if self.listings > self.lingering:
            self.namespaces -= self.deleting
        return {"items": [{"metadata": {"name": name}} for name in sorted(self.namespaces | {"kube-system"})]}

    async def gather_limited(self, coroutines: list, limit: int) -> list:
        return await asyncio.gather(*coroutines, return_exceptions=True)


def test_the_fleet_is_removed_only_once_its_namespaces_are_gone(monkeypatch) -> None:
    monkeypatch.setattr(fleet, "NAMESPACE_POLL_S", 0.0, raising=False)
    names = [f"fleet-x-{n}" for n in range(3)]
    kube = FakeKube(names, lingering=4)
    subject = object.__new__(fleet.Fleet)
    subject.bench = cast(Bench, SimpleNamespace(kube=kube, kfdefs=FakeKfdefs()))
    subject.names = names

    removed_s = asyncio.run(subject.remove(timeout=60))

    assert kube.deleting == set(names)
    assert kube.listings == 5, "listed until none of the fleet's namespaces was left"
    assert kube.namespaces == set()
    assert 0 <= removed_s < 1, "the time until the KfDefs are gone, not their namespaces"
