"""A fleet of small KfDefs served by shards: three operators, each owning a third by label, versus one operator.

Every KfDef deploys the same 20-object package (a ServiceAccount, a Role and its RoleBinding, a headless
Service, 2 Secrets, 14 ConfigMaps and the package's parameters ConfigMap) into a namespace of its own (the
``namespace`` parameter), so objects never collide. KfDefs are labelled round-robin for the default shard
(no label), ``shard1`` and ``shard2``; each shard is ``kfdef-operator run`` with leader election on its own
Lease and its ``--watch-label-selector``.

Figures: seconds from the last create call returning until every KfDef is Ready (on the watch of KfDefs), then
until every one is gone after deletion; which operator reconciled which KfDef, read from each operator's own
``kfdef_condition`` gauges (an operator exports a KfDef's conditions once it wrote its status); and the CPU
seconds each process spent meanwhile (``/proc/<pid>/stat``, children such as kustomize included), which says
where the machine's cores went.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

from kfdef_dev.manifests import tarball, write_package
from kfdef_operator.api.names import SHARD_LABEL

from .cluster import KFDEF_NAMESPACE, process_cpu_s
from .context import KFDEFS_PATH, Bench, is_ready
from .replicas import LEASE_NAME, LEASES, ReplicaSet
from .streams import Arrival, EventStream

CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
SHARDS = (("default", f"!{SHARD_LABEL}"), ("shard1", f"{SHARD_LABEL}=shard1"), ("shard2", f"{SHARD_LABEL}=shard2"))
OBJECTS_PER_KFDEF = 20
#: How often the fleet's deleted namespaces are listed until they are gone.
NAMESPACE_POLL_S = 0.5


def _package(suffix: str) -> list[dict]:
    """19 namespaced objects without a namespace (the KfDef's parameter sets it); the 20th is params.env's."""
    def named(kind: str, api_version: str, name: str, **body: object) -> dict:
        return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, **body}

    return [named("ServiceAccount", "v1", "app"),
            named("Role", "rbac.authorization.k8s.io/v1", "app",
                  rules=[{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
            named("RoleBinding", "rbac.authorization.k8s.io/v1", "app",
                  roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "app"},
                  subjects=[{"kind": "ServiceAccount", "name": "app"}]),
            named("Service", "v1", "app", spec={"clusterIP": "None", "selector": {"app": "app"},
                                               "ports": [{"port": 80}]}),
            *(named("Secret", "v1", f"secret-{n}", stringData={"token": f"{suffix}-{n}"}) for n in range(2)),
            *(named("ConfigMap", "v1", f"config-{n}", data={"value": f"{suffix}-{n}"}) for n in range(14))]


class Fleet:
    """``count`` KfDefs of the package (their namespaces created first), assigned round-robin to the shards."""

    def __init__(self, bench: Bench, count: int) -> None:
        self.bench = bench
        self.suffix = uuid.uuid4().hex[:6]
        self.names = [f"fleet-{self.suffix}-{n}" for n in range(count)]
        root = bench.work_dir / "fleet" / self.suffix
        write_package(root, "app", _package(self.suffix), params={"mode": "fleet"})
        archive = bench.archives.directory / f"fleet-{self.suffix}.tar.gz"
        archive.write_bytes(tarball(root))
        self.uri = bench.archives.url(archive)

    def shard_of(self, name: str) -> str:
        return SHARDS[self.names.index(name) % len(SHARDS)][0]

    def kfdef(self, name: str) -> dict:
        shard = self.shard_of(name)
        return {"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef",
                "metadata": {"name": name, "namespace": KFDEF_NAMESPACE,
                             "labels": {SHARD_LABEL: shard} if shard != "default" else {}},
                "spec": {"applications": [{"name": "app", "kustomizeConfig": {
                    "repoRef": {"name": "manifests", "path": "app"},
                    "parameters": [{"name": "namespace", "value": name}]}}],
                         "repos": [{"name": "manifests", "uri": self.uri}]}}

    async def _each(self, make) -> None:
        for result in await self.bench.kube.gather_limited([make(name) for name in self.names], 16):
            if isinstance(result, BaseException):
                raise result

    async def converge(self, *, timeout: float) -> float:
        """Create every KfDef; seconds from the last create returning until every one is Ready."""
        await self._each(lambda n: self.bench.kube.request("POST", "/api/v1/namespaces", body={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}))
        mark = self.bench.kfdefs.mark()
        await self._each(lambda n: self.bench.kube.request("POST", KFDEFS_PATH, body=self.kfdef(n)))
        created = time.monotonic()
        ready = await asyncio.gather(*(self.bench.wait_kfdef(n, is_ready, after=mark, timeout=timeout, what="Ready")
                                       for n in self.names))
        return max(a.at for a in ready) - created

    async def remove(self, *, timeout: float) -> float:
        """Delete every KfDef; seconds until every one is gone (its stack torn down). Then their namespaces, waited
        on until gone (not timed), so that the next step does not share kube-controller-manager and kube-apiserver
        with hundreds of namespace deletions."""
        mark = self.bench.kfdefs.mark()
        started = time.monotonic()
        await self._each(lambda n: self.bench.kube.request("DELETE", f"{KFDEFS_PATH}/{n}"))
        gone = await asyncio.gather(*(self.bench.kfdefs.wait_for(
            lambda a, n=n: a.name == n and a.type == "DELETED", after=mark, timeout=timeout, what=f"{n} gone")
            for n in self.names))
        removed_s = max(a.at for a in gone) - started
        await self._each(lambda n: self.bench.kube.request("DELETE", f"/api/v1/namespaces/{n}"))
        deadline = time.monotonic() + timeout
        while left := await self._namespaces_left():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(left)} of the fleet's namespaces still there after {timeout:.0f}s")
            await asyncio.sleep(NAMESPACE_POLL_S)
        return removed_s

    async def _namespaces_left(self) -> set[str]:
        listing = await self.bench.kube.request("GET", "/api/v1/namespaces")
        return {item["metadata"]["name"] for item in listing.get("items") or []} & set(self.names)


def cpu_seconds(pid: int) -> float:
    """CPU seconds a process, its reaped children and its live descendants have used (user and system)."""
    return sum(process_cpu_s(pid))


class CpuMeter:
    """CPU seconds per group of processes between :meth:`start` and :meth:`stop`, and the wall time."""

    def __init__(self, bench: Bench, operators: list[int]) -> None:
        self._groups = {"operators": operators,
                        **{name: [bench.control_plane.pid(name)] for name in CONTROL_PLANE}}

    def _now(self) -> dict[str, float]:
        return {group: sum(cpu_seconds(pid) for pid in pids) for group, pids in self._groups.items()}

    def start(self) -> None:
        self._started, self._first = time.monotonic(), self._now()

    def stop(self) -> dict:
        wall = time.monotonic() - self._started
        used = {group: round(now - self._first[group], 1) for group, now in self._now().items()}
        return {"wall_s": round(wall, 1), "cpu_s": used, "cores_used": round(sum(used.values()) / wall, 2),
                "cores": os.cpu_count()}


def reconciled(metrics: dict[str, float]) -> set[str]:
    """The KfDefs in the bench namespace whose status this operator wrote (its ``kfdef_condition`` gauges)."""
    prefix = 'kfdef_condition{name="'
    return {key[len(prefix):].split('"', 1)[0] for key in metrics
            if key.startswith(prefix) and f'namespace="{KFDEF_NAMESPACE}"' in key and 'type="Ready"' in key}


async def shards(bench: Bench, per_shard: int, *, timeout: float = 1800) -> dict:
    """The fleet served by three shards (one leading replica each)."""
    fleet = Fleet(bench, per_shard * len(SHARDS))
    operators = [ReplicaSet(bench, f"shard-{name}", ("--watch-label-selector", selector, "--shard", name))
                 for name, selector in SHARDS]
    leases = await EventStream(bench.kube, LEASES).start()
    processes = await asyncio.gather(*(replicas.start() for replicas in operators))
    meter = CpuMeter(bench, [p.popen.pid for p in processes])
    try:
        meter.start()
        mark = leases.mark()
        converged_s = await fleet.converge(timeout=timeout)
        cpu = meter.stop()
        renewal_gap_s = longest_renewal_gap(leases.events[mark:], {f"{LEASE_NAME}-{n}" for n, _ in SHARDS})
        step_downs = sum(process.log_path.read_text(errors="replace").count(": stopped leading (lease ")
                         for process in processes)
        served = await _served(processes, set(fleet.names))
        writes = {name: _writes(await asyncio.to_thread(process.metrics))
                  for (name, _), process in zip(SHARDS, processes, strict=True)}
        removed_s = await fleet.remove(timeout=timeout)
    finally:
        await leases.close()
        for replicas in operators:
            await replicas.stop_all()
    by_kfdef = {name: [shard for shard, names in served.items() if name in names] for name in fleet.names}
    return {"kfdefs": len(fleet.names), "objects": len(fleet.names) * OBJECTS_PER_KFDEF, "converged_s": converged_s,
            "removed_s": removed_s, "served_by_one": sum(len(s) == 1 for s in by_kfdef.values()),
            "served_by_several": sum(len(s) > 1 for s in by_kfdef.values()),
            "served_by_its_shard": sum(s == [fleet.shard_of(n)] for n, s in by_kfdef.items()),
            "kfdefs_per_shard": {shard: len(names) for shard, names in served.items()}, "writes_per_shard": writes,
            "lease_renewal_gap_max_s": renewal_gap_s, "step_downs": step_downs, "cpu": cpu}


def longest_renewal_gap(events: list[Arrival], leases: set[str]) -> float:
    """The longest time between two writes of one of ``leases``: a leader renews every 2 s, and steps down when a
    renewal has not succeeded 10 s (the renew deadline) after the previous one began."""
    gap, last = 0.0, {}
    for event in events:
        if event.name in leases and event.type != "DELETED":
            if event.name in last:
                gap = max(gap, event.at - last[event.name])
            last[event.name] = event.at
    return gap


async def single(bench: Bench, count: int, *, timeout: float = 1800) -> dict:
    """The same fleet served by one operator (no shard, no election): the baseline."""
    fleet = Fleet(bench, count)
    replicas = ReplicaSet(bench, "unsharded")
    process = await replicas.start()
    meter = CpuMeter(bench, [process.popen.pid])
    try:
        meter.start()
        converged_s = await fleet.converge(timeout=timeout)
        cpu = meter.stop()
        writes = _writes(await asyncio.to_thread(process.metrics))
        removed_s = await fleet.remove(timeout=timeout)
    finally:
        await replicas.stop_all()
    return {"kfdefs": count, "objects": count * OBJECTS_PER_KFDEF, "converged_s": converged_s,
            "removed_s": removed_s, "writes": writes, "cpu": cpu}


async def _served(processes: list, names: set[str], *, timeout: float = 30.0) -> dict[str, set[str]]:
    """The KfDefs each shard reconciled (:func:`reconciled`), read again until together they name all of ``names``
    or ``timeout`` passes: an operator exports a KfDef's condition when its status write has answered, which on a
    busy machine comes after the bench saw that status (the last KfDefs of the fleet). A KfDef no shard names
    after that is counted as not served."""
    deadline = time.monotonic() + timeout
    while True:
        served = {name: reconciled(await asyncio.to_thread(process.metrics))
                  for (name, _), process in zip(SHARDS, processes, strict=True)}
        if names <= set().union(*served.values()) or time.monotonic() > deadline:
            return served
        await asyncio.sleep(0.5)


def _writes(metrics: dict[str, float]) -> int:
    return int(sum(value for key, value in metrics.items() if key.startswith("kfdef_api_requests_total{")
                   and any(f'verb="{verb}"' in key for verb in ("POST", "PUT", "PATCH", "DELETE"))))
