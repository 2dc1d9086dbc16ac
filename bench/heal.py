"""Self-healing latency, measured from outside the operator on watch streams.

- Deployment: from the DELETE call returning until the watch of the stack's
  Deployments delivers the object again with a new uid. Trials rotate over
  the stack's Deployments so that no object is healed often enough to trip
  the operator's fight backoff (more than 3 heals of one object per minute).
  Each trial is followed by one of the heal floor (:class:`HealFloor`): a
  copy of the same Deployment, put back by the least any healer can do.
  The next trial starts once the last one has settled (:func:`_trial`), and
  no sooner than ``TRIAL_SPACING_S`` after the last delete, so that each heal
  is measured with its own delete's cascade only, as when a user deletes one
  Deployment: a trial started while the last one's new ReplicaSet and Pods
  were still being made, or while the operator wrote the status of the last
  heal, measured the bench's pacing.
- Namespace: from the Namespace's DELETED event (kube-apiserver finished the
  deletion: the namespace controller emptied it) until one of its Deployments
  exists again.
- CRD: from the CRD's DELETED event until its custom resource exists again
  (polled with GETs every ``POLL_S``: the kind's watch dies with the CRD).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import logging
import statistics
import time
from collections.abc import Iterator
from typing import Any

from kfdef_operator.api.types import JSON
from kfdef_operator.controller.refresher import COALESCE_S

from .context import Bench, is_ready, run_selector
from .operator_runs import Deployed
from .stats import percentile, summary
from .streams import Arrival, EventStream

log = logging.getLogger(__name__)
POLL_S = 0.005
#: The label of the heal floor's copies (also in their selectors and pod templates); its value is the run's suffix.
FLOOR_LABEL = "bench.kfdef.dev/heal-floor"
DEPLOYMENTS = "/apis/apps/v1/deployments"
#: The least time from one trial's delete to the next one's. The operator writes the status of a heal once its
#: refresher's coalescing window has passed, and the delete's cascade ends with kwok's pod deletions and the
#: endpoint controllers' updates some tens of milliseconds after the Deployment is back. Trials 50 ms apart met
#: the status write of the heal two trials before at kube-apiserver: the two slowest of one session did.
TRIAL_SPACING_S = COALESCE_S + 0.1


async def _open(bench: Bench, path: str, deployed: Deployed) -> EventStream:
    return await EventStream(bench.kube, path, label_selector=run_selector(deployed.workload)).start()


def available(obj: JSON) -> bool:
    """Whether a Deployment's controller has seen its spec and all its replicas are available."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    return ((status.get("observedGeneration") or 0) >= (meta.get("generation") or 1)
            and (status.get("availableReplicas") or 0) >= (obj.get("spec") or {}).get("replicas", 1))


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off in this process while a heal is timed: one full collection of its
    heap takes tens of milliseconds (60 ms seen), counted against whichever heal it fell into, the operator's (whose
    return this process's watch reads) or the floor's (which this process makes). Collections wait until after."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def _trial(bench: Bench, stream: EventStream, namespace: str, name: str, timeout: float) -> float:
    """Delete one Deployment; milliseconds from the DELETE returning until ``stream`` shows it again (new uid).

    Returns once the new Deployment is available (its ReplicaSet and Pods made), not before.
    """
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
    old_uid = (await bench.kube.request("GET", path))["metadata"]["uid"]
    mark = stream.mark()

    def new(a: Arrival) -> bool:
        return a.type != "DELETED" and (a.namespace, a.name) == (namespace, name) and a.uid != old_uid

    with _collector_paused():
        await bench.kube.request("DELETE", path)
        deleted_at = time.monotonic()
        back = await stream.wait_for(new, after=mark, timeout=timeout, what=f"Deployment {namespace}/{name} back")
    await stream.wait_for(lambda a: new(a) and available(a.object), after=mark, timeout=timeout,
                          what=f"Deployment {namespace}/{name} available again")
    return max(back.at - deleted_at, 0.0) * 1000


def floor_name(original: str) -> str:
    return f"{original}-floor"


def floor_copy(live: JSON, suffix: str) -> JSON:
    """A new Deployment like ``live`` beside it: same namespace and spec, ``FLOOR_LABEL`` added to its labels, its
    selector and its pod template (so that neither the original's ReplicaSets nor its KfDef claim anything of it)."""
    spec = copy.deepcopy(live["spec"])
    spec["selector"].setdefault("matchLabels", {})[FLOOR_LABEL] = suffix
    spec["template"].setdefault("metadata", {}).setdefault("labels", {})[FLOOR_LABEL] = suffix
    meta = live["metadata"]
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": floor_name(meta["name"]), "namespace": meta["namespace"],
                         "labels": {FLOOR_LABEL: suffix}},
            "spec": spec}


