"""Kubeflow v1.11.0, a real release, as a second workload beside the synthetic one.

The release tree (``../shared/stacks``, or ``$KFDEF_STACKS_DIR``) is deployed from its ``example/`` entry point
(plain mode) through one wrapper kustomization (``kfdef_dev/unservable.py``) that leaves out what this cluster
cannot serve, its fail-closed webhook configurations, and names its example Profile as the kustomize the release
pins does (``kfdef_dev/releases.py``). Tree and wrapper are served from 127.0.0.1 as one tarball. The three
apply paths get the same objects:

- ``operator``: a KfDef created until its status reports every object applied, and until Ready (storage is
  simulated: PersistentVolumes for the release's claims); then the teardown, until the KfDef is gone and none of
  the release's objects outside its own namespaces is left;
- ``kubectl``: ``kubectl apply --server-side`` of ``kfdef-operator build``'s output, ``kubectl wait`` for its CRDs,
  the apply again;
- ``floor``: every object server-side applied at once (``bench/baselines.py``); beside it the render floor, the
  kustomize CLI alone building the tree the operator builds for the release.

Release objects have fixed names, so each path removes everything before the next starts.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import tarfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from kfdef_dev.releases import ARCHIVES, MODERN_SAMPLE, STACKS, v1_11_0_profile_repair
from kfdef_dev.unservable import write_wrappers
from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.aggregation import deletion_levels
from kfdef_operator.ssa.client import KubeApiError

from . import baselines
from .cluster import KFDEF_NAMESPACE
from .context import APPLY_PHASE_NOTE, KFDEFS_PATH, Bench, all_applied, cpu_used, is_ready
from .stats import cpu_summary, steps_summary, summary

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReleaseSource:
    """A release as users deploy it: its archive in the stacks directory, its KfDef file, and the repairs (kustomize
    patches by application, given the unpacked tree) it needs under the pinned kustomize."""

    version: str
    kfdef: Path
    repairs: Callable[[Path], dict[str, list[JSON]]] = lambda tree: {}


#: v1.11.0's ``example/`` (plain mode), as the shipped sample names it.
V1_11_0 = ReleaseSource("v1.11.0", MODERN_SAMPLE, lambda tree: {"kubeflow": v1_11_0_profile_repair(tree)})
#: v1.2.0 as kfctl deployed it: the kfctl_k8s_istio KfDef (stacks mode).
V1_2_0 = ReleaseSource("v1.2.0", STACKS / "kfdefs" / "kfctl_k8s_istio.v1.2.0.yaml")


@dataclass
class Release:
    """The release as this cluster can run it: its KfDef (served from 127.0.0.1) and rendered objects."""

    version: str
    kfdef: JSON
    objects: list[JSON]
    left_out: int
    render_s: float
    resources: frozenset[str]   # plurals of the resources its objects live in (as kube-apiserver's metrics name them)
    trees: list[baselines.KustomizeTree]  # what the operator builds for it (the render floor's input)

    @property
    def claims(self) -> int:
        """The PersistentVolumeClaims it makes, its own and its StatefulSets' (each needs a volume to bind)."""
        return sum(1 if obj["kind"] == "PersistentVolumeClaim" else
                   (obj.get("spec") or {}).get("replicas", 1) * len((obj.get("spec") or {}).get("volumeClaimTemplates")
                                                                   or [])
                   for obj in self.objects if obj["kind"] in ("PersistentVolumeClaim", "StatefulSet"))


