"""Two replicas electing a leader with the default timings: failover after SIGKILL, handover after SIGTERM.

Every replica is ``kfdef-operator run --enable-leader-election`` as a process with its own work directory
and ``POD_NAME`` (its Lease identity starts with it). A trial measures from outside, on watch streams:

- failover: SIGKILL the leader at a random point of its renewal cycle and delete a Deployment of the stack at
  once; seconds from the kill until the Deployment is back (new uid), and until the standby holds the Lease.
  The standby can take over only once the lease has expired (15 s after the last renewal it saw), so this is
  at most the lease duration plus the takeover reconcile.
- handover: a rolling update's step. A new replica is started and warm first (maxSurge 1); then SIGTERM the
  leader and delete a Deployment; seconds from the signal until the Deployment is back and until a successor
  holds the Lease (the leader releases it once its work has stopped).

After each trial the killed or stopped replica is replaced by a new standby, as the Deployment would.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from kfdef_dev.process import LocalSourcesOperator

from .cluster import KFDEF_NAMESPACE
from .context import Bench, run_selector
from .operator_runs import Deployed
from .streams import Arrival, EventStream

LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{KFDEF_NAMESPACE}/leases"
LEASE_NAME = "kfdef-operator-leader-election"
LEASE_DURATION_S, RETRY_PERIOD_S = 15.0, 2.0  # the defaults, which the replicas run with
PREPARED = "prepared as a standby"


def holder(arrival: Arrival) -> str:
    """The replica (POD_NAME) holding the lease according to a Lease event."""
    return ((arrival.object.get("spec") or {}).get("holderIdentity") or "").rsplit("_", 1)[0]


@dataclass
class ReplicaSet:
    """The replicas of one shard, started as processes; every one started is stopped by :meth:`stop_all`."""

    bench: Bench
    name: str = "replica"
    extra_args: tuple[str, ...] = ()
    started: list[LocalSourcesOperator] = field(default_factory=list)
    _numbers: itertools.count = field(default_factory=itertools.count)

    async def start(self) -> LocalSourcesOperator:
        pod = f"{self.name}-{next(self._numbers)}"
        process = LocalSourcesOperator(self.bench.control_plane.kubeconfig, self.bench.work_dir / "replicas" / pod,
                                  extra_args=("--enable-leader-election", "--leader-election-namespace",
                                              KFDEF_NAMESPACE, *self.extra_args),
                                  env={"POD_NAME": pod})
        process.pod = pod  # type: ignore[attr-defined]
        await asyncio.to_thread(process.start)
        self.started.append(process)
        return process

    async def stop_all(self) -> None:
        await asyncio.gather(*(asyncio.to_thread(p.stop) for p in self.started))


async def wait_prepared(process: LocalSourcesOperator, timeout: float = 300) -> None:
    """Until a standby has prepared the KfDefs it saw (its desired state built, its kinds watched)."""
    deadline = time.monotonic() + timeout
    while PREPARED not in Path(process.log_path).read_text(errors="replace"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{process.pod} did not prepare as a standby in {timeout:.0f}s:\n{process.log_tail()}")
        await asyncio.sleep(0.1)


async def lead(bench: Bench, replicas: ReplicaSet) -> tuple[LocalSourcesOperator, LocalSourcesOperator]:
    """A leader (the first replica, alone at first) and a standby."""
    leases = await EventStream(bench.kube, LEASES).start()
    try:
        mark = leases.mark()
        leader = await replicas.start()
        await leases.wait_for(lambda a: a.name == LEASE_NAME and holder(a) == leader.pod, after=mark, timeout=60,
                              what=f"{leader.pod} to lead")
    finally:
        await leases.close()
    return leader, await replicas.start()


@dataclass
class Trial:
    healed_s: float      # the signal until the deleted Deployment is back
    lease_s: float       # the signal until a successor holds the lease


async def _trial(bench: Bench, deployed: Deployed, index: int, successors: tuple[LocalSourcesOperator, ...],
                 stop_leader) -> Trial:
    """Stop the leader (``stop_leader()`` returns the moment it signalled), delete a Deployment, time both."""
    namespace, name = deployed.workload.deployments[index % len(deployed.workload.deployments)]
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
    old_uid = (await bench.kube.request("GET", path))["metadata"]["uid"]
    leases = await EventStream(bench.kube, LEASES).start()
    deployments = await EventStream(bench.kube, "/apis/apps/v1/deployments",
                                    label_selector=run_selector(deployed.workload)).start()
    try:
        pods = {p.pod for p in successors}
        signalled = await stop_leader()
        await bench.kube.request("DELETE", path)
        back = await deployments.wait_for(
            lambda a: a.type != "DELETED" and (a.namespace, a.name) == (namespace, name) and a.uid != old_uid,
            after=0, timeout=120, what=f"Deployment {namespace}/{name} back")
        taken = await leases.wait_for(lambda a: a.name == LEASE_NAME and holder(a) in pods, after=0, timeout=120,
                                      what="a successor to hold the lease")
        return Trial(back.at - signalled, taken.at - signalled)
    finally:
        await leases.close()
        await deployments.close()


async def failover(bench: Bench, deployed: Deployed, replicas: ReplicaSet, leader: LocalSourcesOperator,
                   standby: LocalSourcesOperator, trials: int) -> tuple[list[Trial], tuple[LocalSourcesOperator, ...]]:
    """SIGKILL the leader ``trials`` times; returns the trials and the replicas left running."""
    results = []
    for index in range(trials):
        await wait_prepared(standby)
        await asyncio.sleep(random.uniform(0.0, RETRY_PERIOD_S))  # a random point of the renewal cycle

        async def kill(process: LocalSourcesOperator = leader) -> float:
            killed = time.monotonic()
            await asyncio.to_thread(process.kill)
            return killed

        results.append(await _trial(bench, deployed, index, (standby,), kill))
        leader, standby = standby, await replicas.start()
    return results, (leader, standby)


async def handover(bench: Bench, deployed: Deployed, replicas: ReplicaSet, leader: LocalSourcesOperator,
                   standby: LocalSourcesOperator, trials: int) -> tuple[list[Trial], tuple[LocalSourcesOperator, ...]]:
    """Rolling-update steps: a warm new replica, then SIGTERM to the leader; returns the trials and the replicas."""
    results = []
    for index in range(trials):
        surge = await replicas.start()
        await wait_prepared(standby)
        await wait_prepared(surge)

        async def terminate(process: LocalSourcesOperator = leader) -> float:
            signalled = time.monotonic()
            process.popen.send_signal(signal.SIGTERM)
            return signalled

        results.append(await _trial(bench, deployed, len(deployed.workload.deployments) // 2 + index,
                                    (standby, surge), terminate))
        await asyncio.to_thread(leader.stop)  # reaps the process, which has exited by itself
        leader, standby = await _which_leads(bench, standby, surge)
    return results, (leader, standby)


async def _which_leads(bench: Bench,
                       *candidates: LocalSourcesOperator) -> tuple[LocalSourcesOperator, LocalSourcesOperator]:
    lease = await bench.kube.request("GET", f"{LEASES}/{LEASE_NAME}")
    held = (lease["spec"].get("holderIdentity") or "").rsplit("_", 1)[0]
    first, second = candidates
    return (first, second) if first.pod == held else (second, first)
