"""What every scenario shares: the control plane, an admin client, the archive server, the operator process.

Also the KfDef helpers the scenarios time against: create, wait for a status
predicate on the watch of KfDefs, delete and wait until gone.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kfdef_dev.controlplane import ControlPlane
from kfdef_dev.process import LocalSourcesOperator
from kfdef_operator.api.types import JSON
from kfdef_operator.runtime.ownership import INSTANCE_LABEL, Owner
from kfdef_operator.ssa.client import KubeClient

from .archive_server import ArchiveServer
from .cluster import KFDEF_NAMESPACE, audit_offset, process_cpu_s, stack_writes_span
from .streams import Arrival, EventStream
from .workload import RUN_LABEL, Workload, generate, write_tarball

KFDEFS_PATH = f"/apis/kfdef.apps.kubeflow.org/v1/namespaces/{KFDEF_NAMESPACE}/kfdefs"

# Collections of the built-in kinds a workload holds, by API path prefix.
BUILTIN_COLLECTIONS = {
    "/api/v1": ("namespaces", "services", "serviceaccounts", "configmaps"),
    "/apis/apps/v1": ("deployments",),
    "/apis/apiextensions.k8s.io/v1": ("customresourcedefinitions",),
    "/apis/rbac.authorization.k8s.io/v1": ("clusterroles", "clusterrolebindings", "roles", "rolebindings"),
    "/apis/admissionregistration.k8s.io/v1": ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"),
}


def stack_resources(workloads: list[Workload]) -> frozenset[str]:
    """Plurals of every resource the workloads' objects live in (as kube-apiserver's metrics name them)."""
    plurals = {plural for group in BUILTIN_COLLECTIONS.values() for plural in group}
    for workload in workloads:
        plurals.update(workload.plurals.values())
    return frozenset(plurals)


def collection_paths(workload: Workload) -> list[str]:
    """Cluster-wide collection paths of every kind in the workload (custom resources included)."""
    paths = [f"{prefix}/{plural}" for prefix, plurals in BUILTIN_COLLECTIONS.items() for plural in plurals]
    paths += [f"/apis/{group}/v1/{plural}" for (group, _), plural in sorted(workload.plurals.items())]
    return paths


def condition(obj: JSON, type_: str) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c.get("status")
    return None


def all_applied(obj: JSON) -> bool:
    """Status says every object is applied and the reconcile is done."""
    summary = (obj.get("status") or {}).get("summary") or {}
    return (summary.get("total", 0) > 0 and summary.get("applied") == summary["total"]
            and condition(obj, "Reconciling") == "False")


def is_ready(obj: JSON) -> bool:
    return condition(obj, "Ready") == "True"


def reconciling_reason(obj: JSON) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Reconciling" and c.get("status") == "True":
            return c.get("reason")
    return None


#: The steps a first apply announces in its status, in order (``Reconciling`` reasons).
STEPS = ("FetchingSources", "Rendering", "Applying")
#: The processes whose CPU time the benchmarks account for: the control plane's, the operator's, and the operator's
#: renders (its render processes and their kustomize runs).
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
PROCESSES = (*CONTROL_PLANE, "operator", "render")


#: What an ``apply_phase_s`` entry measures (:meth:`Bench.apply_phase_s`).
APPLY_PHASE_NOTE = "the operator's first write of a stack object to its last one answered (kube-apiserver's audit log)"

#: A teardown wave as ``ResourceManager.teardown`` logs it.
_WAVE = re.compile(r"KfDef (?P<kfdef>\S+): teardown wave of (?P<objects>\d+) object\(s\) \((?P<kinds>[^)]*)\): "
                   r"deletes sent in (?P<sent>[\d.]+) s, waited on until (?P<done>[\d.]+) s")


def cpu_used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per process between two :meth:`Bench.cpu` readings."""
    return {name: round(after[name] - before[name], 3) for name in before}


