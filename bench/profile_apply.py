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
from kfdef_operator.controller import builder, desired, reconciler, settings, wiring
from kfdef_operator.runtime.status import StatusWriter
from kfdef_operator.source.network import NetworkPolicy, parse_networks
from kfdef_operator.source.options import FetchOptions
from kfdef_operator.ssa.apply import Applier
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.lookup import LiveLookup
from kfdef_operator.ssa.staged import StagedApply

from . import release
from .context import KFDEFS_PATH, Bench, all_applied
from .profile_steps import STAGES, STEP_LABELS

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


def _instrument(operator: reconciler.Reconciler, timings: Timings) -> Callable[[], None]:
    """Time the pipeline's steps (labels: :data:`STEP_LABELS`); returns a function undoing the module- and
    class-level wrappers."""
    originals = [(builder, "resolve_sources", builder.resolve_sources),
                 (desired, "upgrade_objects", desired.upgrade_objects),
                 (Applier, "apply_stage", Applier.apply_stage), (LiveLookup, "lookup", LiveLookup.lookup),
                 (StagedApply, "_apply_custom", StagedApply._apply_custom)]
    originals.append((StatusWriter, "update", StatusWriter.update))
    fetch, render_step, render, desire, upgrade, watches, stages, prefetch, crds, status, events = STEP_LABELS
    _timed(builder, "resolve_sources", fetch, timings)
    _timed(operator.parts.builder.render_cache, "render", render_step, timings)
    _timed(operator.parts.builder.render_cache, "_renderer", render, timings)  # only runs on a render-cache miss
    _timed(operator.parts.builder, "_desire", desire, timings)
    _timed(desired, "upgrade_objects", upgrade, timings)
    _timed(operator.parts.tracker, "watch", watches, timings)
    # One resource manager (and its parts) per identity, made during the reconcile: their classes are wrapped.
    _timed(Applier, "apply_stage", stages, timings)
    _timed(LiveLookup, "lookup", prefetch, timings)
    _timed(StagedApply, "_apply_custom", crds, timings)
    _timed(StatusWriter, "update", status, timings)  # one writer per KfDef, made during the reconcile
    _timed(operator.parts.events, "record", events, timings)

    def undo() -> None:
        for owner, name, original in originals:
            setattr(owner, name, original)

    return undo


def _reconciler(kube: KubeClient, bench: Bench) -> reconciler.Reconciler:
    """An in-process operator whose work queue never runs by itself: the profile drives each run."""
    # The bench serves its archives over plain http on loopback.
    loopback = NetworkPolicy(allowed=parse_networks("127.0.0.0/8", "bench"))
    options = settings.Settings(work_dir=bench.work_dir / "profile-operator",
                                fetch_options=FetchOptions.from_env(allow_insecure_http=True, networks=loopback))
    return reconciler.Reconciler(wiring.assemble(kube, options, gate=asyncio.Event()))


async def _run_once(operator: reconciler.Reconciler, body: JSON) -> float | None:
    """One run of the operator's work for this KfDef (reconcile, or teardown when it is being deleted)."""
    key = (body["metadata"]["namespace"], body["metadata"]["name"])
    # Not observe(): that would also queue a standby preparation (the gate is never set), which renders into
    # the same directory at the same time.
    operator._bodies[key] = body  # noqa: SLF001
    return await operator._work(key)  # noqa: SLF001


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
            "stage_s": [round(d, 3) for d in timings.get(STAGES, [])],
            "pyinstrument_text": output.name}


async def _teardown(bench: Bench, kfdef_path: str, *, timeout: float = 900) -> None:
    """Delete the KfDef and tear its stack down in-process (no operator process runs to remove the finalizer),
    run after run with the operator's own delays, as the operator waits out a slow teardown."""
    kube = await KubeClient.connect(str(bench.control_plane.kubeconfig))
    operator = _reconciler(kube, bench)
    deadline = time.monotonic() + timeout
    try:
        await operator.start()
        await bench.kube.request("DELETE", kfdef_path)
        # None: gone, or it never got the finalizer (the profiled reconcile failed before it)
        while (body := await bench.kube.get(kfdef_path)) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{kfdef_path} still there after {timeout:.0f}s: {body.get('status')}")
            delay = await _run_once(operator, body)
            await asyncio.sleep(min(delay or 1.0, 10.0))
    finally:
        await operator.stop()
        await kube.close()


async def profile(bench: Bench, scale: float, output_dir: Path, *, kubeflow: bool = False) -> dict:
    """Profile the first apply of a fresh KfDef, then the no-op reconcile of a restarted operator: the synthetic
    workload at ``scale``, or Kubeflow v1.11.0 as ``bench.release`` deploys it when ``kubeflow``.

    Writes ``profile-apply.txt`` and ``profile-noop.txt`` to ``output_dir``; returns both summaries.
    """
    if kubeflow:
        prepared = await release.prepare(bench)
        body = await bench.kube.request("POST", KFDEFS_PATH, body=prepared.kfdef)
        objects = len(prepared.objects)
    else:
        workload, uri = bench.new_workload(scale)
        body, _ = await bench.create_kfdef(workload, uri)
        objects = workload.total
    kfdef_path = f"{KFDEFS_PATH}/{body['metadata']['name']}"
    try:
        applied = await _reconcile_once(bench, kfdef_path, output_dir / "profile-apply.txt")
        if not all_applied(await bench.kube.request("GET", kfdef_path)):
            raise RuntimeError("the profiled reconcile did not apply every object")
        noop = await _reconcile_once(bench, kfdef_path, output_dir / "profile-noop.txt")
    finally:
        await _teardown(bench, kfdef_path)
    return {"objects": objects, "apply": applied, "noop": noop}


def main() -> None:
    import argparse
    import json
    import tempfile

    from .standalone import run_alone

    parser = argparse.ArgumentParser(prog="python -m bench.profile_apply",
                                     description="the profile alone, on a control plane of its own")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--kubeflow", action="store_true", help="profile Kubeflow v1.11.0 instead (bench.release)")
    parser.add_argument("--out", type=Path, default=Path("build/profile"), help="directory for the profile texts")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kfdef-profile-", dir="/dev/shm") as work_dir:
        summary = asyncio.run(run_alone(Path(work_dir), lambda bench: profile(bench, args.scale, args.out,
                                                                                kubeflow=args.kubeflow)))
    (args.out / "profile.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: summary[k]["steps_s"] | {"wall": summary[k]["reconcile_wall_s"]}
                      for k in ("apply", "noop")}, indent=1))


if __name__ == "__main__":
    main()
