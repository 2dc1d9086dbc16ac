"""``docs/benchmarks.md``: readable tables of one session's results (generated; edit bench/, not the page)."""

from __future__ import annotations

from typing import Any

from .ha import markdown as replicas_and_shards
from .report import HEADLINE_KEYS, _fmt

JSON = dict[str, Any]



def _custom_step(steps: dict) -> float:
    """The custom resources' step of a profile (named after the whole set's CRD wait before per-CRD barriers)."""
    return float(steps.get("custom resources, each after its CRD's Established wait",
                           steps.get("wait for CRDs Established", 0.0)))

def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def _results_table(results: JSON) -> list[str]:
    rows = []
    for key in HEADLINE_KEYS:
        entry = results.get(key)
        if not entry:
            continue
        earlier = f" (session of {entry['session']}, not re-run)" if entry.get("session") else ""
        rows.append([f"`{key}`", _fmt(entry["value"]), _fmt(entry["median"]), _fmt(entry["min"]), _fmt(entry["max"]),
                     str(entry["n"]), entry["unit"] + earlier])
    return _table(["figure", "value", "median", "min", "max", "n", "unit"], rows)


def _targets_table(results: JSON) -> list[str]:
    rows = []
    for row in results["targets"]:
        met = {True: "**met**", False: "**missed**", None: "not measured"}[row["met"]]
        measured = _fmt(row["measured"]) if "measured" in row else "-"
        limit = _fmt(row["limit"]) if "limit" in row else "-"
        rows.append([row["target"], measured, limit, met, row["note"]])
    return _table(["target", "measured", "limit", "result", "note"], rows)


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
    rows = [[_fmt(p["scale"]), str(p["objects"]), _fmt(p["applied_s"]), _fmt(p["objects_per_s"]),
             _fmt(p["applied_s"] / p["objects"] * 1000)]
            for p in sorted(results["scale.sweep"], key=lambda p: p["objects"])]
    many = results.get("scale.kfdefs_s") or {}
    if many.get("objects"):
        rows.append([f"{many['kfdefs']} KfDefs", str(many["objects"]), _fmt(many["median"]),
                     _fmt(many["objects"] / many["median"]), _fmt(many["median"] / many["objects"] * 1000)])
    return _table(["workload", "objects", "seconds (median)", "objects/s", "ms per object"], rows)


def _release(results: JSON) -> list[str]:
    """The real release (bench/release.py): the three paths on the same objects."""
    operator = results.get("release.apply.operator_s")
    if not operator:
        return ["(not run)"]
    rows = [[f"`{key}`", _fmt(results[key]["median"]), _fmt(results[key]["min"]), _fmt(results[key]["max"]),
             str(results[key]["n"])]
            for key in ("release.apply.operator_s", "release.apply.operator_ready_s", "release.apply.kubectl_ssa_s",
                        "release.apply.floor_s", "release.render.s", "release.teardown.s", "release.teardown.floor_s")
            if key in results]
    r = results["ratios"]
    return [f"Kubeflow {operator['release']} (`example/`, plain mode), {operator['objects']} objects: the release "
            f"without its {operator['left_out']} fail-closed webhook configurations (nothing can serve them here) and "
            "with its example Profile named as the kustomize it pins does (`bench/release.py`). Same meaning of each "
            "figure as above; the operator's figure includes fetching the tarball and rendering.", "",
            *_table(["figure", "median s", "min", "max", "n"], rows), "",
            f"Ratios of medians: operator / kubectl = **{r['release operator/kubectl']:.2f}**, operator / floor = "
            f"**{r['release operator/floor']:.2f}**, kubectl / floor = {r['release kubectl/floor']:.2f}"
            + (f", teardown operator / floor = **{r['release teardown operator/floor']:.2f}**"
               if "release teardown operator/floor" in r else "") + "."]


