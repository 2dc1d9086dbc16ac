"""Figures derived from one session's results: the targets met or missed, the ratios, the memory growth."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from .results import Figure, Replicas, Results, TargetRow
from .tables import fmt


class NotMeasured(Exception):
    """A target's figure the session does not have (a part it skipped, or results that predate the figure)."""


@dataclass(frozen=True)
class Target:
    """One target of issue 8 (or issue 5), checked against the results."""

    text: str
    measured: Callable[[Results], float]
    limit: Callable[[Results], float]
    strict: bool = False            # measured < limit (else <=)
    unit: str = ""
    #: Why the figure could not be measured because what it times failed (the target is missed), or None.
    failure: Callable[[Results], str | None] = lambda results: None

    def check(self, results: Results) -> tuple[float, float, bool]:
        measured, limit = self.measured(results), self.limit(results)
        return measured, limit, measured < limit if self.strict else measured <= limit


def _figure(results: Results, key: str) -> Figure:
    figure = results.figures.get(key)
    if figure is None:
        raise NotMeasured(key)
    return figure


def _value(key: str) -> Callable[[Results], float]:
    return lambda r: _figure(r, key).value


def _max(key: str) -> Callable[[Results], float]:
    """The largest sample of the figure ``key`` (for targets that hold for every trial)."""
    return lambda r: _figure(r, key).max


def _times(factor: float, *keys: str) -> Callable[[Results], float]:
    """``factor`` times the sum of the figures ``keys``."""
    return lambda r: factor * sum(_figure(r, key).value for key in keys)


def _constant(limit: float) -> Callable[[Results], float]:
    return lambda r: limit


def _per_object_growth(results: Results) -> float:
    """Seconds per object at the largest size over seconds per object at the smallest (1 = linear, no overhead)."""
    if not results.sweep:
        raise NotMeasured("scale.sweep")
    first, last = results.sweep[0], results.sweep[-1]
    return (last.applied_s / last.objects) / (first.applied_s / first.objects)


def _growth_over_floor(results: Results) -> float:
    """The operator's time over the floor's at the largest size measured with a floor, over the same at the
    smallest (1: the operator grows exactly as kube-apiserver's own work does)."""
    points = [(p.applied_s, p.floor_s) for p in results.sweep if p.floor_s is not None]
    if not points:
        raise NotMeasured("scale.sweep floor_s")
    (first_applied, first_floor), (last_applied, last_floor) = points[0], points[-1]
    return (last_applied / last_floor) / (first_applied / first_floor)


@dataclass(frozen=True)
class RssPoint:
    """A sweep size that measured the operator's memory, with its growth above the empty operator."""

    scale: float
    objects: int
    rss_before_mb: float
    rss_mb: float
    growth_per_1000_mb: float       # above the first size's memory before its KfDef, per 1,000 objects


def rss_points(results: Results) -> list[RssPoint]:
    """Sweep points that measured the operator's memory, smallest first, each with its growth above the empty
    operator (the first point's memory before its KfDef) per 1,000 objects."""
    measured = [(p, p.rss_before_mb, p.rss_mb) for p in results.sweep
                if p.rss_before_mb is not None and p.rss_mb is not None]
    if not measured:
        return []
    base = measured[0][1]
    return [RssPoint(scale=p.scale, objects=p.objects, rss_before_mb=before, rss_mb=rss,
                     growth_per_1000_mb=(rss - base) / p.objects * 1000) for p, before, rss in measured]


def _rss_growth(results: Results) -> float:
    """Memory above the empty operator per object at the largest size over the same at the smallest."""
    points = rss_points(results)
    if not points:
        raise NotMeasured("scale.sweep rss_mb")
    return points[-1].growth_per_1000_mb / points[0].growth_per_1000_mb


def _upgrade_failure(results: Results) -> str | None:
    """The upgrades not Ready in time (``bench/upgrade.py``), if any."""
    upgrade = results.upgrade
    if upgrade is None or not upgrade.failures:
        return None
    return f"{len(upgrade.failures)} of {len(upgrade.rounds)} upgrades not Ready in time: see *Day 2*"


def _replicas(results: Results) -> Replicas:
    if results.replicas is None:
        raise NotMeasured("ha., shards.")
    return results.replicas


def _step_downs(results: Results) -> float:
    step_downs = _replicas(results).sharded.step_downs
    if step_downs is None:
        raise NotMeasured("shards.fleet_s step_downs")
    return step_downs


