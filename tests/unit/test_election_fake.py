"""LeaseElector against the in-memory API server, in virtual time: acquiring, renewing, losing the lease by its
deadline (and the write fence with it), taking over an expired lease, conflicts, the lease watch, release."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from kfdef_operator.runtime.election import ElectionConfig, LeaseElector, micro_time
from kfdef_operator.ssa.client import FencedWrite
from tests import virtual_time
from tests.fake_kube import FakeApiServer

LEASES = "/apis/coordination.k8s.io/v1/namespaces/ops/leases"
LEASE = f"{LEASES}/leader"
CONFIG = ElectionConfig("ops", "leader", "me", lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)


class Transitions:
    """The elector's callbacks, with the virtual time each was called."""

    def __init__(self) -> None:
        self.log: list[tuple[str, float]] = []
        self.changed = asyncio.Event()

    def started(self) -> None:
        self.log.append(("started", virtual_time.now()))
        self.changed.set()

    def stopped(self) -> None:
        self.log.append(("stopped", virtual_time.now()))
        self.changed.set()

    async def next(self) -> tuple[str, float]:
        self.changed.clear()
        count = len(self.log)
        while len(self.log) == count:
            await self.changed.wait()
            self.changed.clear()
        return self.log[-1]


def cluster() -> FakeApiServer:
    server = FakeApiServer()
    server.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ops"}})
    return server


def elector_on(server: FakeApiServer, config: ElectionConfig = CONFIG) -> tuple[LeaseElector, Transitions]:
    transitions = Transitions()
    return LeaseElector(server.client(), config, on_started=transitions.started,
                        on_stopped=transitions.stopped), transitions


def lease_of(holder: str) -> dict:
    now = micro_time()
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "leader", "namespace": "ops"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "acquireTime": now, "renewTime": now,
                     "leaseTransitions": 0}}


def test_a_free_lease_is_created_and_renewed_every_retry_period() -> None:
    server = cluster()

    async def scenario():
        elector, transitions = elector_on(server)
        elector.start()
        assert await transitions.next() == ("started", pytest.approx(virtual_time.START, abs=0.1))
        assert elector.leading()
        await asyncio.sleep(7)
        await elector.stop()
        return transitions.log

    log = virtual_time.run(scenario())
    assert [what for what, _ in log] == ["started", "stopped"]
    assert len(server.received("POST", LEASES)) == 1
    renewals = [r for r in server.received("PUT", LEASE) if r.body["spec"]["holderIdentity"] == "me"]
    pauses = [round(b.at - a.answered_at, 2) for a, b in itertools.pairwise(renewals)]
    assert pauses and all(p == 2.0 for p in pauses), pauses
    assert not server.received("GET", LEASE)[1:], "a leader renews from the Lease it wrote, without reading it"
    released = server.get(LEASE)["spec"]
    assert released["holderIdentity"] is None and released["leaseDurationSeconds"] == 1


def test_renewals_that_fail_end_leadership_at_the_renew_deadline_and_the_fence_stops_writes() -> None:
    server = cluster()

    async def scenario():
        elector, transitions = elector_on(server)
        kube = server.client()  # the operator's client, fenced by the elector (controller/leadership.py)
        kube.fence = elector.leading
        elector.start()
        await transitions.next()
        await kube.request("POST", "/api/v1/namespaces/ops/configmaps", body={"metadata": {"name": "while-leading"}})
        server.fail("PUT", LEASE, 500, "etcdserver: request timed out", times=None)
        _, stopped = await transitions.next()
        assert not elector.leading()
        with pytest.raises(FencedWrite):
            await kube.request("POST", "/api/v1/namespaces/ops/configmaps", body={"metadata": {"name": "after"}})
        await elector.stop()
        return stopped

    stopped = virtual_time.run(scenario())
    last_renewal = [r for r in server.log if r.method in ("POST", "PUT") and r.status in (200, 201)
                    and "/leases" in r.path][-1]
    # Leadership lasts the renew deadline from the start of the last renewal that succeeded, not a lease duration.
    assert last_renewal.at - 0.05 <= stopped - CONFIG.renew_deadline <= last_renewal.at
    assert [r.body["metadata"]["name"] for r in server.received("POST", "/configmaps")] == ["while-leading"]