#: Figures compared before and after a change (issue 18): (label, key or ratio name, where).
_COMPARED = (
    ("synthetic: operator apply (s)", "apply.operator_s", "results"),
    ("synthetic: floor apply (s)", "apply.floor_s", "results"),
    ("synthetic: operator / floor", "operator/floor", "ratios"),
    ("synthetic: operator / kubectl SSA", "operator/kubectl", "ratios"),
    ("synthetic: teardown (s)", "teardown.s", "results"),
    ("synthetic: teardown floor (s)", "teardown.floor_s", "results"),
    ("synthetic: teardown operator / floor", "teardown operator/floor", "ratios"),
    ("v1.11.0: operator apply (s)", "release.apply.operator_s", "results"),
    ("v1.11.0: floor apply (s)", "release.apply.floor_s", "results"),
    ("v1.11.0: operator / floor", "release operator/floor", "ratios"),
    ("v1.11.0: operator / kubectl SSA", "release operator/kubectl", "ratios"),
    ("v1.11.0: teardown (s)", "release.teardown.s", "results"),
    ("v1.11.0: teardown floor (s)", "release.teardown.floor_s", "results"),
    ("v1.11.0: teardown operator / floor", "release teardown operator/floor", "ratios"),
    ("no-op restart: writes on the server (max)", "noop.writes", "max"),
    ("no-op restart, both stacks: writes", "release.noop.writes", "results"),
    ("idle, both stacks: writes on the server", "idle.writes", "results"),
    ("idle window (s)", "idle.requests_per_min", "window_s"),
    ("operator RSS, v1.11.0 at rest (MiB)", "release.rss_mb", "results"),
    ("operator RSS, both stacks after restart and idle (MiB)", "idle.rss_mb", "results"),
    ("heal p50 (ms)", "heal.p50_ms", "results"),
    ("heal p99 (ms)", "heal.p99_ms", "results"),
)


def _compared(results: JSON, key: str, where: str) -> str:
    try:
        if where == "ratios":
            return f"{results['ratios'][key]:.2f}"
        if where == "max":
            return _fmt(results[key]["max"])
        if where == "window_s":
            return _fmt(results[key]["window_s"])
        return _fmt(results[key]["value"])
    except (KeyError, TypeError):
        return "-"


def before_after(before: JSON | None, after: JSON) -> list[str]:
    """The headline figures of the session before a change beside this session's (``bench/results-before.json``)."""
    if not before:
        return ["(no results-before.json next to the results)"]
    rows = [[label, _compared(before, key, where), _compared(after, key, where)] for label, key, where in _COMPARED]
    return [f"Before: {before['meta']['date']}, at commit {before['meta'].get('commit', '?')} "
            f"(`bench/results-before.json`); after: this session. Medians; each session on its own control plane.",
            "", *_table(["figure", "before", "after"], rows)]


def _memory(results: JSON) -> list[str]:
    """The operator's resident memory at rest with one KfDef of each sweep size deployed."""
    from .report import rss_points
    points = rss_points(results)
    if not points:
        return ["(not measured)"]
    rows = [[_fmt(p["scale"]), str(p["objects"]), _fmt(p["rss_before_mb"]), _fmt(p["rss_mb"]),
             _fmt(p["growth_per_1000_mb"])] for p in points]
    steps = [f"{_fmt((b['rss_mb'] - a['rss_mb']) / (b['objects'] - a['objects']) * 1000)} MiB per 1,000 objects "
             f"from x{_fmt(a['scale'])} to x{_fmt(b['scale'])}" for a, b in zip(points, points[1:], strict=False)]
    return [*_table(["scale", "objects", "RSS before the KfDef (MiB)", "RSS at rest with it (MiB)",
                     "above the empty operator, per 1,000 objects (MiB)"], rows), "",
            f"The empty operator (before the first sweep KfDef): {_fmt(points[0]['rss_before_mb'])} MiB. "
            f"Growth between sizes: {'; '.join(steps) or '-'}. Memory is read from `/proc/<pid>/status` (VmRSS) "
            f"{_fmt(5.0)} s after the KfDef is Ready; each size is torn down before the next (CPython keeps some "
            "freed memory, so a later size starts from a higher floor)."]


