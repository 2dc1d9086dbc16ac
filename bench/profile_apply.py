"""Profile of the operator's apply path: ``controller.reconciler.Reconciler`` driven in-process under pyinstrument.

Two reconciles of one fresh KfDef, each by a newly started operator: the
first applies everything, the second is the no-op after a restart. The
operator process must be stopped (nothing else reconciles the KfDef).
Besides the pyinstrument tree (written as text), the steps of the pipeline
are timed by wrapping them, so the report can say where the wall-clock time
of one reconcile goes: fetching sources, rendering (kustomize), the apply
stages, the CRD Established wait, starting watches, status writes.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyinstrument import Profiler

from kfdef_operator.api.types import JSON
from kfdef_operator.controller import reconciler
from kfdef_operator.runtime.status import StatusWriter
from kfdef_operator.source.network import NetworkPolicy, parse_networks
from kfdef_operator.source.options import FetchOptions
from kfdef_operator.ssa.client import KubeClient

from .context import KFDEFS_PATH, Bench, all_applied

Timings = dict[str, list[float]]


def _timed(owner: Any, attribute: str, label: str, timings: Timings) -> None:
    """Replace ``owner.attribute`` (sync or async callable) by a wrapper recording its durations."""
    original: Callable = getattr(owner, attribute)
    if asyncio.iscoroutinefunction(original):
        @functools.wraps(original)
        async def wrapper(*args, **kwargs):
            started = time.monotonic()
            try:
                return await original(*args, **kwargs)
            finally:
                timings[label].append(time.monotonic() - started)
    else:
        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            started = time.monotonic()
            try:
                return original(*args, **kwargs)
            finally:
                timings[label].append(time.monotonic() - started)
    setattr(owner, attribute, wrapper)


STEP_LABELS = ("fetch sources", "render (kustomize)", "API-version upgrade check", "start watches (list + sync)",
               "apply stages (sum)", "  of which: live-metadata lists", "wait for CRDs Established",
               "status writes", "events")


def _instrument(operator: reconciler.Reconciler, timings: Timings) -> Callable[[], None]:
    """Time the pipeline's steps (labels: :data:`STEP_LABELS`); returns a function undoing the module- and
    class-level wrappers."""
    originals = [(reconciler, name, getattr(reconciler, name)) for name in ("resolve_sources", "upgrade_objects")]
    originals.append((StatusWriter, "update", StatusWriter.update))
    fetch, render, upgrade, watches, stages, prefetch, crds, status, events = STEP_LABELS
    _timed(reconciler, "resolve_sources", fetch, timings)
    _timed(operator.render_cache, "_renderer", render, timings)  # only runs on a render-cache miss
    _timed(reconciler, "upgrade_objects", upgrade, timings)
    _timed(operator.tracker, "watch", watches, timings)
    _timed(operator.manager, "apply_stage", stages, timings)
    _timed(operator.manager, "lookup", prefetch, timings)
    _timed(operator.manager, "_settle_crds", crds, timings)
    _timed(StatusWriter, "update", status, timings)  # one writer per KfDef, made during the reconcile
    _timed(operator.events, "record", events, timings)

    def undo() -> None:
        for owner, name, original in originals:
            setattr(owner, name, original)

    return undo


def _reconciler(kube: KubeClient, bench: Bench) -> reconciler.Reconciler:
    """An in-process operator whose work queue never runs by itself: the profile drives each run."""
    # The bench serves its archives over plain http on loopback.
    loopback = NetworkPolicy(allowed=parse_networks("127.0.0.0/8", "bench"))
    settings = reconciler.Settings(work_dir=bench.work_dir / "profile-operator",
                                   fetch_options=FetchOptions.from_env(allow_insecure_http=True, networks=loopback))
    return reconciler.Reconciler(kube, settings, gate=asyncio.Event())


async def _run_once(operator: reconciler.Reconciler, body: JSON) -> None:
    """One run of the operator's work for this KfDef (reconcile, or teardown when it is being deleted)."""
    operator.observe("MODIFIED", body)
    await operator._work((body["metadata"]["namespace"], body["metadata"]["name"]))  # noqa: SLF001


async def _reconcile_once(bench: Bench, kfdef_path: str, output: Path) -> dict:
    """One reconcile of the KfDef at ``kfdef_path`` by a freshly started in-process operator (as after a
    restart), under pyinstrument (text written to ``output``) and with its steps timed."""
    kube = await KubeClient.connect(str(bench.control_plane.kubeconfig))
    operator = _reconciler(kube, bench)
    timings: Timings = defaultdict(list)
    undo = _instrument(operator, timings)
    try:
        await operator.start()
        body = await bench.kube.request("GET", kfdef_path)
        profiler = Profiler(interval=0.001, async_mode="enabled")
        started = time.monotonic()
        profiler.start()
        try:
            await _run_once(operator, body)
        finally:
            profiler.stop()
        wall = time.monotonic() - started
        output.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
        requests = kube.stats().by_verb
    finally:
        undo()
        await operator.stop()
        await kube.close()
    return {"reconcile_wall_s": wall, "requests_by_verb": requests,
            "steps_s": {label: round(sum(timings.get(label, [])), 3) for label in STEP_LABELS},
            "stage_s": [round(d, 3) for d in timings.get("apply stages (sum)", [])],
            "pyinstrument_text": output.name}


async def _teardown(bench: Bench, kfdef_path: str) -> None:
    """Delete the KfDef and tear its stack down in-process (no operator process runs to remove the finalizer)."""
    kube = await KubeClient.connect(str(bench.control_plane.kubeconfig))
    operator = _reconciler(kube, bench)
    try:
        await operator.start()
        await bench.kube.request("DELETE", kfdef_path)
        await _run_once(operator, await bench.kube.request("GET", kfdef_path))
    finally:
        await operator.stop()
        await kube.close()


async def profile(bench: Bench, scale: float, output_dir: Path) -> dict:
    """Profile the first apply of a fresh workload, then the no-op reconcile of a restarted operator.

    Writes ``profile-apply.txt`` and ``profile-noop.txt`` to ``output_dir``; returns both summaries.
    """
    workload, uri = bench.new_workload(scale)
    body, _ = await bench.create_kfdef(workload, uri)
    kfdef_path = f"{KFDEFS_PATH}/{body['metadata']['name']}"
    try:
        applied = await _reconcile_once(bench, kfdef_path, output_dir / "profile-apply.txt")
        if not all_applied(await bench.kube.request("GET", kfdef_path)):
            raise RuntimeError("the profiled reconcile did not apply every object")
        noop = await _reconcile_once(bench, kfdef_path, output_dir / "profile-noop.txt")
    finally:
        await _teardown(bench, kfdef_path)
    return {"objects": workload.total, "apply": applied, "noop": noop}