@dataclass
class Bench:
    """Shared state of one benchmark session."""

    control_plane: ControlPlane
    kube: KubeClient
    archives: ArchiveServer
    work_dir: Path
    operator: LocalSourcesOperator
    kfdefs: EventStream

    # -- workloads -------------------------------------------------------------------

    def new_workload(self, scale: float) -> tuple[Workload, str]:
        """A fresh workload (new names) and the URL its tarball is served at."""
        workload = generate(self.work_dir / "repos", scale=scale)
        tarball = write_tarball(workload, self.archives.directory)
        return workload, self.archives.url(tarball)

    # -- KfDefs ----------------------------------------------------------------------

    async def create_kfdef(self, workload: Workload, uri: str, name: str | None = None) -> tuple[JSON, float]:
        """POST a KfDef for the workload; returns it and the time the call returned."""
        body = workload.kfdef(name or f"stack-{workload.suffix}", KFDEF_NAMESPACE, uri)
        created = await self.kube.request("POST", KFDEFS_PATH, body=body)
        return created, time.monotonic()

    async def wait_kfdef(self, name: str, predicate: Callable[[JSON], bool], *, after: int, timeout: float,
                         what: str) -> Arrival:
        """The first event of KfDef ``name`` past ``after`` satisfying ``predicate``; raises if it turns Degraded."""
        def check(arrival: Arrival) -> bool:
            if arrival.name != name or arrival.type == "DELETED":
                return False
            if condition(arrival.object, "Degraded") == "True":
                raise RuntimeError(f"KfDef {name} is Degraded: {arrival.object['status'].get('failures')}")
            return predicate(arrival.object)

        return await self.kfdefs.wait_for(check, after=after, timeout=timeout, what=f"KfDef {name} {what}")

    async def delete_kfdef(self, name: str, *, timeout: float = 300) -> float:
        """Delete a KfDef; returns seconds from the delete call returning until it is gone."""
        mark = self.kfdefs.mark()
        await self.kube.request("DELETE", f"{KFDEFS_PATH}/{name}")
        started = time.monotonic()
        gone = await self.kfdefs.wait_for(lambda a: a.name == name and a.type == "DELETED", after=mark,
                                          timeout=timeout, what=f"KfDef {name} deletion")
        return gone.at - started

    async def remove_kfdefs(self, *, timeout: float = 600) -> None:
        """Delete every KfDef left (after a failed scenario) and wait until each is gone, its stack torn down."""
        listing = await self.kube.request("GET", KFDEFS_PATH)
        for item in listing.get("items") or []:
            await self.delete_kfdef(item["metadata"]["name"], timeout=timeout)

    async def leftovers(self, workload: Workload, name: str) -> int:
        """Objects still carrying the KfDef's instance label, in every kind of the workload."""
        selector = f"{INSTANCE_LABEL}={Owner(name, KFDEF_NAMESPACE, '').label}"

        async def count(path: str) -> int:
            listing = await self.kube.get(path, labelSelector=selector)  # None: a CRD that is gone
            return len((listing or {}).get("items") or [])

        return sum(await asyncio.gather(*(count(p) for p in collection_paths(workload))))

    def steps(self, name: str, *, after: int, started: float, applied: float) -> dict[str, float]:
        """Seconds spent in each step of KfDef ``name``'s first apply, from the status it wrote (seen on the watch
        of KfDefs past ``after``): until it started (``queued``: the create call returning to its first step), each
        of :data:`STEPS` until the next, ``Applying`` until ``applied`` (every object applied)."""
        seen: dict[str, float] = {}
        for arrival in self.kfdefs.events[after:]:
            reason = reconciling_reason(arrival.object) if arrival.name == name else None
            if reason in STEPS and reason not in seen:
                seen[reason] = arrival.at
        times = [seen.get(step) for step in STEPS]
        if any(t is None for t in times):
            return {}
        bounds = [started, *times, applied]
        spans = zip(bounds, bounds[1:], strict=False)
        return {label: round(end - begin, 3) for label, (begin, end) in
                zip(("queued", "fetch", "render", "apply"), spans, strict=True)}

    def audit_mark(self) -> int:
        """Where kube-apiserver's audit log ends now (see :meth:`apply_phase_s`)."""
        return audit_offset(self.control_plane)

    def apply_phase_s(self, since: int, applied: float) -> float | None:
        """The apply phase of a first apply: seconds from the operator's first write of a stack object (request
        received) to its last one answered, by kube-apiserver's audit log after byte ``since``, among the writes
        received before ``applied`` (the ``time.monotonic()`` arrival of the status saying every object is applied,
        which the operator writes after its last apply). None when the log holds no such write."""
        until = time.time() - (time.monotonic() - applied)
        span = stack_writes_span(self.control_plane, since, until)
        return None if span is None else span[1] - span[0]

    # -- CPU -----------------------------------------------------------------------------

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of each of :data:`PROCESSES` (0 for the operator's when it is not running)."""
        seconds = {name: sum(process_cpu_s(self.control_plane.pid(name))) for name in CONTROL_PLANE}
        running = self.operator.popen is not None and self.operator.popen.poll() is None
        seconds["operator"], seconds["render"] = process_cpu_s(self.operator.popen.pid) if running else (0.0, 0.0)
        return seconds

    # -- the operator process ----------------------------------------------------------

    async def operator_metrics(self) -> dict[str, float]:
        return await asyncio.to_thread(self.operator.metrics)

    def operator_log_offset(self) -> int:
        """Where the operator's log ends now (see :meth:`operator_log_since`)."""
        try:
            return self.operator.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def operator_log_since(self, since: int) -> str:
        """What the operator logged after byte ``since`` of its log (:meth:`operator_log_offset`)."""
        with self.operator.log_path.open("rb") as log:
            log.seek(since)
            return log.read().decode(errors="replace")

    def teardown_waves(self, name: str, since: int) -> list[dict]:
        """The teardown waves of KfDef ``name`` the operator logged after byte ``since`` of its log: objects, kinds,
        seconds until its deletes were sent and until it was waited on."""
        return [{"objects": int(m["objects"]), "kinds": m["kinds"].split(", "), "sent_s": float(m["sent"]),
                 "done_s": float(m["done"])}
                for m in _WAVE.finditer(self.operator_log_since(since)) if m["kfdef"] == f"{KFDEF_NAMESPACE}/{name}"]

    def operator_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.operator.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS in /proc status")


def run_selector(workload: Workload) -> str:
    return f"{RUN_LABEL}={workload.suffix}"