def _profile(profile: JSON | None) -> list[str]:
    if not profile:
        return ["(not run)"]
    apply, noop = profile["apply"], profile["noop"]
    rows = []
    for label in apply["steps_s"]:
        a, n = apply["steps_s"][label], noop["steps_s"][label]
        rows.append([label.replace(" ", "&nbsp;", 2) if label.startswith(" ") else label,
                     _fmt(a), f"{a / apply['reconcile_wall_s'] * 100:.0f} %",
                     _fmt(n), f"{n / noop['reconcile_wall_s'] * 100:.0f} %"])

    def verbs(entry: JSON) -> str:
        return ", ".join(f"{n} {verb}" for verb, n in sorted(entry["requests_by_verb"].items()))

    return [f"`Reconciler` in-process on {profile['objects']} objects (`bench/profile_apply.py`): the first "
            f"apply took {_fmt(apply['reconcile_wall_s'])} s wall ({verbs(apply)}; stages "
            f"{', '.join(_fmt(s) for s in apply['stage_s'])} s), the no-op reconcile of a freshly started operator "
            f"{_fmt(noop['reconcile_wall_s'])} s ({verbs(noop)}). Steps overlap with nothing unless said; the apply "
            f"stages include the live-metadata lists. pyinstrument trees: `bench/{apply['pyinstrument_text']}`, "
            f"`bench/{noop['pyinstrument_text']}`.", "",
            *_table(["step", "apply s", "share", "no-op s", "share"], rows)]


