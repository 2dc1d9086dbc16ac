"""What users could do without the operator, on the same rendered objects.

- ``kubectl``: ``kubectl apply --server-side --force-conflicts -f rendered.yaml``
  as a user runs it: the first pass fails for the custom resources (their
  CRDs are not Established yet), then ``kubectl wait --for
  condition=established`` on the stack's CRDs, then a second pass.
- ``floor``: every object server-side applied at once through the
  operator's own client (bounded concurrency, no stages, no waits), custom
  resources and objects of not-yet-created namespaces retried until the
  server takes them: what kube-apiserver allows on this machine.

Objects come from ``kfdef-operator build`` (the operator's own renderer);
render time is reported apart and not part of either figure.

- ``render floor``: the pinned kustomize CLI building the trees the operator's
  render builds for the same KfDef, output discarded (no parsing): the least
  time any tool that renders with kustomize needs before its first object.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kfdef_dev.controlplane import find_bin_dir
from kfdef_operator.api.kfdef import Repo, parse_kfdef
from kfdef_operator.api.types import JSON
from kfdef_operator.build import render as operator_render
from kfdef_operator.build.confinement import LOAD_RESTRICTIONS_NONE, LOAD_RESTRICTIONS_ROOT_ONLY
from kfdef_operator.build.isolated import IsolatedRender
from kfdef_operator.source.cache import SourceCache
from kfdef_operator.source.options import FetchOptions
from kfdef_operator.source.resolve import resolve_source
from kfdef_operator.ssa.client import KubeApiError, KubeClient
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.health import CRD_CLEANUP_FAILED, assess

from .context import Bench
from .workload import Workload

FLOOR_CONCURRENCY = 48
FLOOR_FIELD_MANAGER = "bench-floor"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CLUSTER_KINDS_WAITED = ("Namespace", "CustomResourceDefinition")
TOUCHED_ANNOTATION = "bench.kubeflow.org/touched-at"


class CleanupRetries:
    """What the bench's deletions do, as the operator's teardown does, for a CRD whose cleanup kube-apiserver
    failed and then left alone for minutes (see ``ssa.waits.Waits._retry_crd_cleanup``): after 2 s, touch it, so that
    kube-apiserver retries. Without it a CRD deleted seconds after its creation could hold the bench for 5 minutes."""

    PATIENCE_S = 2.0
    EVERY_S = 10.0

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self._due: dict[str, float] = {}  # CRD path -> when to touch it

    async def check(self, path: str, live: Any) -> None:
        """Look at ``live``, the object at ``path`` just read (None: gone)."""
        if not isinstance(live, dict) or assess(live).reason != CRD_CLEANUP_FAILED:
            self._due.pop(path, None)
            return
        due = self._due.setdefault(path, time.monotonic() + self.PATIENCE_S)
        if time.monotonic() < due:
            return
        self._due[path] = time.monotonic() + self.EVERY_S
        try:
            await self.kube.request("PATCH", path, content_type="application/merge-patch+json", body={
                "metadata": {"annotations": {TOUCHED_ANNOTATION: str(time.time())}}})
        except KubeApiError as error:
            if error.status != 404:
                raise


def render(bench: Bench, workload: Workload, uri: str) -> tuple[Path, float]:
    """``kfdef-operator build`` of the workload's KfDef into ``rendered.yaml``; returns it and the seconds taken."""
    return build(bench, _kfdef_of(workload, uri), bench.work_dir / "rendered" / workload.suffix)


def workload_trees(bench: Bench, workload: Workload, uri: str) -> list[KustomizeTree]:
    """The trees the operator builds for the workload's KfDef (the one :func:`render` builds)."""
    _, trees = render_in_place(_kfdef_of(workload, uri), workload.root,
                               bench.work_dir / "rendered" / workload.suffix / "trees")
    return trees


def _kfdef_of(workload: Workload, uri: str) -> JSON:
    return workload.kfdef(f"stack-{workload.suffix}", "bench", uri)


def build(bench: Bench, kfdef: JSON, directory: Path, target_version: str | None = None) -> tuple[Path, float]:
    """``kfdef-operator build`` of a KfDef into ``<directory>/rendered.yaml``; returns it and the seconds taken.
    ``target_version`` (``1.36``): objects of API versions that Kubernetes release no longer serves converted, as the
    operator converts them."""
    directory.mkdir(parents=True, exist_ok=True)
    kfdef_file = directory / "kfdef.yaml"
    kfdef_file.write_text(yaml.safe_dump(kfdef))
    output = directory / "rendered.yaml"
    started = time.monotonic()
    with output.open("wb") as out:
        subprocess.run([sys.executable, "-m", "kfdef_operator", "build", str(kfdef_file), "-o", "-",
                        "--cache-dir", str(bench.work_dir / "build-cache"),
                        *(["--target-version", target_version] if target_version else [])],
                       stdout=out, stderr=subprocess.PIPE, check=True,
                       env={**os.environ, "KFDEF_ALLOW_INSECURE_HTTP": "1"})
    return output, time.monotonic() - started


