"""The targets met and missed, and why each missed one is missed, with the numbers of the session."""

from __future__ import annotations

from collections.abc import Set

from ..profile_steps import KUSTOMIZE, RENDER_STEP, STATUS_WRITES, WATCHES
from ..results import Results, SweepPoint, Workload
from ..tables import fmt, table

_RESULT = {True: "**met**", False: "**missed**", None: "not measured"}


def targets(results: Results) -> list[str]:
    rows = [[row.target, "-" if row.measured is None else fmt(row.measured),
             "-" if row.limit is None else fmt(row.limit), _RESULT[row.met], row.note] for row in results.targets]
    return ["## Targets", "", *table(["target", "measured", "limit", "result", "note"], rows), "",
            "### Why targets are missed", "", *misses(results)]


def misses(results: Results) -> list[str]:
    """A note on each missed target, by the first word of the target (its figure, or ``scale:``)."""
    missed = {row.target.split(" ")[0] for row in results.targets if row.met is False}
    notes = [*_apply(missed), *_teardowns(results, missed), *_memory(missed), *_heal(results, missed),
             *_noop_writes(results, missed), *_sweep_failures(results), *_noop(results, missed),
             *_scale(results, missed), *_upgrade(results, missed)]
    return notes or ["Every target is met."]


def _apply(missed: Set[str]) -> list[str]:
    if not missed & {"apply.operator_s", "release.apply.operator_s", "release.apply.apply_phase_s"}:
        return []
    return [
        "- **apply against the floors**: *Against the floor of issue 26* splits the operator's time beyond "
        "kustomize alone plus the raw apply into the time until its first object, the apply phase and the "
        "rest; *Where the time and the CPU go* has the CPU of each process. A KfDef of one application is one "
        "`kustomize build`, whose output comes only when it exits, so nothing can be applied before it; "
        "applying a KfDef's other applications while the last ones render would also apply part of a KfDef "
        "whose render then fails, where today nothing changes until every application renders."]


def _teardowns(results: Results, missed: Set[str]) -> list[str]:
    notes = []
    for label, target, workload in (("synthetic", "teardown.s", results.synthetic),
                                    ("v1.11.0", "release.teardown.s", results.release)):
        if target not in missed:
            continue
        waves = _teardown_waves(workload)
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
    return notes