def _misses(results: JSON) -> list[str]:
    """Why each missed target is missed, with the numbers of this session."""
    missed = {row["target"].split(" ")[0] for row in results["targets"] if row["met"] is False}
    profile = results.get("profile") or {}
    apply = (profile.get("apply") or {}).get("steps_s", {})
    noop = (profile.get("noop") or {}).get("steps_s", {})
    notes = []
    if ("apply.operator_s" in missed or "release.apply.operator_s" in missed) and apply:
        without = results["apply.operator_s"]["median"] - results["render.s"]["median"]
        notes.append(
            f"- **apply vs floor**: the operator's figure includes fetching and rendering the sources (render "
            f"{_fmt(apply['render (kustomize)'])} s in the profile; `render.s` {_fmt(results['render.s']['median'])} s "
            f"as a separate process, `release.render.s` {_fmt(results.get('release.render.s', {}).get('median', 0))} "
            f"s), which the kubectl and floor figures do not: the render of every application finishes before the "
            f"first object is applied. The apply itself overlaps the CRDs' establishment with the other objects "
            f"(custom resources, each after its own CRD's Established wait, {_fmt(_custom_step(apply))} s in the "
            f"profile, beside the other objects' applies rather than before them); admission objects still wait "
            f"for them, where the floor retries custom resources every 20 ms until their CRD serves them. Without "
            f"fetch and "
            f"render the synthetic apply is {_fmt(without)} s, {_fmt(without / results['apply.floor_s']['median'])} "
            f"x the floor. What remains: the render (applying an application's objects while the others render "
            f"needs the desired state built per application: duplicates and API-version upgrades are decided over "
            f"the whole KfDef today), the status write of the inventory before the first object is created (so "
            f"that a crash never leaves objects the teardown does not know of), and the 2 cores the operator, "
            f"kustomize and kube-apiserver share. v1.11.0 is one application, one `kustomize build`. "
            f"A profiled reconcile of it (pyinstrument, 2026-11-25, d8d6cca; 24.5 s in all, floor 8.4 s): "
            f"fetch 0.67 s, render 9.0 s (measured apart: kustomize 6.2 s, parsing its 9.8 MB of YAML 1.8 s), "
            f"then the apply: its 70 CRDs 3.6 s, their Established wait 8.9 s, the custom resources 0.8 s. "
            f"Fetch and render alone use up the whole 1.15 x budget (9.7 s), so on a release built in one piece "
            f"the target needs objects applied while kustomize still runs, which its single output at exit does "
            f"not allow. The apply itself is also about 1.6 x the floor; during it every watch event of the "
            f"stack's own objects runs the heal's drift check (3.5 s of the event loop in that profile, mostly "
            f"deep copies for stamping and comparisons of CRD schemas), a cost still to be cut.")
    for prefix, label in (("", "synthetic"), ("release.", "v1.11.0")):
        if f"{prefix}teardown.s" in missed:
            notes.append(
                f"- **teardown ({label})**: the operator deletes in waves, each waited on: admission objects, custom "
                f"resources (while their controllers run), CRDs (while the controllers run too: kube-apiserver "
                f"keeps a CRD until every object of its kind is gone, re-checking every 5 s), then the rest with "
                f"the Namespaces; aggregated ClusterRoles one at a time before the roles they draw from (deleted "
                f"together, kube-controller-manager re-creates them). Every delete is preceded by a GET that "
                f"checks the object is the stack's (never delete what it did not create). The floor deletes "
                f"everything at once and takes a re-created aggregated role as deleted.")
    if "release.rss_mb" in missed or "memory" in missed:
        notes.append(
            "- **memory**: besides its code (69 MiB at start), the operator at rest holds the TLS read buffer of "
            "every open connection (asyncio gives each 256 KiB: one connection per watched kind, since HTTP/1.1 "
            "watches cannot share one, and the request pool's idle connections for aiohttp's 15 s keep-alive; "
            "27 MiB over 218 connections in a tracemalloc snapshot with v1.11.0 at rest), the desired states as "
            "compact JSON (4.5 MiB for v1.11.0), the watch caches' summaries, and heap that the allocator keeps "
            "after the apply's peak. See also the table under *Growth with objects*.")
    if "heal.p99_ms" in missed:
        heal = sorted(results["heal.p50_ms"]["samples"])
        notes.append(
            f"- **heal.p99_ms**: the slowest heals took {', '.join(_fmt(x) for x in heal[-3:])} ms against a median "
            f"of {_fmt(results['heal.p50_ms']['value'])} ms: the heal is one POST (the watch's DELETED event "
            f"starts it, no GET first), so the tail is the event loop or kube-apiserver busy with other work on "
            f"the 2 shared cores (the measuring process included).")
    if "noop.writes" in missed:
        writes = results["noop.writes"]["by_request"]
        notes.append(
            f"- **noop.writes**: the writes per restart are {writes}: Events only (who posted them was not "
            f"recorded); no object of the stack and no KfDef was written.")
    for failure in results.get("scale.sweep_failures") or []:
        notes.append(f"- **sweep at x{_fmt(failure['scale'])} not measured**: {failure['error'][:300]}... "
                     "(the embedded control plane's Service IP range holds fewer Services than that workload has; "
                     "the operator reported it as Degraded, as it should).")
    if "noop.s" in missed and noop:
        notes.append(
            f"- **noop.s**: a restarted operator has no desired state in memory, so the no-op re-renders "
            f"({_fmt(noop['render (kustomize)'])} s), restarts a watch per kind with a list "
            f"({_fmt(noop['start watches (list + sync)'])} s) and writes status ({_fmt(noop['status writes'])} s) "
            f"before it can tell that every digest matches. Its "
            f"{(profile.get('noop') or {}).get('requests_by_verb', {}).get('GET', 0)} GETs are those lists and an "
            f"Established check of every CRD (unchanged CRDs are polled too); no object is written.")
    if "scale:" in missed:
        points = sorted(results["scale.sweep"], key=lambda p: p["objects"])
        per_object = ", ".join(f"{_fmt(p['applied_s'] / p['objects'] * 1000)} ms at x{_fmt(p['scale'])}"
                               for p in points)
        notes.append(f"- **scale**: time per object is {per_object}. A likely cause (not verified: the floor was "
                     "only measured at the default size) is kube-apiserver's own work per CRD, which grows with "
                     "the CRDs already installed (each CRD change rebuilds the OpenAPI documents of all of them); "
                     "the x5 workload holds five times the CRDs.")
    return notes or ["Every target is met."]