class HealFloor:
    """The least any healer can do, which the operator's heals are held against: copies of the stack's Deployments
    (:func:`floor_copy`, so the same cascade follows each delete), put back by a watch in this process that POSTs a
    copy the moment its DELETED event is read. No decision, no status, no Event; it shares the measuring process's
    event loop, which saves it the hop to another process that the operator's heals take."""

    def __init__(self, bench: Bench, suffix: str) -> None:
        self._bench = bench
        self._bodies: dict[tuple[str, str], JSON] = {}
        self._posts: set[asyncio.Task[Any]] = set()
        self.stream = EventStream(bench.kube, DEPLOYMENTS, label_selector=f"{FLOOR_LABEL}={suffix}",
                                  on_event=self._on_event)
        self._suffix = suffix

    async def start(self, originals: list[tuple[str, str]], *, timeout: float = 120) -> HealFloor:
        """Create a copy of each original Deployment and wait until every copy is available."""
        await self.stream.start()
        for namespace, name in originals:
            live = await self._bench.kube.request("GET", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
            body = floor_copy(live, self._suffix)
            self._bodies[(namespace, body["metadata"]["name"])] = body
            await self._bench.kube.request("POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", body=body)
        for namespace, name in self._bodies:
            await self.stream.wait_for(
                lambda a, key=(namespace, name): (a.namespace, a.name) == key and available(a.object),
                after=0, timeout=timeout, what=f"floor copy {namespace}/{name} available")
        return self

    def _on_event(self, arrival: Arrival) -> None:
        body = self._bodies.get((arrival.namespace, arrival.name))
        if arrival.type != "DELETED" or body is None:
            return
        post = asyncio.create_task(self._bench.kube.request(
            "POST", f"/apis/apps/v1/namespaces/{arrival.namespace}/deployments", body=body))
        self._posts.add(post)
        post.add_done_callback(self._posted)

    def _posted(self, post: asyncio.Task[Any]) -> None:
        self._posts.discard(post)
        if not post.cancelled() and post.exception() is not None:
            log.warning("the heal floor's create failed: %s", post.exception())

    async def close(self, *, timeout: float = 60) -> None:
        """Stop putting copies back, delete them and wait until each is gone."""
        copies, self._bodies = list(self._bodies), {}
        await asyncio.gather(*self._posts, return_exceptions=True)
        mark = self.stream.mark()
        for namespace, name in copies:
            await self._bench.kube.request("DELETE", f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
        try:
            for namespace, name in copies:
                await self.stream.wait_for(lambda a, key=(namespace, name): a.type == "DELETED"
                                           and (a.namespace, a.name) == key, after=mark, timeout=timeout,
                                           what=f"floor copy {namespace}/{name} deleted")
        finally:
            await self.stream.close()


async def deployments(bench: Bench, deployed: Deployed, trials: int, *,
                      timeout: float = 30) -> dict[str, list[float]]:
    """Milliseconds from each Deployment delete returning until it exists again (new uid): the operator's heals
    (``operator``) and, interleaved with them, the heal floor's of the same Deployments' copies (``floor``)."""
    targets = deployed.workload.deployments
    stream = await _open(bench, DEPLOYMENTS, deployed)
    floor = HealFloor(bench, deployed.workload.suffix)
    samples: dict[str, list[float]] = {"operator": [], "floor": []}
    try:
        await floor.start(targets[:trials])
        not_before = 0.0
        for trial in range(trials):
            namespace, name = targets[trial % len(targets)]
            await _until(not_before)
            not_before = time.monotonic() + TRIAL_SPACING_S
            samples["operator"].append(await _trial(bench, stream, namespace, name, timeout))
            await _until(not_before)
            await _settle(bench, deployed, timeout)  # the operator's status of the heal written too
            not_before = time.monotonic() + TRIAL_SPACING_S
            samples["floor"].append(await _trial(bench, floor.stream, namespace, floor_name(name), timeout))
    finally:
        await stream.close()
        await floor.close()
    return samples


def figures(samples: dict[str, list[float]], **p99_extra: Any) -> JSON:
    """The results-file entries of :func:`deployments`' samples: p50 and p99 of the operator's heals and of the
    floor's; ``p99_extra`` goes into the operator's p99 entry."""
    entries = {}
    for prefix, key in (("heal.", "operator"), ("heal.floor_", "floor")):
        ms = samples[key]
        entries[f"{prefix}p50_ms"] = summary(ms, "ms", value=statistics.median(ms),
                                             resolution="watch event arrival (asyncio, sub-millisecond)")
        entries[f"{prefix}p99_ms"] = summary(ms, "ms", value=percentile(ms, 99),
                                             **(p99_extra if key == "operator" else {}))
    return entries


async def _until(moment: float) -> None:
    """Return at ``moment`` (``time.monotonic()``), at once if it has passed."""
    await asyncio.sleep(max(0.0, moment - time.monotonic()))


async def _settle(bench: Bench, deployed: Deployed, timeout: float) -> None:
    """Wait until the KfDef's latest status reports every object ready (the next trial starts from a whole stack)."""
    def whole(arrival: Arrival) -> bool:
        summary = (arrival.object.get("status") or {}).get("summary") or {}
        return (arrival.name == deployed.name and arrival.type != "DELETED" and is_ready(arrival.object)
                and summary.get("ready") == summary.get("total"))

    latest = bench.kfdefs.latest(lambda a: a.name == deployed.name)
    if latest is None or not whole(latest):
        await bench.kfdefs.wait_for(whole, after=bench.kfdefs.mark(), timeout=timeout,
                                    what=f"KfDef {deployed.name} Ready again")


async def namespaces(bench: Bench, deployed: Deployed, trials: int, *, timeout: float = 120) -> list[float]:
    """Seconds from a Namespace's DELETED event until a Deployment of it exists again; one namespace per trial."""
    ns_stream = await _open(bench, "/api/v1/namespaces", deployed)
    deploy_stream = await _open(bench, DEPLOYMENTS, deployed)
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