async def prepare(bench: Bench, source: ReleaseSource = V1_11_0) -> Release:
    """Unpack the release, add the wrapper, pack and serve it; render it once with ``kfdef-operator build`` (and in
    this process, for the trees the render floor builds), its objects at API versions this cluster serves."""
    directory = bench.work_dir / f"release-{source.version}"
    tree = await asyncio.to_thread(_unpack, STACKS / ARCHIVES[source.version], directory / "tree")
    sample = yaml.safe_load(source.kfdef.read_text())
    sample["metadata"] = {"name": "kubeflow", "namespace": KFDEF_NAMESPACE}
    applications, _ = await asyncio.to_thread(baselines.render_in_place, sample, tree, directory / "sample")
    rendered = {app.name: app.objects for app in applications}  # to find what to leave out
    wrapped, left_out = write_wrappers(sample, tree, rendered, source.repairs(tree))
    _, trees = await asyncio.to_thread(baselines.render_in_place, wrapped, tree, directory / "wrapped")
    archive = await asyncio.to_thread(_pack, tree, bench.archives.directory
                                      / f"kubeflow-{source.version}-runnable.tar.gz")
    for repo in wrapped["spec"]["repos"]:
        repo["uri"] = bench.archives.url(archive)
    output, render_s = await asyncio.to_thread(baselines.build, bench, wrapped, directory / "build",
                                               await _served_release(bench))
    objects = await _namespaced(bench, baselines.load(output))
    plurals = frozenset(path.split("/")[-2] for _, path, _ in await baselines.paths(bench.kube, objects))
    log.info("release %s: %d objects, %d left out", source.version, len(objects), len(left_out))
    return Release(source.version, wrapped, objects, len(left_out), render_s, plurals, trees)


async def _served_release(bench: Bench) -> str:
    """The Kubernetes release the control plane runs (``1.36``): what its objects are converted for, as the
    operator converts them (v1.2.0's ``apiextensions.k8s.io/v1beta1`` CRDs, for one)."""
    version = await bench.kube.request("GET", "/version")
    return f"{version['major']}.{version['minor'].rstrip('+')}"