def test_a_renewal_that_hangs_ends_leadership_at_the_deadline_not_when_it_answers() -> None:
    server = cluster()

    async def scenario():
        elector, transitions = elector_on(server)
        elector.start()
        _, started = await transitions.next()
        server.fail("PUT", LEASE, 500, hang=True)
        _, stopped = await transitions.next()
        await elector.stop()
        return started, stopped

    started, stopped = virtual_time.run(scenario())
    # The last good renewal was at about started + 2 s (one retry period); its deadline bounds the lead.
    assert stopped - started <= CONFIG.retry_period + CONFIG.renew_deadline + 0.1


def test_a_lease_held_by_another_is_taken_over_only_after_its_duration_since_last_seen_changing() -> None:
    server = cluster()
    server.put(lease_of("other"))

    async def scenario():
        elector, transitions = elector_on(server)
        elector.start()
        what, at = await transitions.next()
        await elector.stop()
        return what, at

    what, at = virtual_time.run(scenario())
    assert what == "started"
    assert virtual_time.START + 15.0 <= at <= virtual_time.START + 15.0 + 0.5
    takeover = [r for r in server.received("PUT", LEASE) if r.body["spec"]["holderIdentity"] == "me"][0]
    assert takeover.body["spec"]["leaseTransitions"] == 1


def test_a_renewing_holder_keeps_the_lease_and_a_release_hands_it_over_at_once() -> None:
    server = cluster()
    server.put(lease_of("other"))

    async def renew_as_other(until: float) -> None:
        while virtual_time.now() < until:
            await asyncio.sleep(2)
            server.modify(LEASE, lambda lease: lease["spec"].__setitem__("renewTime", micro_time()))
        server.modify(LEASE, lambda lease: lease["spec"].update(holderIdentity=None, leaseDurationSeconds=1))

    async def scenario():
        elector, transitions = elector_on(server)
        other = asyncio.create_task(renew_as_other(virtual_time.START + 60))
        elector.start()
        what, at = await transitions.next()
        await other
        await elector.stop()
        return what, at

    what, at = virtual_time.run(scenario())
    assert what == "started"
    assert virtual_time.START + 60 <= at <= virtual_time.START + 60.1, "taken over as the watch saw the release"


def test_losing_the_create_race_is_no_error_and_the_winner_is_respected() -> None:
    server = cluster()

    async def scenario():
        elector, transitions = elector_on(server)
        server.before("POST", LEASES, lambda _: server.put(lease_of("faster")))
        elector.start()
        await asyncio.sleep(10)
        leading = elector.leading()
        await elector.stop()
        return leading, transitions.log, elector.holder()

    leading, log, holder = virtual_time.run(scenario())
    assert not leading and log == [] and holder == "faster"
    assert [r.status for r in server.received("POST", LEASES)] == [409]
    assert not [r for r in server.received("PUT", LEASE) if r.body["spec"]["holderIdentity"] == "me"]


def test_a_watch_that_ends_is_opened_again_and_failing_watches_back_off() -> None:
    server = cluster()

    async def scenario():
        elector, _ = elector_on(server)
        elector.start()
        await asyncio.sleep(1)
        server.end_watches()
        await asyncio.sleep(1)
        server.fail("GET", LEASES, 500, "watch refused", when=lambda r: "watch" in r.params, times=3)
        server.end_watches()
        await asyncio.sleep(5)
        await elector.stop()

    virtual_time.run(scenario())
    watches = [r for r in server.received("GET", LEASES) if "watch" in r.params]
    assert len(watches) == 6  # the first, one after the plain end, three refused, one that works
    assert round(watches[1].at - watches[0].at) == 1, "an ended watch is resumed at once"
    pauses = [round(b.at - a.answered_at, 2) for a, b in itertools.pairwise(watches[2:])]
    assert pauses == [0.4, 0.8, 1.6], "refused watches are retried after growing pauses"
