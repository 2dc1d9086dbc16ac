"""The sections on the apply paths of both workloads: the real release's figures, the operator against the floor
of issue 26, and where the operator's first apply spends its time and the CPU each path used."""

from __future__ import annotations

from collections.abc import Callable

from ..results import Figure, Results, Workload
from ..tables import fmt, ratio, shown, table


def workloads(results: Results) -> tuple[tuple[str, Workload], ...]:
    """Both workloads, by the label the report gives them."""
    return ("synthetic", results.synthetic), ("v1.11.0", results.release)


def _median(figure: Figure | None) -> float | None:
    return None if figure is None else figure.median


#: The keys of the real release's figures, in the order of its table.
_RELEASE_KEYS = ("release.apply.operator_s", "release.apply.operator_ready_s", "release.apply.kubectl_ssa_s",
                 "release.apply.floor_s", "release.apply.render_floor_s", "release.apply.apply_phase_s",
                 "release.render.s", "release.teardown.s", "release.teardown.floor_s")


def release(results: Results) -> list[str]:
    """The real release (``bench/release.py``): the three paths on the same objects."""
    return ["## A real release", "", *_release(results)]


def _release(results: Results) -> list[str]:
    kubeflow = results.kubeflow
    if kubeflow is None:
        return ["(not run)"]
    rows = [[f"`{key}`", fmt(figure.median), fmt(figure.min), fmt(figure.max), str(figure.n)]
            for key in _RELEASE_KEYS if (figure := results.figures.get(key)) is not None]
    r = results.ratios
    return [f"Kubeflow {kubeflow.version} (`example/`, plain mode), {results.release.objects} objects: the release "
            f"without its {kubeflow.left_out} fail-closed webhook configurations (nothing can serve them here) and "
            "with its example Profile named as the kustomize it pins does (`bench/release.py`). Same meaning of each "
            "figure as above; the operator's figure includes fetching the tarball and rendering.", "",
            *table(["figure", "median s", "min", "max", "n"], rows), "",
            f"Ratios of medians: operator / (render floor + floor) = "
            f"**{ratio(r, 'release operator/(render floor + floor)')}**, operator / (render floor + kubectl) = "
            f"**{ratio(r, 'release operator/(render floor + kubectl)')}**, apply phase / floor = "
            f"**{ratio(r, 'release apply phase/floor')}**, operator / kubectl = {r['release operator/kubectl']:.2f}, "
            f"operator / floor = {r['release operator/floor']:.2f}, kubectl / floor = "
            f"{r['release kubectl/floor']:.2f}, teardown operator / floor = "
            f"**{ratio(r, 'release teardown operator/floor')}**."]


def against_floor(results: Results) -> list[str]:
    """The operator against the floor of issue 26 (the kustomize CLI alone building the same trees, then the raw
    concurrent apply of its output), and what separates the two: the time until the first object beyond kustomize
    alone, the apply phase beyond the floor's apply, and the rest (status writes, the reads before the first write).
    """
    return ["## Against the floor of issue 26", "", *_against_floor(results)]