#: What a ``render_floor_s`` entry measures (:func:`kustomize_alone`).
RENDER_FLOOR_NOTE = (f"the kustomize CLI alone building the trees the operator builds, {IsolatedRender.max_workers} at "
                     "a time, output discarded")


@dataclass(frozen=True)
class KustomizeTree:
    """The directory the operator's render builds for one application, and the load restrictor under which the
    kustomize CLI builds it to the same objects."""

    path: Path
    load_restrictor: str


def render_in_place(kfdef: JSON, repo: Path, directory: Path) -> tuple[list[operator_render.RenderedApplication],
                                                                         list[KustomizeTree]]:
    """The operator's render of ``kfdef`` in this process, every repo of it read from the local tree ``repo`` (as
    the operator reads it once fetched), its work directory kept under ``directory``: the rendered applications
    and the tree each one built.

    A plain entry point is built where it is in the repo, with kustomize's default restrictor; a legacy or stacks
    application is built in its generated ``<work dir>/kustomize/<application>/`` (``build.render``), whose
    references the render proved inside the copy, so ``LoadRestrictionsNone`` gives the same objects."""
    parsed = parse_kfdef(kfdef)
    cache, options = SourceCache(directory / "sources"), FetchOptions(local_roots=(repo,))
    sources = {r.name: resolve_source(Repo(r.name, str(repo)), cache, options) for r in parsed.repos}
    workdir = (directory / "render").resolve()
    rendered = operator_render.render(parsed, sources, workdir)
    trees = []
    for app, built in zip(parsed.applications, rendered, strict=True):
        ref = app.kustomize_config.repo_ref  # type: ignore[union-attr]  # render refused applications without one
        trees.append(KustomizeTree(sources[ref.name].local_path / ref.path, LOAD_RESTRICTIONS_ROOT_ONLY)
                     if built.mode == "plain" else KustomizeTree(workdir / "kustomize" / app.name,
                                                                 LOAD_RESTRICTIONS_NONE))
    return rendered, trees


def kustomize_alone(trees: Sequence[KustomizeTree], *, workers: int = IsolatedRender.max_workers) -> float:
    """Seconds for the pinned kustomize CLI (``$KFDEF_K8SBIN/kustomize``, the version the render helper embeds) to
    build every tree, output discarded: the render floor. Trees build ``workers`` at a time, as the operator renders
    a KfDef's applications: the fastest a kustomize-based tool can be on these cores."""
    kustomize = str(find_bin_dir() / "kustomize")

    def build_one(tree: KustomizeTree) -> None:
        done = subprocess.run([kustomize, "build", f"--load-restrictor={tree.load_restrictor}", str(tree.path)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              check=False)
        if done.returncode:
            raise RuntimeError(f"kustomize build {tree.path} failed ({done.returncode}): "
                               f"{done.stderr.decode(errors='replace')[-600:]}")

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="render-floor") as pool:
        list(pool.map(build_one, trees))
    return time.monotonic() - started


def load(rendered: Path) -> list[JSON]:
    return [doc for doc in yaml.load_all(rendered.read_text(), Loader=_LOADER) if doc]


async def _kubectl(bench: Bench, *args: str) -> tuple[int, float, str]:
    """Run kubectl with the admin kubeconfig; (exit code, seconds, stderr tail)."""
    started = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        "kubectl", f"--kubeconfig={bench.control_plane.kubeconfig}", f"--cache-dir={bench.work_dir / 'kubectl-cache'}",
        *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, stderr = await process.communicate()
    return process.returncode, time.monotonic() - started, stderr.decode(errors="replace")[-600:]


async def kubectl_apply(bench: Bench, rendered: Path, crds: Sequence[str]) -> dict:
    """Apply, wait for the CRDs (``kubectl wait`` arguments naming them), apply again; seconds per step and in
    total."""
    apply = ("apply", "--server-side", "--force-conflicts", "-f", str(rendered))
    started = time.monotonic()
    first_code, first_s, first_err = await _kubectl(bench, *apply)
    wait_code, wait_s, wait_err = await _kubectl(bench, "wait", "--for", "condition=established", "--timeout=300s",
                                                 *crds)
    second_code, second_s, second_err = await _kubectl(bench, *apply)
    total = time.monotonic() - started
    if wait_code or second_code:
        raise RuntimeError(f"kubectl failed: wait {wait_code} {wait_err}; second apply {second_code} {second_err}")
    return {"s": total, "first_apply_s": first_s, "first_apply_exit": first_code, "wait_s": wait_s,
            "second_apply_s": second_s, "first_apply_errors": first_err.count("\n")}