def _unpack(archive: Path, directory: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(directory, filter="data")
    [top] = list(directory.iterdir())
    return top


def _pack(tree: Path, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz", compresslevel=1) as archive:
        archive.add(tree, arcname=tree.name)
    return path


async def _namespaced(bench: Bench, objects: list[JSON]) -> list[JSON]:
    """Namespaced objects that name no namespace get the KfDef's, as the operator gives them."""
    for obj, _, namespaced in await baselines.paths(bench.kube, objects):
        if namespaced and not obj["metadata"].get("namespace"):
            obj["metadata"]["namespace"] = KFDEF_NAMESPACE
    return objects


# -- the three paths ---------------------------------------------------------------------------------------------

@dataclass
class DeployedRelease:
    """The release as the operator deployed it: its KfDef, simulated volumes and times."""

    name: str
    volumes: list[str]
    applied_s: float
    ready_s: float
    steps: dict[str, float]  # seconds per step of the apply, from its status (Bench.steps)
    cpu: dict[str, float]    # CPU seconds per process from the create call until every object was applied
    apply_phase_s: float | None  # first object sent -> last answered (Bench.apply_phase_s)


async def deploy(bench: Bench, release: Release) -> DeployedRelease:
    """A KfDef of the release created, until its status reports every object applied, then until Ready."""
    volumes = await simulated_storage(bench, release.claims)
    kfdef = copy.deepcopy(release.kfdef)
    name = kfdef["metadata"]["name"] = f"kubeflow-{uuid.uuid4().hex[:5]}"
    mark, audit_mark = bench.kfdefs.mark(), bench.audit_mark()
    cpu_before = bench.cpu()
    await bench.kube.request("POST", KFDEFS_PATH, body=kfdef)
    started = time.monotonic()
    applied = await bench.wait_kfdef(name, all_applied, after=mark, timeout=900, what="applied")
    cpu = cpu_used(cpu_before, bench.cpu())
    ready = await bench.wait_kfdef(name, is_ready, after=mark, timeout=900, what="Ready")
    apply_phase_s = bench.apply_phase_s(audit_mark, applied.at)  # read once Ready: no event waits on the reading
    return DeployedRelease(name, volumes, applied.at - started, ready.at - started,
                           bench.steps(name, after=mark, started=started, applied=applied.at), cpu, apply_phase_s)


async def teardown(bench: Bench, release: Release, deployed: DeployedRelease,
                   waves: list[list[dict]] | None = None) -> float:
    """Seconds from the KfDef delete call returning until it is gone; checks that nothing of the release is left.
    The waves the operator logged are appended to ``waves``."""
    log_from = bench.operator_log_offset()
    teardown_s = await bench.delete_kfdef(deployed.name, timeout=900)
    if waves is not None:
        waves.append(bench.teardown_waves(deployed.name, log_from))
    left = await remaining(bench, release.objects)
    if left:
        raise RuntimeError(f"the teardown left {len(left)} objects of the release, e.g. {left[:5]}")
    await _delete(bench, deployed.volumes)
    return teardown_s


async def operator_round(bench: Bench, release: Release) -> dict:
    """Apply, Ready and teardown of the release by the operator; seconds of each."""
    deployed = await deploy(bench, release)
    before, waves = bench.cpu(), []
    teardown_s = await teardown(bench, release, deployed, waves)
    return round_figures(deployed, teardown_s, cpu_used(before, bench.cpu()), waves[0])


def round_figures(deployed: DeployedRelease, teardown_s: float, teardown_cpu: dict[str, float],
                  waves: list[dict]) -> dict:
    """One operator round's figures, as :func:`results` reads them."""
    return {"applied_s": deployed.applied_s, "ready_s": deployed.ready_s, "apply_phase_s": deployed.apply_phase_s,
            "teardown_s": teardown_s, "steps": deployed.steps, "cpu": deployed.cpu, "teardown_cpu": teardown_cpu,
            "teardown_waves": waves}


async def kubectl_round(bench: Bench, release: Release) -> dict:
    crds = [f"crd/{o['metadata']['name']}" for o in release.objects if o["kind"] == "CustomResourceDefinition"]
    rendered = bench.work_dir / "release" / "rendered.yaml"
    rendered.write_text(yaml.safe_dump_all(release.objects))
    measured = await baselines.kubectl_apply(bench, rendered, crds)
    await remove(bench, release.objects)
    return measured


async def floor_round(bench: Bench, release: Release) -> dict:
    """Seconds of the render floor (kustomize alone), of the floor's apply and of its teardown (every object deleted
    at once, waited until gone), and the CPU seconds of the last two."""
    render_floor_s = await asyncio.to_thread(baselines.kustomize_alone, release.trees)
    before = bench.cpu()
    seconds = await baselines.floor_apply(bench, release.objects)
    middle = bench.cpu()
    teardown_s = await baselines.floor_teardown(bench, release.objects)
    measured = {"applied_s": seconds, "teardown_s": teardown_s, "render_floor_s": render_floor_s,
                "cpu": cpu_used(before, middle), "teardown_cpu": cpu_used(middle, bench.cpu())}
    await remove(bench, release.objects)  # aggregated ClusterRoles kube-controller-manager re-created
    return measured


# -- cleaning up ----------------------------------------------------------------------------------------------------

def _outside(objects: list[JSON], namespaced: list[bool]) -> list[int]:
    """Indexes of the objects that do not go away with the release's own Namespaces."""
    own = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    return [i for i, obj in enumerate(objects) if not namespaced[i] or obj["metadata"].get("namespace") not in own]


async def remaining(bench: Bench, objects: list[JSON]) -> list[str]:
    """Objects of the release that exist, among those its Namespaces do not hold."""
    targets = await baselines.paths(bench.kube, objects)
    outside = _outside(objects, [namespaced for _, _, namespaced in targets])
    present = await asyncio.gather(*(bench.kube.get(targets[i][1]) for i in outside))
    return [targets[i][1] for i, live in zip(outside, present, strict=True) if live is not None]


async def remove(bench: Bench, objects: list[JSON], *, timeout: float = 600) -> None:
    """Delete every object of the release that its Namespaces do not take along, and wait until Namespaces and
    CRDs are gone. Aggregated ClusterRoles go first, one at a time (see ``kfdef_operator.ssa.aggregation``): deleted
    together with the roles they draw from, kube-controller-manager re-creates them."""
    targets = await baselines.paths(bench.kube, objects)
    outside = [targets[i] for i in _outside(objects, [namespaced for _, _, namespaced in targets])]
    path_of = {obj["metadata"]["name"]: path for obj, path, _ in outside if obj["kind"] == "ClusterRole"}
    first = [path_of[name] for level in deletion_levels(obj for obj, _, _ in outside if obj["kind"] == "ClusterRole")
             for name in level]
    for path in first:
        await _delete(bench, [path])
    await bench.kube.gather_limited([_delete(bench, [path]) for _, path, _ in outside if path not in first],
                                    baselines.FLOOR_CONCURRENCY)
    waited = [path for obj, path, _ in outside if obj["kind"] in ("Namespace", "CustomResourceDefinition")]
    deadline = time.monotonic() + timeout
    retries = baselines.CleanupRetries(bench.kube)
    while any(present := await asyncio.gather(*(bench.kube.get(path) for path in waited))):
        for path, live in zip(waited, present, strict=True):
            await retries.check(path, live)
        if time.monotonic() > deadline:
            raise TimeoutError(f"the release's namespaces and CRDs still there after {timeout:.0f}s")
        await asyncio.sleep(0.2)
    left = await remaining(bench, objects)
    if left:
        raise RuntimeError(f"{len(left)} objects of the release came back after their deletion, e.g. {left[:5]}")


async def _delete(bench: Bench, paths: list[str]) -> None:
    for path in paths:
        try:
            await bench.kube.request("DELETE", path)
        except KubeApiError as error:
            if error.status != 404:
                raise


async def simulated_storage(bench: Bench, count: int) -> list[str]:
    """``count`` PersistentVolumes for a release's claims (nothing provisions volumes here); their paths."""
    paths = []
    for _ in range(count):
        name = f"bench-volume-{uuid.uuid4().hex[:6]}"
        await bench.kube.request("POST", "/api/v1/persistentvolumes", body={
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "100Gi"}, "persistentVolumeReclaimPolicy": "Retain",
                     "accessModes": ["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany"],
                     "hostPath": {"path": f"/var/simulated/{name}"}}})
        paths.append(f"/api/v1/persistentvolumes/{name}")
    return paths