def _against_floor(results: Results) -> list[str]:
    rows = []
    for label, workload in workloads(results):
        operator, floor = _median(workload.operator), _median(workload.floor)
        if operator is None or floor is None:
            continue
        render_floor, phase, steps = _median(workload.render_floor), _median(workload.apply_phase), workload.steps
        before_first = steps["queued"] + steps["fetch"] + steps["render"] if steps else None
        both = None if render_floor is None else render_floor + floor
        render_gap = None if before_first is None or render_floor is None else before_first - render_floor
        apply_gap = None if phase is None else phase - floor
        rest = (None if before_first is None or phase is None else operator - before_first - phase)
        rows.append([label, fmt(operator), shown(render_floor), fmt(floor), shown(both),
                     "n/a" if both is None else f"**{operator / both:.2f}**", shown(before_first),
                     shown(render_gap), shown(phase), "n/a" if phase is None else f"{phase / floor:.2f}",
                     shown(apply_gap), shown(rest)])
    if not rows:
        return ["(not measured)"]
    return [
        "The floor an operator that renders with kustomize can be held to (issue 26): the pinned kustomize CLI "
        "building the trees the operator builds (`render floor`, output discarded), then every object of its "
        "output applied at once (`floor`). What separates the operator from it: the time until its first object "
        "beyond kustomize alone (fetching, the render helper, reading its output, the desired state), its apply "
        "phase (first object sent to last answered) beyond the floor's apply, and the rest (reads before the first "
        "write, status writes). Medians, seconds.", "",
        *table(["workload", "operator", "render floor", "floor", "render floor + floor",
                "operator / (render floor + floor)", "until the first object (steps)", "beyond the render floor",
                "apply phase", "apply phase / floor", "beyond the floor", "the rest"], rows)]


#: The paths whose CPU each workload records: label, key of ``Workload.cpu``, the figure of their wall time.
_CPU_PATHS: tuple[tuple[str, str, Callable[[Workload], Figure | None]], ...] = (
    ("operator apply", "apply.operator", lambda w: w.operator), ("floor apply", "apply.floor", lambda w: w.floor),
    ("operator teardown", "teardown.operator", lambda w: w.teardown),
    ("floor teardown", "teardown.floor", lambda w: w.teardown_floor))


def floor_cores(results: Results) -> str:
    """The cores the floor's apply kept busy, per workload (``1.2 (synthetic), 1.7 (v1.11.0)``)."""
    busy = [f"{cpu.total / workload.floor.median:.1f} ({label})" for label, workload in workloads(results)
            if (cpu := workload.cpu.get("apply.floor")) is not None and workload.floor is not None]
    return ", ".join(busy) or "(not measured)"


def time_and_cpu(results: Results) -> list[str]:
    """Where the operator's first apply spends its time (its steps, read from the status it writes) and the CPU
    seconds each path used, per process."""
    return ["## Where the time and the CPU go", "", *_time_and_cpu(results)]


def _time_and_cpu(results: Results) -> list[str]:
    step_rows = []
    for label, workload in workloads(results):
        steps = workload.steps
        if not steps or workload.operator is None or workload.floor is None:
            continue
        floor = workload.floor.median
        step_rows.append([label, *(fmt(steps[name]) for name in ("queued", "fetch", "render", "apply")),
                          fmt(workload.operator.median), fmt(floor), f"{steps['apply'] / floor:.2f}"])
    cpu_rows = []
    processes: list[str] = []
    for label, workload in workloads(results):
        for path, key, timed in _CPU_PATHS:
            entry, wall_figure = workload.cpu.get(key), timed(workload)
            if entry is None or wall_figure is None:
                continue
            processes = processes or list(entry.median)
            wall = wall_figure.median
            cpu_rows.append([label, path, *(fmt(entry.median[name]) for name in processes), fmt(entry.total),
                             fmt(wall), f"{entry.total / wall:.2f}"])
    if not step_rows and not cpu_rows:
        return ["(not measured)"]
    return [
        "The operator's first apply, step by step (medians, seconds): `queued` from the create call returning to "
        "its first status step, then fetching the sources, rendering (kustomize, and the desired state built from "
        "its output, until the inventory is written), and applying until every object is applied; beside it the "
        "floor's apply of the same objects.", "",
        *table(["workload", "queued", "fetch", "render", "apply", "operator in all", "floor", "apply / floor"],
               step_rows), "",
        f"CPU seconds used during each path (medians of `/proc/<pid>/stat`; the operator's include its render "
        f"processes and kustomize), and the cores they kept busy on average (of {results.meta.machine.cores}):", "",
        *table(["workload", "path", *processes, "total", "wall s", "cores busy"], cpu_rows)]
