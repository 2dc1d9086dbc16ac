"""``docs/benchmarks.md``: readable tables of one session's results (generated; edit bench/, not the page)."""

from __future__ import annotations

from .figures import HEADLINE_KEYS, JSON, rss_points
from .markdown_ha import replicas_and_shards
from .profile_steps import KUSTOMIZE, RENDER_STEP, STATUS_WRITES, WATCHES
from .tables import fmt, table


def _results_table(results: JSON) -> list[str]:
    rows = []
    for key in HEADLINE_KEYS:
        entry = results.get(key)
        if not entry:
            continue
        earlier = f" (session of {entry['session']}, not re-run)" if entry.get("session") else ""
        rows.append([f"`{key}`", fmt(entry["value"]), fmt(entry["median"]), fmt(entry["min"]), fmt(entry["max"]),
                     str(entry["n"]), entry["unit"] + earlier])
    return table(["figure", "value", "median", "min", "max", "n", "unit"], rows)


def _targets_table(results: JSON) -> list[str]:
    rows = []
    for row in results["targets"]:
        met = {True: "**met**", False: "**missed**", None: "not measured"}[row["met"]]
        measured = fmt(row["measured"]) if "measured" in row else "-"
        limit = fmt(row["limit"]) if "limit" in row else "-"
        rows.append([row["target"], measured, limit, met, row["note"]])
    return table(["target", "measured", "limit", "result", "note"], rows)


def _environment(meta: JSON) -> list[str]:
    machine, versions, workload = meta["machine"], meta["versions"], meta["workload"]
    kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(workload["by_kind"].items(), key=lambda kv: -kv[1]))
    return [
        f"- Date: {meta['date']}; whole session {meta['duration_s']:.0f} s"
        + (" (**quick mode**: smaller workload, fewer runs)" if meta["plan"]["quick"] else ""),
        f"- Machine: {machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB, Linux "
        f"{machine['kernel']}; load average at the end {', '.join(f'{x:.1f}' for x in machine['load_average_at_end'])}"
        " (other test suites ran concurrently: expect noise)",
        f"- Versions: kube-apiserver {versions['kube-apiserver']}, {versions['kubectl']}, kustomize "
        f"{versions['kustomize']}, Python {versions['python']}, kopf {versions['kopf']}, "
        f"kubernetes client {versions['kubernetes']}",
        f"- kube-apiserver flags: `{' '.join(meta['flags']['kube-apiserver'])}`; kube-controller-manager: "
        f"`{' '.join(meta['flags']['kube-controller-manager'])}`",
        f"- Workload: {workload['objects']} objects in {workload['namespaces']} namespaces ({kinds}); "
        f"{workload['crds_over_256kib']} CRDs over 256 KiB (largest {workload['largest_crd_kib']} KiB)",
    ]


def _sweep(results: JSON) -> list[str]:
    def floor(point: JSON) -> list[str]:
        if "floor_s" not in point:
            return ["-", "-", "-"]
        return [fmt(point["floor_s"]), fmt(point["floor_s"] / point["objects"] * 1000),
                f"{point['applied_s'] / point['floor_s']:.2f}"]

    rows = [[fmt(p["scale"]), str(p["objects"]), fmt(p["applied_s"]), fmt(p["objects_per_s"]),
             fmt(p["applied_s"] / p["objects"] * 1000), *floor(p)]
            for p in sorted(results["scale.sweep"], key=lambda p: p["objects"])]
    many = results.get("scale.kfdefs_s") or {}
    if many.get("objects"):
        rows.append([f"{many['kfdefs']} KfDefs", str(many["objects"]), fmt(many["median"]),
                     fmt(many["objects"] / many["median"]), fmt(many["median"] / many["objects"] * 1000),
                     "-", "-", "-"])
    return table(["workload", "objects", "seconds (median)", "objects/s", "ms per object", "floor s",
                   "floor ms per object", "operator / floor"], rows)


def _release(results: JSON) -> list[str]:
    """The real release (bench/release.py): the three paths on the same objects."""
    operator = results.get("release.apply.operator_s")
    if not operator:
        return ["(not run)"]
    rows = [[f"`{key}`", fmt(results[key]["median"]), fmt(results[key]["min"]), fmt(results[key]["max"]),
             str(results[key]["n"])]
            for key in ("release.apply.operator_s", "release.apply.operator_ready_s", "release.apply.kubectl_ssa_s",
                        "release.apply.floor_s", "release.apply.render_floor_s", "release.apply.apply_phase_s",
                        "release.render.s", "release.teardown.s", "release.teardown.floor_s")
            if key in results]
    r = results["ratios"]
    return [f"Kubeflow {operator['release']} (`example/`, plain mode), {operator['objects']} objects: the release "
            f"without its {operator['left_out']} fail-closed webhook configurations (nothing can serve them here) and "
            "with its example Profile named as the kustomize it pins does (`bench/release.py`). Same meaning of each "
            "figure as above; the operator's figure includes fetching the tarball and rendering.", "",
            *table(["figure", "median s", "min", "max", "n"], rows), "",
            f"Ratios of medians: operator / (render floor + floor) = "
            f"**{_ratio(r, 'release operator/(render floor + floor)')}**, operator / (render floor + kubectl) = "
            f"**{_ratio(r, 'release operator/(render floor + kubectl)')}**, apply phase / floor = "
            f"**{_ratio(r, 'release apply phase/floor')}**, operator / kubectl = {r['release operator/kubectl']:.2f}, "
            f"operator / floor = {r['release operator/floor']:.2f}, kubectl / floor = "
            f"{r['release kubectl/floor']:.2f}, teardown operator / floor = "
            f"**{_ratio(r, 'release teardown operator/floor')}**."]


def _ratio(ratios: JSON, name: str) -> str:
    """A ratio of the session, or n/a when its results predate it."""
    return f"{ratios[name]:.2f}" if name in ratios else "n/a"


def _seconds(results: JSON, key: str) -> float | None:
    entry = results.get(key)
    return entry["median"] if entry else None


def _shown(value: float | None) -> str:
    return "n/a" if value is None else fmt(value)