def render_markdown(results: JSON, before: JSON | None = None) -> str:
    meta, r = results["meta"], results["ratios"]
    noop = results["noop.writes"]
    idle = results["idle.requests_per_min"]
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`python -m bench`; `make bench-quick` for a small run) from `bench/results.json`.",
        "All figures come from one session on one embedded control plane; every scenario ran several times with",
        "fresh names. Targets are those of issue 18 (apply, teardown, writes, memory, heal p99), issue 8 (the rest),",
        "issue 5 (namespace/CRD heals) and issue 16 (replicas and shards).",
        "",
        "## Setup",
        "",
        *_environment(meta),
        "",
        "## Results",
        "",
        *_results_table(results),
        "",
        f"Ratios of medians: operator / kubectl = **{r['operator/kubectl']:.2f}**, operator / floor = "
        f"**{r['operator/floor']:.2f}**, operator Ready / kubectl = {r['operator_ready/kubectl']:.2f}, "
        f"kubectl / floor = {r['kubectl/floor']:.2f}, no-op / apply = {r['noop/apply']:.2f}.",
        "",
        "## A real release",
        "",
        *_release(results),
        "",
        "## Before and after issue 18",
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
        "## Findings of issue 18",
        "",
        "- **The CRD that took over 60 s to go** (`customresourcecleanup.apiextensions.k8s.io`): kube-apiserver "
        "deletes a CRD only after every object of its kind is gone; its finalizer deletes the remaining objects, "
        "then re-checks every 5 s for up to a minute and starts over. One object with a finalizer whose controller "
        "is gone holds the CRD for ever. The operator's teardown deleted the controllers (the Deployments, in the "
        "wave of the rest) before the CRDs, so custom resources nobody listed (those a controller makes) could keep "
        "their finalizers; it now deletes the CRDs right after the custom resources, while the controllers run, and "
        "the rest with the Namespaces in one wave after them. The profiler also gave up after one run of the "
        "teardown, where the operator retries with its delays: it now runs the teardown again until the KfDef is "
        "gone. (It also raced a standby preparation rendering into the same directory, since fixed.)",
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
        "- `noop.*`: the operator restarted with the stack deployed. `noop.s`: from the new process answering "
        "`/readyz` until its resume reconcile succeeded (`kfdef_reconcile_duration_seconds_count{result=\"success\"}`);"
        " `noop.restart_s` includes the process start; `noop.reconcile_s` is the reconcile's own duration. "
        "`noop.writes` counts write requests on the server (`apiserver_request_total`, no dry runs, the stack's "
        "resources except their `status`, `kfdefs` and `events`) over the restart and 2 s after, whoever sent "
        f"them; the operator's own client counted {noop['operator_client']} writes.",
        "- `heal.*`: see `bench/heal.py`; Deployment heals measured on a watch "
        f"({results['heal.p50_ms']['resolution']}).",
        "- `teardown.s`: from the KfDef delete call returning until the KfDef is gone and no object of any kind in "
        "the workload carries its instance label (cluster-scoped ones included).",
        "- `teardown.floor_s`: every object of the workload deleted at once (48 in flight, background propagation) "
        "through the operator's client, until each object deleted is gone (GET polled every 50 ms; an aggregated "
        "ClusterRole that kube-controller-manager re-creates counts as gone once the one deleted is).",
        "- `release.noop.writes`, `idle.*`, `idle.writes`: the v1.11.0 release and a synthetic stack deployed "
        "together, the operator restarted (its resume reconcile of both is the no-op), then left at rest. "
        "`release.rss_mb`: the operator's VmRSS 5 s after the release alone was Ready (first apply). "
        f"`idle.writes` counts every client's writes of the stacks' objects, KfDefs and Events: "
        f"{results['idle.writes']['by_request'] or 'none'} (the operator's own client sent "
        f"{sum((results['idle.requests_per_min']['by_verb'] or {}).values())}"
        " requests at rest; Events of the release's simulated pods are written by cluster components).",
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
