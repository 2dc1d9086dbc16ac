"""The Lease elector against the real API server: two candidates in one event loop, each with its own client.

Short timings (lease 3 s, renew deadline 2 s, retry 0.5 s) keep the test quick; the rules are the same as with
client-go's defaults. The candidate ``a`` runs as the group-less ``kfdef-operator`` token user, bound to a Role
that grants the Lease verbs of deploy/common/leader_election_rbac.yaml; revoking that binding is a real way for a
leader to lose the ability to renew.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kfdef_dev.controlplane import OPERATOR_USER
from kfdef_operator.runtime.election import ElectionConfig, LeaseElector
from kfdef_operator.ssa.client import FencedWrite, KubeClient
from tests.kube import Kube

pytestmark = pytest.mark.cluster

TIMINGS = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.5}
LEASE_RULE = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
              "verbs": ["get", "create", "update", "watch"]}


@dataclass
class Candidate:
    """An elector and the moments it started and stopped leading."""

    elector: LeaseElector
    kube: KubeClient
    started: list[float] = field(default_factory=list)
    stopped: list[float] = field(default_factory=list)


async def candidate(kubeconfig: Path, namespace: str, identity: str, **overrides: object) -> Candidate:
    kube = await KubeClient.connect(str(kubeconfig))
    config = ElectionConfig(namespace, "test-lease", identity, **{**TIMINGS, **overrides})  # type: ignore[arg-type]
    started: list[float] = []
    stopped: list[float] = []
    elector = LeaseElector(kube, config, on_started=lambda: started.append(time.monotonic()),
                           on_stopped=lambda: stopped.append(time.monotonic()))
    return Candidate(elector, kube, started, stopped)


async def until(check, timeout: float, what: str) -> float:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.01)
    return time.monotonic()


@pytest.fixture
def lease_namespace(kube: Kube, namespace: str) -> str:
    """The test namespace, where the unprivileged operator user may use Leases (and nothing else)."""
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "leases", "namespace": namespace}, "rules": [LEASE_RULE]})
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "leases", "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "leases"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": OPERATOR_USER}]})
    return namespace


def lease(kube: Kube, namespace: str) -> dict:
    return (kube.get("coordination.k8s.io/v1", "Lease", "test-lease", namespace) or {}).get("spec") or {}


def test_one_leader_a_released_lease_is_taken_over_at_once(control_plane, kube: Kube, lease_namespace: str) -> None:
    async def scenario() -> float:
        a = await candidate(control_plane.kubeconfig_for(OPERATOR_USER), lease_namespace, "a")
        b = await candidate(control_plane.kubeconfig, lease_namespace, "b")
        try:
            a.elector.start()
            await until(a.elector.leading, 10, "a to lead")
            b.elector.start()
            await asyncio.sleep(4 * TIMINGS["lease_duration"])  # several lease durations: b never takes over
            assert a.elector.leading() and not b.elector.leading() and not b.started
            assert lease(kube, lease_namespace)["holderIdentity"] == "a"
            stopping = time.monotonic()
            await a.elector.stop()  # releases
            assert a.stopped and lease(kube, lease_namespace).get("holderIdentity") not in ("a",)
            took_over = await until(b.elector.leading, 5, "b to lead after the release")
            assert lease(kube, lease_namespace)["holderIdentity"] == "b"
            assert lease(kube, lease_namespace)["leaseTransitions"] == 1
            return took_over - stopping
        finally:
            for c in (a, b):
                await c.elector.stop()
                await c.kube.close()

    handover = asyncio.run(scenario())
    assert handover < 1.0, f"a released lease was taken over after {handover:.2f}s (the watch should see it at once)"


def test_a_leader_that_cannot_renew_stops_before_anyone_takes_over(control_plane, kube: Kube,
                                                                    lease_namespace: str) -> None:
    async def scenario() -> tuple[float, float, float]:
        a = await candidate(control_plane.kubeconfig_for(OPERATOR_USER), lease_namespace, "a")
        b = await candidate(control_plane.kubeconfig, lease_namespace, "b")
        fenced = await KubeClient.connect(str(control_plane.kubeconfig_for(OPERATOR_USER)))
        fenced.fence = a.elector.leading
        try:
            a.elector.start()
            await until(a.elector.leading, 10, "a to lead")
            b.elector.start()
            await asyncio.sleep(1.0)
            revoked = time.monotonic()
            kube.delete("rbac.authorization.k8s.io/v1", "RoleBinding", "leases", lease_namespace)
            a_stopped = await until(lambda: bool(a.stopped), 10, "a to stop leading")
            b_started = await until(lambda: bool(b.started), 10, "b to lead")
            with pytest.raises(FencedWrite):  # past its deadline, a's writes never leave the process
                await fenced.request("POST", f"/api/v1/namespaces/{lease_namespace}/configmaps",
                                     body={"metadata": {"name": "late-write"}})
            return a_stopped - revoked, b_started - revoked, b_started - a_stopped
        finally:
            for c in (a, b):
                await c.elector.stop()
                await c.kube.close()
            await fenced.close()

    a_stopped, b_started, gap = asyncio.run(scenario())
    assert a_stopped <= TIMINGS["renew_deadline"] + 0.3, f"a kept leading {a_stopped:.2f}s without renewing"
    # b waits a whole lease duration from the last renewal it saw: a stops with time to spare.
    assert gap >= TIMINGS["lease_duration"] - TIMINGS["renew_deadline"] - TIMINGS["retry_period"], (
        f"b took over {gap:.2f}s after a stopped")
    assert not kube.exists("v1", "ConfigMap", "late-write", lease_namespace)


def test_a_crashed_leader_is_replaced_after_the_lease_duration(control_plane, kube: Kube,
                                                               lease_namespace: str) -> None:
    async def scenario() -> float:
        a = await candidate(control_plane.kubeconfig_for(OPERATOR_USER), lease_namespace, "a",
                            release_on_cancel=False)  # as if killed: nothing is released
        b = await candidate(control_plane.kubeconfig, lease_namespace, "b")
        try:
            a.elector.start()
            await until(a.elector.leading, 10, "a to lead")
            b.elector.start()
            await asyncio.sleep(1.0)
            await a.elector.stop()
            crashed = time.monotonic()
            taken = await until(b.elector.leading, 10, "b to lead")
            return taken - crashed
        finally:
            for c in (a, b):
                await c.elector.stop()
                await c.kube.close()

    failover = asyncio.run(scenario())
    # The last renewal was at most one retry period before the crash; b waits the lease duration from it.
    assert TIMINGS["lease_duration"] - TIMINGS["retry_period"] - 0.1 <= failover <= TIMINGS["lease_duration"] + 1.0
