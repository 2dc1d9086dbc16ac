"""Profile of the operator's apply path: ``reconciler.Operator`` driven in-process under pyinstrument.

The operator process must be stopped (nothing else reconciles the KfDef).
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
from pathlib import Path
from typing import Any, Callable

from pyinstrument import Profiler

from kfdef_operator import reconciler
from kfdef_operator.kube import KubeClient
from kfdef_operator.sources import FetchOptions

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


def _instrument(operator: reconciler.Operator, timings: Timings) -> Callable[[], None]:
    """Time the pipeline's steps; returns a function undoing the module-level wrappers."""
    originals = {name: getattr(reconciler, name) for name in ("resolve_sources", "render", "upgrade_objects")}
    _timed(reconciler, "resolve_sources", "fetch sources", timings)
    _timed(reconciler, "render", "render (kustomize)", timings)
    _timed(reconciler, "upgrade_objects", "API-version upgrade check", timings)
    _timed(operator.engine, "apply_stage", "apply stage (per stage)", timings)
    _timed(operator.engine, "_prefetch", "  of which: live metadata lists", timings)
    _timed(operator.engine, "_settle_crds", "wait for CRDs Established", timings)
    _timed(operator.tracker, "watch", "start watches (list + sync)", timings)
    _timed(operator, "write_status", "status writes", timings)
    _timed(operator.events, "record", "events", timings)

    def undo() -> None:
        for name, original in originals.items():
            setattr(reconciler, name, original)

    return undo


async def profile(bench: Bench, scale: float, output: Path) -> dict:
    """Reconcile a fresh workload once in-process; write the pyinstrument text to ``output``; return a summary."""
    workload, uri = bench.new_workload(scale)
    kube = await KubeClient.connect(str(bench.control_plane.kubeconfig))
    operator = reconciler.Operator(kube, work_dir=bench.work_dir / "profile-operator",
                                   fetch_options=FetchOptions.from_env(allow_insecure_http=True))
    timings: Timings = defaultdict(list)
    undo = _instrument(operator, timings)
    try:
        await operator.start()
        body, _ = await bench.create_kfdef(workload, uri)
        profiler = Profiler(interval=0.001, async_mode="enabled")
        started = time.monotonic()
        profiler.start()
        try:
            await operator.reconcile(body)
        finally:
            profiler.stop()
        wall = time.monotonic() - started
        output.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
        requests = kube.stats().by_verb
        live = await bench.kube.request("GET", f"{KFDEFS_PATH}/{body['metadata']['name']}")
        if not all_applied(live):
            raise RuntimeError(f"profiled reconcile did not apply everything: {live.get('status')}")
        await operator.teardown(live)
        await bench.kube.request("DELETE", f"{KFDEFS_PATH}/{body['metadata']['name']}")
    finally:
        undo()
        await operator.stop()
        await kube.close()
    return {"objects": workload.total, "reconcile_wall_s": wall, "requests_by_verb": requests,
            "steps_s": {label: round(sum(durations), 3) for label, durations in timings.items()},
            "stage_s": [round(d, 3) for d in timings["apply stage (per stage)"]],
            "pyinstrument_text": output.name}