def _teardown_waves(workload: Workload) -> str:
    """The operator's teardown waves (medians over the runs): what each deleted and how long it took; empty when
    the runs had different waves."""
    runs = [run for run in workload.teardown_waves if run]
    if not runs or len({len(run) for run in runs}) != 1:
        return ""
    waves = []
    for index, wave in enumerate(runs[0]):
        done = sorted(run[index].done_s for run in runs)[len(runs) // 2]
        kinds = wave.kinds if len(wave.kinds) <= 3 else (*wave.kinds[:3], "...")
        waves.append(f"{wave.objects} ({', '.join(kinds)}) {fmt(done)} s")
    return "; ".join(waves)


def _memory(missed: Set[str]) -> list[str]:
    if "release.rss_mb" not in missed and "memory" not in missed:
        return []
    return [
        "- **memory**: besides its code (69 MiB at start), the operator at rest holds one connection per "
        "watched kind (HTTP/1.1 watches cannot share one; each reads through a 64 KiB TLS buffer, asyncio's "
        "default being 256 KiB), the request pool's idle connections for aiohttp's 15 s keep-alive, the desired "
        "states as compact JSON (4.5 MiB for v1.11.0), the watch caches' summaries, and heap that the allocator "
        "keeps after the apply's peak. See also the table under *Growth with objects*."]


def _heal(results: Results, missed: Set[str]) -> list[str]:
    if "heal.p99_ms" not in missed:
        return []
    heal = results.heal
    slowest = sorted(heal.p50.samples)[-3:]
    return [
        f"- **heal.p99_ms**: the slowest heals took {', '.join(fmt(x) for x in slowest)} ms against a median "
        f"of {fmt(heal.p50.value)} ms: the heal is one POST (the watch's DELETED event "
        f"starts it, no GET first), so the tail is kube-apiserver and the operator waiting for one of the 2 "
        f"cores that the cluster's components share with them while the delete's cascade runs."
        f"{_heal_floor(results)}{_heal_writes(results)}"]


def _heal_floor(results: Results) -> str:
    """The heal floor's percentiles beside the operator's, as a sentence (none for results that predate it)."""
    heal = results.heal
    if heal.floor_p50 is None or heal.floor_p99 is None:
        return ""
    slowest = sorted(heal.floor_p99.samples)[-3:]
    return (f" The heal floor (a copy of each Deployment put back by a bare watch that POSTs it, interleaved with "
            f"the operator's trials) took p50 {fmt(heal.floor_p50.value)} ms and p99 "
            f"{fmt(heal.floor_p99.value)} ms (slowest {', '.join(fmt(x) for x in slowest)} ms) "
            f"on the same cluster at the same time: the operator's p99 is "
            f"{heal.p99.value / heal.floor_p99.value:.2f} x the floor's.")


def _heal_writes(results: Results) -> str:
    """What the clients wrote during the Deployment heals (kube-apiserver's audit log), as a sentence; the heal
    floor's trials, when measured, ran between them (its writes are the benchmark's own, ``Python``)."""
    heal = results.heal
    by_client = heal.writes_by_client
    if not by_client:
        return ""
    totals = {client: sum(requests.values()) for client, requests in by_client.items()}
    operator = by_client.get("operator", {})
    others = sorted(((n, c) for c, n in totals.items() if c != "operator"), reverse=True)
    n = heal.p99.n
    heals = f"{n} heals and the heal floor's {n}" if heal.floor_p99 is not None else f"{n} heals"
    return (f" During the {heals} the operator wrote {totals.get('operator', 0)} requests "
            f"({', '.join(f'{n} {r}' for r, n in sorted(operator.items()))}), the cluster's own components "
            f"{sum(n for n, _ in others)} ({', '.join(f'{c} {n}' for n, c in others)}): the deletes' cascade "
            f"and the new objects' ReplicaSets, Pods and status, on the same kube-apiserver.")


def _noop_writes(results: Results, missed: Set[str]) -> list[str]:
    if "noop.writes" not in missed:
        return []
    return [f"- **noop.writes**: the operator's writes per restart were {results.noop.by_request} "
            f"(other clients: {results.noop.others})."]


def _sweep_failures(results: Results) -> list[str]:
    return [f"- **sweep at x{fmt(failure.scale)} not measured**: {failure.error[:300]}... "
            "(the embedded control plane's Service IP range holds fewer Services than that workload has; "
            "the operator reported it as Degraded, as it should)." for failure in results.sweep_failures]


def _noop(results: Results, missed: Set[str]) -> list[str]:
    """Where the no-op of a restarted operator spends its time, from the profile (when it ran); the render step is
    left out for profiles that predate its label."""
    profile = results.profile
    if "noop.s" not in missed or profile is None:
        return []
    steps = profile.noop.steps_s
    if WATCHES not in steps or STATUS_WRITES not in steps:
        return []
    render = (f"goes through its render step again ({fmt(steps[RENDER_STEP])} s, of which {fmt(steps[KUSTOMIZE])} s "
              f"in kustomize: none when the render cache on disk holds this KfDef's render of the same sources), "
              if RENDER_STEP in steps and KUSTOMIZE in steps else "")
    return [
        f"- **noop.s**: a restarted operator has no desired state in memory, so the no-op {render}restarts a watch "
        f"per kind with a list ({fmt(steps[WATCHES])} s) and writes status ({fmt(steps[STATUS_WRITES])} s) before "
        f"it can tell that every digest matches. Its {profile.noop.requests_by_verb.get('GET', 0)} GETs are those "
        f"lists and an Established check of every CRD (unchanged CRDs are polled too); no object is written."]


def _scale(results: Results, missed: Set[str]) -> list[str]:
    if "scale:" not in missed:
        return []
    per_object = ", ".join(f"{fmt(p.applied_s / p.objects * 1000)} ms at x{fmt(p.scale)}" for p in results.sweep)
    return [f"- **scale**: time per object is {per_object}.{_sweep_floor(results.sweep)}"]


def _sweep_floor(points: tuple[SweepPoint, ...]) -> str:
    """What the floor measured at the sweep's sizes says of the growth per object."""
    floors = [(p, p.floor_s) for p in points if p.floor_s is not None]
    if len(floors) < 2:
        return ""
    ratios = [p.applied_s / floor for p, floor in floors]
    text = (" The floor, a workload of the same size applied at once, took "
            + ", ".join(f"{fmt(floor / p.objects * 1000)} ms per object at x{fmt(p.scale)}" for p, floor in floors)
            + f"; operator / floor {', '.join(f'{r:.2f}' for r in ratios)}")
    if ratios[-1] <= ratios[0] * 1.1:
        return text + (": the growth per object is kube-apiserver's (its work per CRD grows with the CRDs already "
                       "installed: each CRD change rebuilds the OpenAPI documents of all of them), not the operator's.")
    return text + ": the operator's time grows faster than the floor's."


def _upgrade(results: Results, missed: Set[str]) -> list[str]:
    """What the upgrade does beyond a fresh deploy, from its first round (``bench/upgrade.py``)."""
    upgrade = results.upgrade
    if "upgrade.ready_s" not in missed or upgrade is None:
        return []
    if upgrade.failures:
        return [f"- **upgrade.ready_s**: {len(upgrade.failures)} of {len(upgrade.rounds)} upgrades were not Ready in "
                "time; *Day 2* has each one's KfDef status."]
    if not upgrade.rounds or upgrade.applied is None:
        return []
    first = upgrade.rounds[0]
    fresh = ("" if upgrade.fresh_applied is None
             else f" against the fresh deploy's {fmt(upgrade.fresh_applied.median)} s")
    failures = (f"; {len(first.first_apply_failures)} objects failed in that first apply and were applied by the next "
                "run, after the retry backoff" if first.first_apply_failures else "")
    return [
        f"- **upgrade.ready_s**: the upgrade's first apply took {fmt(upgrade.applied.median)} s (median){fresh}. "
        f"Beyond what a fresh deploy does, in round 1 it re-created {len(first.recreated)} objects for an immutable "
        f"field (each deleted and waited on until gone, then created again), migrated the stored versions of "
        f"{len(first.migrated)} CRDs ({sum(first.migrated.values())} objects rewritten, each CRD applied with both "
        f"versions served first) and pruned {first.pruned.get('deleted', 0)} objects of v1.2.0{failures}. "
        "See *Day 2*."]