def _against_floor(results: JSON) -> list[str]:
    """The operator against the floor of issue 26 (the kustomize CLI alone building the same trees, then the raw
    concurrent apply of its output), and what separates the two: the time until the first object beyond kustomize
    alone, the apply phase beyond the floor's apply, and the rest (status writes, the reads before the first write).
    """
    rows = []
    for label, prefix in _WORKLOADS:
        operator, floor = _seconds(results, f"{prefix}apply.operator_s"), _seconds(results, f"{prefix}apply.floor_s")
        if operator is None or floor is None:
            continue
        render_floor = _seconds(results, f"{prefix}apply.render_floor_s")
        phase = _seconds(results, f"{prefix}apply.apply_phase_s")
        steps = (results.get(f"{prefix}apply.steps") or {}).get("median") or {}
        before_first = steps["queued"] + steps["fetch"] + steps["render"] if steps else None
        both = None if render_floor is None else render_floor + floor
        render_gap = None if before_first is None or render_floor is None else before_first - render_floor
        apply_gap = None if phase is None else phase - floor
        rest = (None if before_first is None or phase is None else operator - before_first - phase)
        rows.append([label, fmt(operator), _shown(render_floor), fmt(floor), _shown(both),
                     "n/a" if both is None else f"**{operator / both:.2f}**", _shown(before_first),
                     _shown(render_gap), _shown(phase), "n/a" if phase is None else f"{phase / floor:.2f}",
                     _shown(apply_gap), _shown(rest)])
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


_WORKLOADS = (("synthetic", ""), ("v1.11.0", "release."))
_CPU_PATHS = (("operator apply", "apply.operator", "apply.operator_s"), ("floor apply", "apply.floor", "apply.floor_s"),
              ("operator teardown", "teardown.operator", "teardown.s"),
              ("floor teardown", "teardown.floor", "teardown.floor_s"))


def _cpu_of(results: JSON, prefix: str) -> JSON:
    return results.get(f"{prefix}cpu") or {}


def _floor_cores(results: JSON) -> str:
    """The cores the floor's apply kept busy, per workload (``1.2 (synthetic), 1.7 (v1.11.0)``)."""
    busy = [f"{cpu['apply.floor']['total'] / results[f'{prefix}apply.floor_s']['median']:.1f} ({label})"
            for label, prefix in _WORKLOADS if "apply.floor" in (cpu := _cpu_of(results, prefix))]
    return ", ".join(busy) or "(not measured)"


def _time_and_cpu(results: JSON) -> list[str]:
    """Where the operator's first apply spends its time (its steps, read from the status it writes) and the CPU
    seconds each path used, per process."""
    step_rows = []
    for label, prefix in _WORKLOADS:
        steps = (results.get(f"{prefix}apply.steps") or {}).get("median")
        if not steps:
            continue
        floor = results[f"{prefix}apply.floor_s"]["median"]
        step_rows.append([label, *(fmt(steps[name]) for name in ("queued", "fetch", "render", "apply")),
                          fmt(results[f"{prefix}apply.operator_s"]["median"]), fmt(floor),
                          f"{steps['apply'] / floor:.2f}"])
    cores = results["meta"]["machine"]["cores"]
    cpu_rows = []
    processes: list[str] = []
    for label, prefix in _WORKLOADS:
        for path, key, seconds_key in _CPU_PATHS:
            entry = _cpu_of(results, prefix).get(key)
            if not entry:
                continue
            processes = processes or list(entry["median"])
            wall = results[f"{prefix}{seconds_key}"]["median"]
            cpu_rows.append([label, path, *(fmt(entry["median"][name]) for name in processes), fmt(entry["total"]),
                             fmt(wall), f"{entry['total'] / wall:.2f}"])
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
        f"processes and kustomize), and the cores they kept busy on average (of {cores}):", "",
        *table(["workload", "path", *processes, "total", "wall s", "cores busy"], cpu_rows)]


