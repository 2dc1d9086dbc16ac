"""Self-healing latency, measured from outside the operator on watch streams.

- Deployment: from the DELETE call returning until the watch of the stack's
  Deployments delivers the object again with a new uid. Trials rotate over
  the stack's Deployments so that no object is healed often enough to trip
  the operator's fight backoff (more than 3 heals of one object per minute).
- Namespace: from the Namespace's DELETED event (kube-apiserver finished the
  deletion: the namespace controller emptied it) until one of its Deployments
  exists again.
- CRD: from the CRD's DELETED event until its custom resource exists again
  (polled with GETs every ``POLL_S``: the kind's watch dies with the CRD).
"""

from __future__ import annotations

import asyncio
import time

from .context import KFDEFS_PATH, Bench, is_ready, run_selector
from .operator_runs import Deployed
from .streams import EventStream

POLL_S = 0.005


async def _open(bench: Bench, path: str, deployed: Deployed) -> EventStream:
    return await EventStream(bench.kube, path, label_selector=run_selector(deployed.workload)).start()


async def deployments(bench: Bench, deployed: Deployed, trials: int, *, timeout: float = 30) -> list[float]:
    """Milliseconds from each Deployment delete returning until it exists again (new uid)."""
    stream = await _open(bench, "/apis/apps/v1/deployments", deployed)
    samples = []
    try:
        targets = deployed.workload.deployments
        for trial in range(trials):
            namespace, name = targets[trial % len(targets)]
            path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
            old_uid = (await bench.kube.request("GET", path))["metadata"]["uid"]
            mark = stream.mark()
            await bench.kube.request("DELETE", path)
            deleted_at = time.monotonic()
            back = await stream.wait_for(
                lambda a: a.type != "DELETED" and (a.namespace, a.name) == (namespace, name) and a.uid != old_uid,
                after=mark, timeout=timeout, what=f"Deployment {namespace}/{name} back")
            samples.append(max(back.at - deleted_at, 0.0) * 1000)
            await asyncio.sleep(0.05)
    finally:
        await stream.close()
    return samples


async def _settle(bench: Bench, deployed: Deployed, timeout: float) -> None:
    """Wait until the KfDef reports every object ready again (the next trial starts from a whole stack)."""
    path = f"{KFDEFS_PATH}/{deployed.name}"
    deadline = time.monotonic() + timeout
    while True:
        kfdef = await bench.kube.request("GET", path)
        summary = (kfdef.get("status") or {}).get("summary") or {}
        if is_ready(kfdef) and summary.get("ready") == summary.get("total"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"KfDef {deployed.name} not Ready again after {timeout:.0f}s: {summary}")
        await asyncio.sleep(0.1)


async def namespaces(bench: Bench, deployed: Deployed, trials: int, *, timeout: float = 120) -> list[float]:
    """Seconds from a Namespace's DELETED event until a Deployment of it exists again; one namespace per trial."""
    ns_stream = await _open(bench, "/api/v1/namespaces", deployed)
    deploy_stream = await _open(bench, "/apis/apps/v1/deployments", deployed)
    samples = []
    try:
        for namespace in deployed.workload.namespaces[:trials]:
            name = next(n for ns, n in deployed.workload.deployments if ns == namespace)
            mark, deploy_mark = ns_stream.mark(), deploy_stream.mark()
            await bench.kube.request("DELETE", f"/api/v1/namespaces/{namespace}")
            gone = await ns_stream.wait_for(lambda a: a.type == "DELETED" and a.name == namespace, after=mark,
                                            timeout=timeout, what=f"Namespace {namespace} deleted")
            back = await deploy_stream.wait_for(
                lambda a: a.type != "DELETED" and (a.namespace, a.name) == (namespace, name) and a.at > gone.at,
                after=deploy_mark, timeout=timeout, what=f"Deployment {namespace}/{name} back")
            samples.append(back.at - gone.at)
            await _settle(bench, deployed, timeout)
    finally:
        await ns_stream.close()
        await deploy_stream.close()
    return samples


async def crds(bench: Bench, deployed: Deployed, trials: int, *, timeout: float = 120) -> list[float]:
    """Seconds from a CRD's DELETED event until its custom resource exists again; one CRD per trial."""
    stream = await _open(bench, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", deployed)
    samples = []
    try:
        for crd_name, namespace, name in deployed.workload.custom_resources[:trials]:
            plural, _, group = crd_name.partition(".")
            cr_path = f"/apis/{group}/v1/namespaces/{namespace}/{plural}/{name}"
            mark = stream.mark()
            await bench.kube.request("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}")
            gone = await stream.wait_for(lambda a: a.type == "DELETED" and a.name == crd_name, after=mark,
                                         timeout=timeout, what=f"CRD {crd_name} deleted")
            while await bench.kube.get(cr_path) is None:
                if time.monotonic() - gone.at > timeout:
                    raise TimeoutError(f"{cr_path} not back after {timeout:.0f}s")
                await asyncio.sleep(POLL_S)
            samples.append(time.monotonic() - gone.at)
            await _settle(bench, deployed, timeout)
    finally:
        await stream.close()
    return samples