def results(release: Release, raw: dict[str, list]) -> JSON:
    """The release's entries of ``bench/results.json``."""
    operator, kubectl = raw["operator"], raw["kubectl"]
    meta = {"release": release.version, "objects": len(release.objects), "left_out": release.left_out}
    entries = {
        "release.apply.operator_s": summary([r["applied_s"] for r in operator], "s", **meta),
        "release.apply.operator_ready_s": summary([r["ready_s"] for r in operator], "s"),
        "release.apply.kubectl_ssa_s": summary([k["s"] for k in kubectl], "s", steps=kubectl),
        "release.apply.floor_s": summary([f["applied_s"] for f in raw["floor"]], "s",
                                         concurrency=baselines.FLOOR_CONCURRENCY),
        "release.apply.render_floor_s": summary([f["render_floor_s"] for f in raw["floor"]], "s",
                                                note=baselines.RENDER_FLOOR_NOTE),
        "release.render.s": summary([release.render_s], "s", note="kfdef-operator build (not part of kubectl/floor)"),
        "release.teardown.s": summary([r["teardown_s"] for r in operator], "s",
                                      waves=[r["teardown_waves"] for r in operator]),
        "release.teardown.floor_s": summary([f["teardown_s"] for f in raw["floor"]], "s"),
    }
    apply_phases = [r["apply_phase_s"] for r in operator if r["apply_phase_s"] is not None]
    if apply_phases:
        entries["release.apply.apply_phase_s"] = summary(apply_phases, "s", note=APPLY_PHASE_NOTE)
    for entry in entries.values():
        entry["value"] = entry["median"]
    entries["release.apply.steps"] = steps_summary([r["steps"] for r in operator])
    entries["release.cpu"] = {path: cpu_summary([run[key] for run in runs]) for path, runs, key in (
        ("apply.operator", operator, "cpu"), ("apply.floor", raw["floor"], "cpu"),
        ("teardown.operator", operator, "teardown_cpu"), ("teardown.floor", raw["floor"], "teardown_cpu"))}
    return entries