# Issue 26 replaced issue 18's operator-against-floor, teardown, memory and heal targets with tighter ones.
TARGETS = (
    Target("apply.operator_s <= 1.10 x (apply.render_floor_s + apply.floor_s) (issue 26)", _value("apply.operator_s"),
           _times(1.10, "apply.render_floor_s", "apply.floor_s"), unit="s"),
    Target("release.apply.operator_s <= 1.10 x (release.apply.render_floor_s + release.apply.floor_s) (issue 26)",
           _value("release.apply.operator_s"), _times(1.10, "release.apply.render_floor_s", "release.apply.floor_s"),
           unit="s"),
    Target("release.apply.apply_phase_s <= 1.15 x release.apply.floor_s (issue 26)",
           _value("release.apply.apply_phase_s"), _times(1.15, "release.apply.floor_s"), unit="s"),
    Target("release.apply.operator_s <= 0.40 x (release.apply.render_floor_s + release.apply.kubectl_ssa_s) "
           "(issue 26)", _value("release.apply.operator_s"),
           _times(0.40, "release.apply.render_floor_s", "release.apply.kubectl_ssa_s"), unit="s"),
    Target("teardown.s <= 1.3 x teardown.floor_s (issue 26)", _value("teardown.s"), _times(1.3, "teardown.floor_s"),
           unit="s"),
    Target("release.teardown.s <= 1.3 x release.teardown.floor_s (issue 26)", _value("release.teardown.s"),
           _times(1.3, "release.teardown.floor_s"), unit="s"),
    Target("release.rss_mb < 120 (the release at rest; issue 26)", _value("release.rss_mb"), _constant(120.0),
           strict=True, unit="MiB"),
    Target("heal.p99_ms < 20 (issue 26)", _value("heal.p99_ms"), _constant(20.0), strict=True, unit="ms"),
    Target("noop.writes == 0 (the operator's writes of anything, every restart, from kube-apiserver's audit log)",
           _max("noop.writes"), _constant(0.0)),
    Target("release.noop.writes == 0 (both stacks; the operator's writes, audit log; issue 18)",
           _value("release.noop.writes"), _constant(0.0)),
    Target("idle.writes == 0 (both stacks, 5 minutes at rest; the operator's writes, audit log; issue 18)",
           _value("idle.writes"), _constant(0.0)),
    Target("memory per object at the largest size <= at the smallest (no worse than linear; issue 18)",
           _rss_growth, _constant(1.0), unit="x"),
    Target("noop.s <= 0.1 x apply.operator_s", _value("noop.s"), _times(0.1, "apply.operator_s"), unit="s"),
    Target("heal.p50_ms < 100", _value("heal.p50_ms"), _constant(100.0), strict=True, unit="ms"),
    Target("heal.p99_ms < 1000", _value("heal.p99_ms"), _constant(1000.0), strict=True, unit="ms"),
    Target("namespace heal < 10 s (issue 5)", _max("heal.namespace_s"), _constant(10.0), strict=True, unit="s"),
    Target("CRD heal < 10 s (issue 5)", _max("heal.crd_s"), _constant(10.0), strict=True, unit="s"),
    Target("teardown.s < 60", _value("teardown.s"), _constant(60.0), strict=True, unit="s"),
    Target("idle.rss_mb < 150", _value("idle.rss_mb"), _constant(150.0), strict=True, unit="MiB"),
    Target("idle.requests_per_min == 0 beyond open watches", _value("idle.requests_per_min"), _constant(0.0)),
    Target("scale: time per object at the largest size <= at the smallest (no worse than linear)",
           _per_object_growth, _constant(1.0), unit="x"),
    Target("scale: operator / floor at the largest size <= at the smallest (the operator's own growth no worse "
           "than linear; issue 18)", _growth_over_floor, _constant(1.0), unit="x"),
    Target("ha.failover_s <= lease duration + 2 s, every trial (issue 16)", _max("ha.failover_s"),
           lambda r: _replicas(r).lease_duration_s + 2.0, unit="s"),
    Target("ha.handover_s < 2 s, every trial (issue 16)", _max("ha.handover_s"), _constant(2.0), strict=True,
           unit="s"),
    Target("shards: KfDefs not reconciled by exactly their own shard == 0 (issue 16)",
           lambda r: _replicas(r).sharded.kfdefs - _replicas(r).sharded.served_by_its_shard, _constant(0.0)),
    Target("shards: leaders stepping down while the fleet converges == 0 (their renewals kept up under load)",
           _step_downs, _constant(0.0)),
    Target("upgrade.ready_s <= 1.0 x (upgrade.teardown_s + upgrade.fresh_ready_s) (the edit to v1.11.0 no slower "
           "than tearing v1.2.0 down and deploying v1.11.0 afresh; issue 38)", _value("upgrade.ready_s"),
           _times(1.0, "upgrade.teardown_s", "upgrade.fresh_ready_s"), unit="s", failure=_upgrade_failure),
)


