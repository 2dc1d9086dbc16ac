"""What every scenario shares: the control plane, an admin client, the archive server, the operator process.

Also the KfDef helpers the scenarios time against: create, wait for a status
predicate on the watch of KfDefs, delete and wait until gone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kfdef_dev.controlplane import ControlPlane
from kfdef_operator.runtime.ownership import INSTANCE_LABEL, Owner
from kfdef_operator.ssa.client import KubeClient
from tests.operator_process import OperatorProcess

from .archive_server import ArchiveServer
from .cluster import KFDEF_NAMESPACE
from .streams import Arrival, EventStream
from .workload import RUN_LABEL, Workload, generate, write_tarball

JSON = dict[str, Any]
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


@dataclass
class Bench:
    """Shared state of one benchmark session."""

    control_plane: ControlPlane
    kube: KubeClient
    archives: ArchiveServer
    work_dir: Path
    operator: OperatorProcess
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

    # -- the operator process ----------------------------------------------------------

    async def operator_metrics(self) -> dict[str, float]:
        return await asyncio.to_thread(self.operator.metrics)

    def operator_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.operator.popen.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS in /proc status")


def run_selector(workload: Workload) -> str:
    return f"{RUN_LABEL}={workload.suffix}"