async def paths(kube: KubeClient, objects: list[JSON]) -> list[tuple[JSON, str, bool]]:
    """(object, object path, namespaced) per object; kinds of the stack's CRDs registered from the CRDs."""
    discovery = Discovery(kube)
    await discovery.refresh()
    for obj in objects:
        if obj["kind"] == "CustomResourceDefinition":
            discovery.register_crd(obj)
    result = []
    for obj in objects:
        resource = await discovery.resource(obj["apiVersion"], obj["kind"])
        meta = obj["metadata"]
        result.append((obj, resource.object_path(meta["name"], meta.get("namespace")), resource.namespaced))
    return result


async def floor_apply(bench: Bench, objects: list[JSON], *, timeout: float = 300) -> float:
    """Seconds to server-side apply every object concurrently, retrying those the server cannot take yet."""
    targets = await paths(bench.kube, objects)

    async def apply(obj: JSON, path: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                await bench.kube.apply(path, obj, field_manager=FLOOR_FIELD_MANAGER)
                return
            except KubeApiError as error:  # 404: its namespace or CRD is not there yet
                if error.status != 404 or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.02)

    started = time.monotonic()
    results = await bench.kube.gather_limited([apply(obj, path) for obj, path, _ in targets], FLOOR_CONCURRENCY)
    elapsed = time.monotonic() - started
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        raise RuntimeError(f"{len(errors)} objects not applied, e.g. {errors[0]}")
    return elapsed


async def delete_applied(bench: Bench, objects: list[JSON], *, timeout: float = 300) -> float:
    """Delete the cluster-scoped objects (namespaces and CRDs take their contents along) and wait until
    Namespaces and CRDs are gone; returns the seconds taken."""
    targets = [(obj, path) for obj, path, namespaced in await paths(bench.kube, objects) if not namespaced]
    started = time.monotonic()

    async def delete(path: str) -> None:
        try:
            await bench.kube.request("DELETE", path)
        except KubeApiError as error:
            if error.status != 404:
                raise

    await bench.kube.gather_limited([delete(path) for _, path in targets], FLOOR_CONCURRENCY)
    waited = [path for obj, path in targets if obj["kind"] in _CLUSTER_KINDS_WAITED]
    retries = CleanupRetries(bench.kube)
    while True:
        present = await asyncio.gather(*(bench.kube.get(path) for path in waited))
        for path, live in zip(waited, present, strict=True):
            await retries.check(path, live)
        waited = [path for path, live in zip(waited, present, strict=True) if live is not None]
        if not waited:
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{len(waited)} namespaces/CRDs still there after {timeout:.0f}s")
        await asyncio.sleep(0.2)


async def floor_teardown(bench: Bench, objects: list[JSON], *, timeout: float = 300) -> float:
    """Seconds to delete every object at once (no order, no waves) and see each one gone: the teardown floor.

    An object counts as gone once the one deleted is: kube-controller-manager re-creates an aggregated ClusterRole
    deleted together with the roles it draws from (a new uid); the caller removes such leftovers afterwards.
    """
    targets = [path for _, path, _ in await paths(bench.kube, objects)]
    uids = {path: (live.get("metadata") or {}).get("uid") for path, live in
            zip(targets, await bench.kube.gather_limited([bench.kube.get(p) for p in targets], FLOOR_CONCURRENCY),
                strict=True)
            if isinstance(live, dict)}

    async def delete(path: str) -> None:
        try:
            await bench.kube.request("DELETE", path, body={"propagationPolicy": "Background"})
        except KubeApiError as error:
            if error.status != 404:
                raise

    def still_there(live: Any, path: str) -> bool:
        return isinstance(live, dict) and (live.get("metadata") or {}).get("uid") == uids[path]

    started = time.monotonic()
    await bench.kube.gather_limited([delete(path) for path in uids], FLOOR_CONCURRENCY)
    waited = list(uids)
    retries = CleanupRetries(bench.kube)
    while waited:
        present = await bench.kube.gather_limited([bench.kube.get(path) for path in waited], FLOOR_CONCURRENCY)
        for path, live in zip(waited, present, strict=True):
            await retries.check(path, live)
        waited = [path for path, live in zip(waited, present, strict=True) if still_there(live, path)]
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{len(waited)} objects still there after {timeout:.0f}s, e.g. {waited[:3]}")
        if waited:
            await asyncio.sleep(0.05)
    return time.monotonic() - started