def target_rows(results: Results) -> tuple[TargetRow, ...]:
    rows = []
    for target in TARGETS:
        failure = target.failure(results)
        if failure is not None:
            rows.append(TargetRow(target.text, measured=None, limit=None, met=False, note=failure))
            continue
        try:
            measured, limit, ok = target.check(results)
        except (NotMeasured, ZeroDivisionError):
            rows.append(TargetRow(target.text, measured=None, limit=None, met=None, note="not measured"))
            continue
        note = ""
        if not ok:
            over = measured - limit
            note = f"missed by {fmt(over)} {target.unit}".rstrip()
            if limit:
                note += f" ({measured / limit:.2f}x the limit)"
        rows.append(TargetRow(target.text, measured=measured, limit=limit, met=ok, note=note))
    return tuple(rows)


def judged(results: Results) -> Results:
    """The session with its targets checked and its ratios computed (what ``bench/report.py`` writes)."""
    return dataclasses.replace(results, targets=target_rows(results),
                               ratios={**ratios(results), **teardown_ratios(results), **upgrade_ratios(results)})


def ratios(results: Results) -> dict[str, float]:
    def value(key: str) -> float:
        return results.figures[key].value

    operator = value("apply.operator_s")
    return {"operator/kubectl": operator / value("apply.kubectl_ssa_s"),
            "operator/floor": operator / value("apply.floor_s"),
            "operator_ready/kubectl": value("apply.operator_ready_s") / value("apply.kubectl_ssa_s"),
            "kubectl/floor": value("apply.kubectl_ssa_s") / value("apply.floor_s"),
            "noop/apply": value("noop.s") / operator,
            **release_ratios(results), **floor_ratios(results), **heal_ratios(results)}


def upgrade_ratios(results: Results) -> dict[str, float]:
    """The upgrade against the v1.2.0 teardown plus a fresh v1.11.0 deploy (``bench/upgrade.py``), when measured."""
    upgrade = results.upgrade
    if upgrade is None or upgrade.ready is None or upgrade.teardown is None or upgrade.fresh_ready is None:
        return {}
    return {"upgrade/(teardown + fresh)": upgrade.ready.value / (upgrade.teardown.value + upgrade.fresh_ready.value)}


def heal_ratios(results: Results) -> dict[str, float]:
    """The operator's heals against the heal floor's (``bench/heal.py``), when it ran."""
    heal = results.heal
    if heal.floor_p50 is None or heal.floor_p99 is None:
        return {}
    return {"heal p50/floor p50": heal.p50.value / heal.floor_p50.value,
            "heal p99/floor p99": heal.p99.value / heal.floor_p99.value}


def release_ratios(results: Results) -> dict[str, float]:
    """The same ratios for the real release (``bench/release.py``), when it ran."""
    release = results.release
    if release.operator is None or release.kubectl is None or release.floor is None:
        return {}
    operator, kubectl, floor = release.operator.value, release.kubectl.value, release.floor.value
    return {"release operator/kubectl": operator / kubectl, "release operator/floor": operator / floor,
            "release kubectl/floor": kubectl / floor}


#: Workloads by the prefix of their keys, as the ratios name them.
_WORKLOAD_PREFIXES = (("", ""), ("release.", "release "))


def teardown_ratios(results: Results) -> dict[str, float]:
    """Operator teardown over the floor's, per workload measured."""
    found = {}
    for prefix, label in _WORKLOAD_PREFIXES:
        teardown, floor = results.figures.get(f"{prefix}teardown.s"), results.figures.get(f"{prefix}teardown.floor_s")
        if teardown is not None and floor is not None:
            found[f"{label}teardown operator/floor"] = teardown.value / floor.value
    return found


def floor_ratios(results: Results) -> dict[str, float]:
    """The operator against the floor of issue 26 (the kustomize CLI alone, then the raw apply) and against
    kustomize piped to kubectl, and its apply phase against the floor's apply, per workload measured (none for
    results that predate these figures)."""
    found = {}
    for prefix, label in _WORKLOAD_PREFIXES:
        def value(key: str, prefix: str = prefix) -> float:
            return results.figures[f"{prefix}{key}"].value

        if f"{prefix}apply.render_floor_s" in results.figures:
            render_floor, operator = value("apply.render_floor_s"), value("apply.operator_s")
            found[f"{label}operator/(render floor + floor)"] = operator / (render_floor + value("apply.floor_s"))
            found[f"{label}operator/(render floor + kubectl)"] = operator / (render_floor
                                                                             + value("apply.kubectl_ssa_s"))
        if f"{prefix}apply.apply_phase_s" in results.figures:
            found[f"{label}apply phase/floor"] = value("apply.apply_phase_s") / value("apply.floor_s")
    return found