def _teardown_waves(results: JSON, prefix: str) -> str:
    """The operator's teardown waves (medians over the runs): what each deleted and how long it took."""
    runs = [run for run in (results.get(f"{prefix}teardown.s") or {}).get("waves") or [] if run]
    if not runs or len({len(run) for run in runs}) != 1:
        return ""
    waves = []
    for index, wave in enumerate(runs[0]):
        done = sorted(run[index]["done_s"] for run in runs)[len(runs) // 2]
        kinds = wave["kinds"] if len(wave["kinds"]) <= 3 else [*wave["kinds"][:3], "..."]
        waves.append(f"{wave['objects']} ({', '.join(kinds)}) {fmt(done)} s")
    return "; ".join(waves)


#: Figures compared before and after a change (issue 18): (label, key or ratio name, where).
_COMPARED = (
    ("synthetic: operator apply (s)", "apply.operator_s", "results"),
    ("synthetic: floor apply (s)", "apply.floor_s", "results"),
    ("synthetic: render floor, kustomize alone (s)", "apply.render_floor_s", "results"),
    ("synthetic: operator / (render floor + floor)", "operator/(render floor + floor)", "ratios"),
    ("synthetic: operator / floor", "operator/floor", "ratios"),
    ("synthetic: operator / kubectl SSA", "operator/kubectl", "ratios"),
    ("synthetic: teardown (s)", "teardown.s", "results"),
    ("synthetic: teardown floor (s)", "teardown.floor_s", "results"),
    ("synthetic: teardown operator / floor", "teardown operator/floor", "ratios"),
    ("v1.11.0: operator apply (s)", "release.apply.operator_s", "results"),
    ("v1.11.0: floor apply (s)", "release.apply.floor_s", "results"),
    ("v1.11.0: render floor, kustomize alone (s)", "release.apply.render_floor_s", "results"),
    ("v1.11.0: operator / (render floor + floor)", "release operator/(render floor + floor)", "ratios"),
    ("v1.11.0: apply phase (s)", "release.apply.apply_phase_s", "results"),
    ("v1.11.0: apply phase / floor", "release apply phase/floor", "ratios"),
    ("v1.11.0: operator / (render floor + kubectl SSA)", "release operator/(render floor + kubectl)", "ratios"),
    ("v1.11.0: operator / floor", "release operator/floor", "ratios"),
    ("v1.11.0: operator / kubectl SSA", "release operator/kubectl", "ratios"),
    ("v1.11.0: teardown (s)", "release.teardown.s", "results"),
    ("v1.11.0: teardown floor (s)", "release.teardown.floor_s", "results"),
    ("v1.11.0: teardown operator / floor", "release teardown operator/floor", "ratios"),
    ("no-op restart: writes (max; before: every client's, after: the operator's)", "noop.writes", "max"),
    ("no-op restart, both stacks: writes (as above)", "release.noop.writes", "results"),
    ("idle, both stacks: writes (as above)", "idle.writes", "results"),
    ("idle window (s)", "idle.requests_per_min", "window_s"),
    ("operator RSS, v1.11.0 at rest (MiB)", "release.rss_mb", "results"),
    ("operator RSS, both stacks after restart and idle (MiB)", "idle.rss_mb", "results"),
    ("heal p50 (ms)", "heal.p50_ms", "results"),
    ("heal p99 (ms)", "heal.p99_ms", "results"),
    ("heal floor p50 (ms)", "heal.floor_p50_ms", "results"),
    ("heal floor p99 (ms)", "heal.floor_p99_ms", "results"),
    ("heal p99 / heal floor p99", "heal p99/floor p99", "ratios"),
)


def _compared(results: JSON, key: str, where: str) -> str:
    try:
        if where == "ratios":
            return f"{results['ratios'][key]:.2f}"
        if where == "max":
            return fmt(results[key]["max"])
        if where == "window_s":
            return fmt(results[key]["window_s"])
        return fmt(results[key]["value"])
    except (KeyError, TypeError):
        return "n/a"


def before_after(before: JSON | None, after: JSON) -> list[str]:
    """The headline figures of the session before a change beside this session's (``bench/results-before.json``)."""
    if not before:
        return ["(no results-before.json next to the results)"]
    rows = [[label, _compared(before, key, where), _compared(after, key, where)] for label, key, where in _COMPARED]
    return [f"Before: {before['meta']['date']}, at commit {before['meta'].get('commit', '?')} "
            f"(`bench/results-before.json`); after: this session. Medians; each session on its own control plane.",
            "", *table(["figure", "before", "after"], rows)]


def _memory(results: JSON) -> list[str]:
    """The operator's resident memory at rest with one KfDef of each sweep size deployed."""
    points = rss_points(results)
    if not points:
        return ["(not measured)"]
    rows = [[fmt(p["scale"]), str(p["objects"]), fmt(p["rss_before_mb"]), fmt(p["rss_mb"]),
             fmt(p["growth_per_1000_mb"])] for p in points]
    steps = [f"{fmt((b['rss_mb'] - a['rss_mb']) / (b['objects'] - a['objects']) * 1000)} MiB per 1,000 objects "
             f"from x{fmt(a['scale'])} to x{fmt(b['scale'])}" for a, b in zip(points, points[1:], strict=False)]
    return [*table(["scale", "objects", "RSS before the KfDef (MiB)", "RSS at rest with it (MiB)",
                     "above the empty operator, per 1,000 objects (MiB)"], rows), "",
            f"The empty operator (before the first sweep KfDef): {fmt(points[0]['rss_before_mb'])} MiB. "
            f"Growth between sizes: {'; '.join(steps) or '-'}. Memory is read from `/proc/<pid>/status` (VmRSS) "
            f"{fmt(5.0)} s after the KfDef is Ready; each size is torn down before the next (CPython keeps some "
            "freed memory, so a later size starts from a higher floor)."]


def _profile(profile: JSON | None) -> list[str]:
    if not profile:
        return ["(not run)"]
    apply, noop = profile["apply"], profile["noop"]
    rows = []
    for label in apply["steps_s"]:
        a, n = apply["steps_s"][label], noop["steps_s"][label]
        rows.append([label.replace(" ", "&nbsp;", 2) if label.startswith(" ") else label,
                     fmt(a), f"{a / apply['reconcile_wall_s'] * 100:.0f} %",
                     fmt(n), f"{n / noop['reconcile_wall_s'] * 100:.0f} %"])

    def verbs(entry: JSON) -> str:
        return ", ".join(f"{n} {verb}" for verb, n in sorted(entry["requests_by_verb"].items()))

    return [f"`Reconciler` in-process on {profile['objects']} objects (`bench/profile_apply.py`): the first "
            f"apply took {fmt(apply['reconcile_wall_s'])} s wall ({verbs(apply)}; stages "
            f"{', '.join(fmt(s) for s in apply['stage_s'])} s), the no-op reconcile of a freshly started operator "
            f"{fmt(noop['reconcile_wall_s'])} s ({verbs(noop)}). Steps overlap with nothing unless said; the apply "
            f"stages include the live-metadata lists. pyinstrument trees: `bench/{apply['pyinstrument_text']}`, "
            f"`bench/{noop['pyinstrument_text']}`.", "",
            *table(["step", "apply s", "share", "no-op s", "share"], rows)]


def _heal_floor(results: JSON) -> str:
    """The heal floor's percentiles beside the operator's, as a sentence (none for results that predate it)."""
    if "heal.floor_p99_ms" not in results:
        return ""
    floor = sorted(results["heal.floor_p99_ms"]["samples"])
    return (f" The heal floor (a copy of each Deployment put back by a bare watch that POSTs it, interleaved with "
            f"the operator's trials) took p50 {fmt(results['heal.floor_p50_ms']['value'])} ms and p99 "
            f"{fmt(results['heal.floor_p99_ms']['value'])} ms (slowest {', '.join(fmt(x) for x in floor[-3:])} ms) "
            f"on the same cluster at the same time: the operator's p99 is "
            f"{results['heal.p99_ms']['value'] / results['heal.floor_p99_ms']['value']:.2f} x the floor's.")


def _heal_writes(entry: dict, *, with_floor: bool) -> str:
    """What the clients wrote during the Deployment heals (kube-apiserver's audit log), as a sentence; the heal
    floor's trials, ``with_floor``, ran between them (its writes are the benchmark's own, ``Python``)."""
    by_client = entry.get("writes_by_client")
    if not by_client:
        return ""
    totals = {client: sum(requests.values()) for client, requests in by_client.items()}
    operator = by_client.get("operator", {})
    others = sorted(((n, c) for c, n in totals.items() if c != "operator"), reverse=True)
    heals = f"{entry['n']} heals and the heal floor's {entry['n']}" if with_floor else f"{entry['n']} heals"
    return (f" During the {heals} the operator wrote {totals.get('operator', 0)} requests "
            f"({', '.join(f'{n} {r}' for r, n in sorted(operator.items()))}), the cluster's own components "
            f"{sum(n for n, _ in others)} ({', '.join(f'{c} {n}' for n, c in others)}): the deletes' cascade "
            f"and the new objects' ReplicaSets, Pods and status, on the same kube-apiserver.")


def _misses(results: JSON) -> list[str]:
    """Why each missed target is missed, with the numbers of this session."""
    missed = {row["target"].split(" ")[0] for row in results["targets"] if row["met"] is False}
    profile = results.get("profile") or {}
    noop = (profile.get("noop") or {}).get("steps_s", {})
    notes = []
    if missed & {"apply.operator_s", "release.apply.operator_s", "release.apply.apply_phase_s"}:
        notes.append(
            "- **apply against the floors**: *Against the floor of issue 26* splits the operator's time beyond "
            "kustomize alone plus the raw apply into the time until its first object, the apply phase and the "
            "rest; *Where the time and the CPU go* has the CPU of each process. A KfDef of one application is one "
            "`kustomize build`, whose output comes only when it exits, so nothing can be applied before it; "
            "applying a KfDef's other applications while the last ones render would also apply part of a KfDef "
            "whose render then fails, where today nothing changes until every application renders.")
    for prefix, label in (("", "synthetic"), ("release.", "v1.11.0")):
        if f"{prefix}teardown.s" in missed:
            waves = _teardown_waves(results, prefix)
            notes.append(
                f"- **teardown ({label})**: "
                + (f"the operator's waves (objects, kinds, seconds until each was gone; medians): {waves}. " if waves
                   else "")
                + "The last wave waits for the Namespaces, which kube-controller-manager starts to empty only 5 s "
                "after their deletion (`namespaceDeletionGracePeriod`), and for kube-apiserver to finalize each CRD "
                "sent with them (its `customresourcecleanup` finalizer, a few workers for all of them). Only CRDs "
                "with a custom resource that carries a finalizer go in a wave of their own before it, while the "
                "controllers in the Namespaces still run: a custom resource whose finalizer no controller removes any "
                "more would keep its CRD for ever. The floor deletes everything at once, in no waves.")
    if "release.rss_mb" in missed or "memory" in missed:
        notes.append(
            "- **memory**: besides its code (69 MiB at start), the operator at rest holds one connection per "
            "watched kind (HTTP/1.1 watches cannot share one; each reads through a 64 KiB TLS buffer, asyncio's "
            "default being 256 KiB), the request pool's idle connections for aiohttp's 15 s keep-alive, the desired "
            "states as compact JSON (4.5 MiB for v1.11.0), the watch caches' summaries, and heap that the allocator "
            "keeps after the apply's peak. See also the table under *Growth with objects*.")
    if "heal.p99_ms" in missed:
        heal = sorted(results["heal.p50_ms"]["samples"])
        notes.append(
            f"- **heal.p99_ms**: the slowest heals took {', '.join(fmt(x) for x in heal[-3:])} ms against a median "
            f"of {fmt(results['heal.p50_ms']['value'])} ms: the heal is one POST (the watch's DELETED event "
            f"starts it, no GET first), so the tail is kube-apiserver and the operator waiting for one of the 2 "
            f"cores that the cluster's components share with them while the delete's cascade runs."
            f"{_heal_floor(results)}"
            f"{_heal_writes(results['heal.p99_ms'], with_floor='heal.floor_p99_ms' in results)}")
    if "noop.writes" in missed:
        notes.append(
            f"- **noop.writes**: the operator's writes per restart were {results['noop.writes']['by_request']} "
            f"(other clients: {results['noop.writes']['others']}).")
    for failure in results.get("scale.sweep_failures") or []:
        notes.append(f"- **sweep at x{fmt(failure['scale'])} not measured**: {failure['error'][:300]}... "
                     "(the embedded control plane's Service IP range holds fewer Services than that workload has; "
                     "the operator reported it as Degraded, as it should).")
    if "noop.s" in missed and noop:
        notes.append(
            f"- **noop.s**: a restarted operator has no desired state in memory, so the no-op goes through its "
            f"render step again ({fmt(noop[RENDER_STEP])} s, of which {fmt(noop[KUSTOMIZE])} s in kustomize: none "
            f"when the render cache on disk holds this KfDef's render of the same sources), restarts a watch per "
            f"kind with a list ({fmt(noop[WATCHES])} s) and writes status ({fmt(noop[STATUS_WRITES])} s) before it "
            f"can tell that every digest matches. Its "
            f"{(profile.get('noop') or {}).get('requests_by_verb', {}).get('GET', 0)} GETs are those lists and an "
            f"Established check of every CRD (unchanged CRDs are polled too); no object is written.")
    if "scale:" in missed:
        points = sorted(results["scale.sweep"], key=lambda p: p["objects"])
        per_object = ", ".join(f"{fmt(p['applied_s'] / p['objects'] * 1000)} ms at x{fmt(p['scale'])}"
                               for p in points)
        notes.append(f"- **scale**: time per object is {per_object}.{_sweep_floor(points)}")
    return notes or ["Every target is met."]


def _sweep_floor(points: list[JSON]) -> str:
    """What the floor measured at the sweep's sizes says of the growth per object."""
    floors = [p for p in points if "floor_s" in p]
    if len(floors) < 2:
        return ""
    ratios = [p["applied_s"] / p["floor_s"] for p in floors]
    text = (" The floor, a workload of the same size applied at once, took "
            + ", ".join(f"{fmt(p['floor_s'] / p['objects'] * 1000)} ms per object at x{fmt(p['scale'])}"
                        for p in floors)
            + f"; operator / floor {', '.join(f'{r:.2f}' for r in ratios)}")
    if ratios[-1] <= ratios[0] * 1.1:
        return text + (": the growth per object is kube-apiserver's (its work per CRD grows with the CRDs already "
                       "installed: each CRD change rebuilds the OpenAPI documents of all of them), not the operator's.")
    return text + ": the operator's time grows faster than the floor's."


def _status_write(results: JSON) -> list[str]:
    strings = results.get("status_write.strings.apiserver_cpu_ms")
    objects = results.get("status_write.objects.apiserver_cpu_ms")
    if not strings or not objects:
        return ["Not measured in this session (`python -m bench.status_write` measures it alone)."]
    took = {form: results[f"status_write.{form}.latency_ms"]["median"] for form in ("strings", "objects")}
    return [
        f"Measured in this session (`bench/status_write.py`): merge patches of `status.summary`, as the operator's "
        f"status writer sends one at each readiness change, to a KfDef holding the synthetic workload's inventory "
        f"({strings['note']}). kube-apiserver used **{fmt(strings['median'])} ms of CPU per write with the "
        f"inventory as strings** (what the operator writes) and {fmt(objects['median'])} ms with an object per entry "
        f"(its first format; {objects['note'].split('; ')[0]}): {objects['median'] / strings['median']:.1f} x as "
        f"much. Each write was answered in {fmt(took['strings'])} ms against {fmt(took['objects'])} ms (medians "
        f"of {strings['n']} rounds).",
    ]


def render_markdown(results: JSON, before: JSON | None = None) -> str:
    meta, r = results["meta"], results["ratios"]
    noop = results["noop.writes"]
    idle = results["idle.requests_per_min"]
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`python -m bench`; `make bench-quick` for a small run) from `bench/results.json`.",
        "All figures come from one session on one embedded control plane; every scenario ran several times with",
        "fresh names. Targets are those of issue 26 (apply and teardown against their floors, memory, heal p99),",
        "issue 18 (writes, growth, and its earlier limits), issue 8 (the rest), issue 5 (namespace/CRD heals) and",
        "issue 16 (replicas and shards).",
        "",
        "## Setup",
        "",
        *_environment(meta),
        "",
        "## Results",
        "",
        *_results_table(results),
        "",
        f"Ratios of medians: operator / (render floor + floor) = **{_ratio(r, 'operator/(render floor + floor)')}**, "
        f"apply phase / floor = {_ratio(r, 'apply phase/floor')}, operator / kubectl = "
        f"**{r['operator/kubectl']:.2f}**, operator / floor = {r['operator/floor']:.2f}, operator Ready / kubectl = "
        f"{r['operator_ready/kubectl']:.2f}, kubectl / floor = {r['kubectl/floor']:.2f}, no-op / apply = "
        f"{r['noop/apply']:.2f}, heal p50 / heal floor p50 = {_ratio(r, 'heal p50/floor p50')}, heal p99 / heal "
        f"floor p99 = {_ratio(r, 'heal p99/floor p99')}.",
        "",
        "## A real release",
        "",
        *_release(results),
        "",
        "## Against the floor of issue 26",
        "",
        *_against_floor(results),
        "",
        "## Where the time and the CPU go",
        "",
        *_time_and_cpu(results),
        "",
        "## Before and after",
        "",
        *before_after(before, results),
        "",
        "## Targets",
        "",
        *_targets_table(results),
        "",
        "### Why targets are missed",
        "",
        *_misses(results),
        "",
        "## What the v1.11.0 apply phase waits for (issue 26)",
        "",
        "Measured apart from the runs above (2026-11-28, this machine), from kube-apiserver's audit log and CPU "
        "profiles (`/debug/pprof/profile`) on one control plane, the operator's apply of v1.11.0 beside the floor's:",
        "",
        "- **kube-apiserver makes new CRDs Established one after another, in the order they were created.** It "
        "sets `NamesAccepted`, then `Established`, on each: 146 status writes of CRDs of about 200 KiB. In the "
        "floor's apply they took 6.4 s (1.2 to 7.6 s after its first write, 47 ms each). In the operator's, whose "
        "first write came 6.0 s after the KfDef was created (the render), they took 8.9 s (7.35 to 16.23 s after the "
        "create, 61 ms each, beside the rest of the apply), and the apply waited for all 70 CRDs: its last write, "
        "the admission objects, was answered at 16.27 s. The floor waits for no CRD but those its custom resources "
        "need.",
        "- **Sending every CRD sooner did not move that end.** With all 70 sent at once alongside the first stage, "
        "every CRD had arrived 7.0 s after the create instead of 7.9 s, and the last was still Established 9.2 s "
        "later: 4 operator applies took 15.9 to 16.5 s against 15.7 to 16.8 s before. Not kept.",
        "- **What moved it: the CRDs of kinds the set has objects of go first, the others after them, not waited "
        "for** (their `Established` counts towards `Ready`, as a Deployment's availability does). kube-apiserver "
        "then establishes the CRDs the custom resources need before the others, and the apply ends with its last "
        "object. A/B on this machine, a fresh control plane per session, 6 applies of v1.11.0 each: 16.1 -> 12.4 s "
        "(medians), the apply phase 10.45 -> 6.47 s.",
        "- **The operator's watches cost kube-apiserver nothing measurable.** Floor applies of v1.11.0 with and "
        "without a cluster-wide JSON watch of each of its 20 built-in kinds (CRDs included), interleaved, 4 each: "
        "8.47 and 8.32 s (medians), kube-apiserver 12.0 CPU-s both. Kind by kind, the operator writes what the floor "
        "writes (the floor adds some 1,500 retries of custom resources whose kind is not served yet).",
        "- **In the CPU profiles** kube-apiserver used 15.3 CPU-s during the operator's 17 s (render included) "
        "against 13.1 during the floor's 9 s; of the difference, 0.7 s went to encoding watch events (the "
        "operator's watch of CRDs receives each CRD status write whole) and 0.7 s to serving lists.",
        "",
        "## Where the heal tail came from (issue 26)",
        "",
        "Measured apart from the runs above (2026-11-29, this machine), with `python -m bench.memory --rounds 0` on "
        "a fresh control plane per session, kube-apiserver's audit log, and the times at which the operator read "
        "each DELETED event and sent its POST:",
        "",
        "- **The operator's own part of a heal is about a millisecond.** Its watch read the DELETED event a median "
        "1 ms after the benchmark's DELETE returned and the POST left 0.2 ms later. kube-apiserver received the "
        "operator's create 3.4 ms (median; p99 10.1) after it had answered the delete and answered it 3.1 ms later; "
        "the floor's create 2.5 ms (p99 6.0) after, answered 2.8 ms later.",
        "- **A 50 ms pause between trials made each heal share the cluster with the last one's cascade:** the new "
        "Deployment's ReplicaSet, Pod, binding, status updates, Endpoints and EndpointSlices, some 30 writes over "
        "100 ms. Two sessions back to back, 50 heals each: with the pause, p99 55.3 ms (floor 50.7); with 1 s "
        "instead, 13.8 ms (floor 9.8). A trial now starts once the last healed Deployment is available again (and "
        "the KfDef reports every object ready), a condition rather than a pause.",
        "- **The measuring process's garbage collector was once counted as a heal:** the operator's create was "
        "answered 15 ms after the delete, and the benchmark read it at 68.6 ms, at the end of a 60.7 ms collection "
        "of its own heap. The collector is now held off while a heal is timed.",
        "- **With 50 heals the nearest-rank p99 is the slowest heal**; 100 make it the second slowest.",
        "- **Paced so, 3 sessions of 100 heals:** operator p99 18.0, 27.6, 20.3 ms (p50 7.2, 7.8, 7.0); floor "
        "p99 13.9, 17.3, 16.7 ms (p50 5.6, 5.4, 5.2). In the operator's slowest heals the POST reached "
        "kube-apiserver 3 to 10 ms after it was sent: the 2 cores were busy more than half the time (over 26.5 s of "
        "heals kube-apiserver used 16.5 CPU-s, kube-controller-manager 4.6, etcd 3.9, kwok 1.3, kube-scheduler 1.2, "
        "the operator 1.35).",
        "- **Not the connection pool, nor a collector:** in a fourth session (p99 17.0 ms, floor 10.0) the operator "
        "opened no new connection while its heals were timed (aiohttp's connection set-up logged: a new TLS "
        "connection costs 5 to 15 ms here), and no process had a collection of over 0.5 ms within 30 ms of any of "
        "its three slowest heals. Every loop step of the operator's heals, logged with its wall and CPU time over "
        "100 heals: p50 0.1 ms, p98 1.4 ms, at most 6.7 ms of wall for 0.3 ms of CPU: when a step is slow, the "
        "process was waiting for a core, not working.",
        "- **Sessions of 100 heals with this code (2026-11-29):** the full runs at c74e830 and a434989, operator "
        "p99 13.5 and 15.4 ms (floor 16.3 and 13.4); seven sessions of `bench.memory` alone, its heals right after "
        "the deploy and the no-op restart, 20.3 to 26.7 ms (median 22.4; floor 10.9 to 25.6, median 18.2; p50 6.1 "
        "to 7.7 against 4.1 to 5.3), and one more with connection logging, 17.0 (floor 10.0); three with 30 s of "
        "rest before the heals, 22.0, 16.2 and 19.8 ms (floor 13.3, 13.1, 9.7). The floor itself went over 20 ms "
        "in 3 of the 13 sessions: one run of 100 heals lands on either side of the target.",
        "- **The operator's own status writes made a fifth of kube-apiserver's garbage during the heals.** A heal "
        "changes readiness, so the KfDef's status is written (some 35 times per 100 heals, the status refresher "
        "coalescing), and kube-apiserver decodes, prunes, validates and re-encodes the whole KfDef each time: 52 KB, "
        "most of it the inventory of 595 objects, then an object per entry. kube-apiserver's allocation profile "
        "(`/debug/pprof/allocs`, before and after 100 heals and their floor's): 3.04 GB allocated, 627 MB of it by "
        "KfDef status writes, 352 MB decoding etcd's watch events; its CPU profile over 12 s of those heals: 8.6 "
        "CPU-s, 1.40 of it in the collector's mark workers, 0.53 in KfDef status writes. With the inventory as "
        "strings (see the status write section: 12.4 ms of CPU per write instead of 42.7): 2.15 GB, 124 MB and "
        "93 MB; 6.8 CPU-s, 0.96 and 0.09. With 2 cores, kube-apiserver's collector is what the slowest heals "
        "met (`GODEBUG=gctrace=1`, one session): its mark phases (0.3 to 0.6 s each, about every second, "
        "some 0.3 CPU-s each) overlapped 24 % of the heals, and the two slowest of the operator's and three of the "
        "four slowest of the floor's.",
        "- **A/B of the inventory format, 4 sessions each, interleaved (2026-11-29):** strings p99 22.1, 15.0, 22.7, "
        "19.7 ms, objects 26.1, 26.3, 20.3, 23.9 ms; the 400 heals of each pooled: p99 22.1 against 26.1 ms, 7 "
        "heals over 20 ms against 11 (the floor's pooled p99 17.6 and 16.6 ms, 3 and 4 over 20 ms). Kept. The full "
        "run at f27c9d7 that followed: p99 23.0 ms, 4 heals over 20 ms (floor 13.9 ms, none).",
        "- **The status write of one heal landed in a later heal (2026-11-29).** The operator writes a heal's "
        "status once its refresher's coalescing window (0.2 s) has passed since the heal's first event. Trials "
        "started some 50 ms apart (the last healed Deployment available, the KfDef's latest status whole: still "
        "the one before the heal, that write not yet due), so the write met kube-apiserver during the heal two "
        "trials later, at 10 to 12 ms of its CPU on 2 cores. In one session's audit log 4 of the operator's heals "
        "overlapped a KfDef status write, the two slowest among them (24.1 and 17.1 ms), and 4 of the floor's. "
        "A trial now also starts no sooner than `TRIAL_SPACING_S` (0.3 s: that window and 0.1 s) after the last "
        "delete. A/B, 3 interleaved sessions of 100 heals each: operator p99 25.4, 19.7, 23.0 ms before, 18.1, "
        "13.2, 13.5 after (floor 12.0, 19.0, 13.8 before, 7.1, 11.0, 8.4 after); the 300 heals of each pooled: "
        "p99 25.0 against 13.8 ms, 6 heals over 20 ms against none (floor 15.6 against 9.7). A fourth session "
        "with the spacing: p99 13.1 ms (floor 8.4), 10 KfDef status writes in the whole session (55 before), "
        "none overlapping a heal. The full run at 98233ef that followed: p99 11.9 ms (p50 6.48; floor 12.4 and "
        "4.89), no heal over 20 ms.",
        "- **Tried and not kept, no difference beyond that spread:** aiohttp handing out the most recently used "
        "idle connection instead of the oldest (p99 median 20.2 ms over 6 sessions against 22.4 over 7), and the "
        "heal's Event posted 50 ms after the heal instead of at once (p99 median 20.1 ms over 4 sessions; p50 "
        "6.25 against 6.7).",
        "- **Tried and not kept: a full collection and `gc.freeze()` at the end of each reconcile,** so that the "
        "operator's automatic full collections (8 to 14 ms at rest with the synthetic stack, up to 37 ms during its "
        "apply, the event loop stopped meanwhile) would walk only what was allocated since. Over 100 heals no "
        "automatic full pass of more than 1.5 ms was left (one of 8 ms before), but the heal p99 did not move beyond "
        "the cluster's noise (22.2 ms with it, 20.6 without, one session each), and with 300 KfDefs on one operator "
        "(`bench.ha`'s unsharded run) a full collection after every reconcile starved the event loop: the leader "
        "lease was lost 4 times in 3 minutes (renew deadline 10 s) and the run had not ended after 11 minutes, "
        "where it takes 1.",
        "",
        "## What a status write costs kube-apiserver (issue 26)",
        "",
        *_status_write(results),
        "",
        "## The render before and after the render helper (issue 23)",
        "",
        "Measured apart from the runs above (they predate it), on Kubeflow v1.11.0's `example/` (653 objects), the "
        "medians of 5 interleaved runs on this machine, each run checking that both give the same objects: the "
        "operator renders through `kfdef-render` (kustomize's own API on a confined filesystem, answering JSON) "
        "where it ran the pinned `kustomize build` and parsed its YAML.",
        "",
        *table(["render of v1.11.0 `example/`", "build", "reading its output", "whole"], [
            ["before: `kustomize build` (9.8 MB of YAML, libyaml)", "7.54 s", "3.00 s", "10.5 s"],
            ["after: `kfdef-render build` (4.7 MB of JSON)", "5.88 s", "0.17 s", "6.05 s (0.58 x)"]]),
        "",
        "## Findings of issue 18",
        "",
        "- **The CRD that took over 60 s to go** (`customresourcecleanup.apiextensions.k8s.io`) had two causes. "
        "(1) kube-apiserver deletes a CRD only after every object of its kind is gone; its finalizer deletes the "
        "remaining objects, then re-checks every 5 s. One object with a finalizer whose controller is gone holds the "
        "CRD for ever, and the teardown deleted the controllers (the Deployments) before the CRDs: it now deletes "
        "the CRDs right after the custom resources, while the controllers run. (2) A CRD deleted seconds after its "
        "creation: the finalizer's cleanup fails (`could not list instances: storage is (re)initializing`) and "
        "its immediate retry can read a cached copy one version behind, take the conflict for someone else's change "
        "and drop the CRD; the change it then sees differs only in the `Terminating` condition, which it ignores, "
        "so the CRD stays until the informer's resync, 5 minutes later (k8s.io/apiextensions-apiserver v0.36.4, "
        "`pkg/controller/finalizer`). A benchmark run saw it: 16 of 22 CRDs deleted by the kubectl baseline failed "
        "once, one of them stayed 4.5 minutes. The teardown now touches such a CRD after 2 s (an annotation of the "
        "operator's, which queues it again), and so do the benchmark's own deletions. The profiler also gave up "
        "after one run of the teardown, where the operator retries with its delays: it now runs the teardown again "
        "until the KfDef is gone. (It also raced a standby preparation rendering into the same directory, since "
        "fixed.)",
        "- **The teardown waited for the Namespaces' fixed delay after everything else**: kube-controller-manager "
        "starts to empty a deleted namespace only 5 s after its deletion (`namespaceDeletionGracePeriod`), and the "
        "last wave sent the Namespaces' deletes last, after some 480 others, each preceded by a GET (a CRD's GET "
        "returned its whole schema). The Namespaces now go first in that wave, an object the watch cache shows as "
        "the stack's is deleted without a GET (uid and resourceVersion preconditions guard against a stale cache), "
        "and the waits wake on watch events instead of polling every 0.5 s. The operator cannot overlap the CRDs' "
        "wave with the Namespaces' delay as the floor does: the Namespaces hold the controllers that custom "
        "resources may still need.",
        "- **The no-op restart's writes were other clients' Events**: kube-apiserver's audit log tells clients "
        "apart by user agent; the operator wrote nothing on restart or at rest, the Events came from cluster "
        "components (`noop.writes`, `idle.writes`). The write targets now count the operator's writes.",
        "- **Where the CPU goes**: the benchmarks read every process's CPU time per path (*Where the time and the "
        f"CPU go*): the floor's apply alone keeps {_floor_cores(results)} of the "
        f"{meta['machine']['cores']} cores busy, so the operator's render (kustomize, then the YAML it prints "
        "parsed) cannot hide behind kube-apiserver's work; for v1.11.0 the CPU alone ruled out issue 18's 1.15 x "
        "and 0.35 x targets, which left the render out of the floor and of kubectl's figure (issue 26 counts "
        "kustomize alone in both).",
        "- **Ten times the workload never finished before**: the operator's watches (one per kind; 114 at 10x) "
        "shared the requests' connection pool of 64, so every request waited for a connection until it timed out "
        "and the status was never written (`StatusNotWritten` once a minute). Watches now have a pool of their own.",
        "- **Lookups of custom resources right after their CRD was created** waited 1 s each: kube-apiserver answers "
        "429 (`storage is (re)initializing`) with `Retry-After: 1`. A kind whose CRD the apply itself created has no "
        "objects, so its objects are no longer looked up.",
        "- **The heal's tail was the garbage collector**: a stack's desired state was kept as dicts (v1.11.0: 22 MiB, "
        "35,000 containers), and each full collection of the process walked them with every module's objects, 30 "
        "to 40 ms during which no heal ran. Desired states are now kept as compact JSON, decoded per read, and the "
        "objects of the operator's start are frozen out of the collector's passes. Heal p99 was 80.7 ms before; "
        "in two full runs after, 34.9 and 56.0 ms (p50 7.56 and 17.7 ms: everything in the second run was slower, "
        "kubectl's apply included), so one slow heal in 50 still decides the p99 on these 2 shared cores.",
        "- **kopf streamed every CRD of the cluster** to notice kinds it might serve, decoding each in full on every "
        "change (70 in v1.11.0, hundreds of KiB each; 14.7 MiB of them held at rest) and re-reading discovery for "
        "its group. It serves the KfDef CRD alone, and now watches only that one (a field selector): RSS with "
        "v1.11.0 at rest 177 -> 155 MiB in a probe of the release alone.",
        "- **kustomize spends much of its CPU in Go's garbage collector** on v1.11.0's `example/`: it runs with "
        "`GOGC=400` and `GOMEMLIMIT=256MiB`, 0.9 x the build time at the same peak memory (about 275 MiB). These "
        "benchmarks ran with the soft limit at 512 MiB (0.83 x the render time, median of 4), which held 500 MiB: "
        "more than deploy/'s 512 MiB container has beside the operator, so the shipped setting trades that speed "
        "for memory.",
        "",
        "## What each figure measures",
        "",
        "- `apply.operator_s`: from the KfDef create call returning until the KfDef's status reports every object "
        "applied (`summary.applied == summary.total`, `Reconciling=False`), seen on a watch. Includes fetching the "
        "tarball over HTTP and rendering with kustomize. `apply.operator_ready_s`: until `Ready=True` (Deployments "
        "Available).",
        "- `apply.kubectl_ssa_s`: `kubectl apply --server-side --force-conflicts -f rendered.yaml` (custom resources "
        "fail), `kubectl wait --for condition=established crd -l <run label>`, the same apply again. Rendering "
        "(`render.s`, `kfdef-operator build`) is not included.",
        "- `apply.floor_s`: every rendered object server-side applied at once "
        f"({results['apply.floor_s']['concurrency']}"
        " in flight) through the operator's own client, 404s (namespace or CRD not there yet) retried every 20 ms; "
        "no stages, no waits.",
        "- `apply.render_floor_s`, `release.apply.render_floor_s`: the pinned kustomize CLI (`kustomize build`, the "
        "version the render helper embeds) building the trees the operator's render builds for the same KfDef, one "
        "per application, as many at a time as the operator renders applications, output discarded: the least a tool "
        "rendering with kustomize needs before its first object. The trees come from the operator's own render "
        "run in the benchmark (`bench/baselines.py`), timed apart; no operator runs meanwhile. Measured in each "
        "round beside the floor.",
        "- `apply.apply_phase_s`, `release.apply.apply_phase_s`: the operator's first apply from its first write of "
        "a stack object (request received) to its last one answered, read from kube-apiserver's audit log (the "
        "operator's user agents; KfDefs, Events, Leases, subresources and dry runs aside; writes received before "
        "the status said every object was applied). The `apply` step of `apply.steps` also holds the reads before "
        "the first write and the status write after the last.",
        "- `noop.*`: the operator restarted with the stack deployed. `noop.s`: from the new process answering "
        "`/readyz` until its resume reconcile succeeded (`kfdef_reconcile_duration_seconds_count{result=\"success\"}`);"
        " `noop.restart_s` includes the process start; `noop.reconcile_s` is the reconcile's own duration. "
        "`noop.writes` counts the operator's write requests of any resource (its own client's and kopf's, told "
        "apart by user agent in kube-apiserver's audit log; dry runs and Leases aside) over the restart and 2 s "
        f"after; its own client counted {noop['operator_client']} writes. Other clients wrote "
        f"{noop['others']} in the same windows (the stacks' objects, KfDefs and Events by anyone, from "
        f"`apiserver_request_total`: {noop['server_stack_writes']}).",
        "- `apply.steps`, `release.apply.steps`: the first arrival, on the watch of KfDefs, of each `Reconciling` "
        "reason the operator writes (`FetchingSources`, `Rendering`, `Applying`), between the create call "
        "returning and every object applied.",
        "- `cpu`, `release.cpu`: user and system CPU seconds (`/proc/<pid>/stat`) of etcd, kube-apiserver, "
        "kube-controller-manager, kube-scheduler, kwok and the operator (with the render processes and kustomize "
        "runs it waited for), read before and after each apply and teardown; kubectl's own process is not counted.",
        "- `heal.*`: see `bench/heal.py`; Deployment heals measured on a watch "
        f"({results['heal.p50_ms']['resolution']}). `heal.floor_*`: the heal floor, the same measurement of copies of "
        "the same Deployments (a label of their own in their selector) that a watch in the measuring process puts "
        "back with one POST as soon as their DELETED event is read, each trial right after one of the operator's. "
        "A trial starts once the last one's Deployment is available again (after the operator's, once its KfDef "
        "reports every object ready too), so that each heal shares the cluster with its own delete's cascade only; "
        "the measuring process's garbage collector is held off while a heal is timed. p99 is nearest-rank: of 100 "
        "heals, the second slowest.",
        "- `teardown.s`: from the KfDef delete call returning until the KfDef is gone and no object of any kind in "
        "the workload carries its instance label (cluster-scoped ones included).",
        "- `teardown.floor_s`: every object of the workload deleted at once (48 in flight, background propagation) "
        "through the operator's client, until each object deleted is gone (GET polled every 50 ms; an aggregated "
        "ClusterRole that kube-controller-manager re-creates counts as gone once the one deleted is).",
        "- `release.noop.writes`, `idle.*`, `idle.writes`: the v1.11.0 release and a synthetic stack deployed "
        "together, the operator restarted (its resume reconcile of both is the no-op), then left at rest. "
        "`release.rss_mb`: the operator's VmRSS 5 s after the release alone was Ready (first apply). "
        f"`idle.writes` counts the operator's writes (audit log, as for `noop.writes`): "
        f"{results['idle.writes']['by_request'] or 'none'}; its own client sent "
        f"{sum((results['idle.requests_per_min']['by_verb'] or {}).values())} requests at rest. Other clients "
        f"wrote {results['idle.writes']['others'] or 'nothing'} (Events of the release's simulated pods, and "
        "the cluster components' own objects).",
        f"- `idle.*`: operator at rest with both stacks deployed, over {idle['window_s']:.0f} s: its own requests by "
        f"verb {idle['by_verb'] or '{}'} (watches are not requests here); all clients' reads of the stack's resources "
        f"on the server: {idle['server_reads_per_min_all_clients']:.1f}/min. Open watches of the operator (server "
        f"gauge, operator up minus down): {results['idle.watches']['value']} "
        f"({', '.join(f'{k}: {v}' for k, v in results['idle.watches']['by_resource'].items())}).",
        "",
        *replicas_and_shards(results),
        "## Growth with objects",
        "",
        *_sweep(results),
        "",
        "Operator memory:",
        "",
        *_memory(results),
        "",
        "![benchmarks](benchmarks.png)",
        "",
        "## Profile of the apply path",
        "",
        *_profile(results.get("profile")),
        "",
    ]
    return "\n".join(lines)
