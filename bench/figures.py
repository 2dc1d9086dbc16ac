"""Figures derived from one session's results: the headline keys, the targets met or missed, the ratios."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .tables import fmt

JSON = dict[str, Any]

HEADLINE_KEYS = ("apply.operator_s", "apply.operator_ready_s", "apply.kubectl_ssa_s", "apply.floor_s",
                 "apply.render_floor_s", "apply.apply_phase_s", "render.s",
                 "noop.writes", "noop.s", "noop.restart_s", "noop.reconcile_s", "heal.p50_ms", "heal.p99_ms",
                 "heal.floor_p50_ms", "heal.floor_p99_ms", "heal.namespace_s", "heal.crd_s", "teardown.s",
                 "teardown.floor_s", "idle.rss_mb",
                 "idle.requests_per_min", "idle.writes", "release.rss_mb", "release.noop.writes",
                 "scale.kfdefs_s", "ha.failover_s", "ha.takeover_s", "ha.handover_s", "ha.handover_lease_s",
                 "shards.fleet_s", "shards.single_s", "status_write.strings.apiserver_cpu_ms",
                 "status_write.objects.apiserver_cpu_ms", "status_write.strings.latency_ms",
                 "status_write.objects.latency_ms")
#: The entries of the replicas and shards scenarios (``bench/ha.py``).
HA_KEYS = ("ha.failover_s", "ha.takeover_s", "ha.handover_s", "ha.handover_lease_s", "shards.fleet_s",
           "shards.single_s")


@dataclass(frozen=True)
class Target:
    """One target of issue 8 (or issue 5), checked against the results."""

    text: str
    measured: Callable[[JSON], float]
    limit: Callable[[JSON], float]
    strict: bool = False            # measured < limit (else <=)
    unit: str = ""

    def check(self, results: JSON) -> tuple[float, float, bool]:
        measured, limit = self.measured(results), self.limit(results)
        return measured, limit, measured < limit if self.strict else measured <= limit


def _value(key: str) -> Callable[[JSON], float]:
    return lambda r: r[key]["value"]


def _times(factor: float, *keys: str) -> Callable[[JSON], float]:
    """``factor`` times the sum of the figures ``keys``."""
    return lambda r: factor * sum(r[key]["value"] for key in keys)


def _per_object_growth(results: JSON) -> float:
    """Seconds per object at the largest size over seconds per object at the smallest (1 = linear, no overhead)."""
    points = sorted(results["scale.sweep"], key=lambda p: p["objects"])
    first, last = points[0], points[-1]
    return (last["applied_s"] / last["objects"]) / (first["applied_s"] / first["objects"])


def _growth_over_floor(results: JSON) -> float:
    """The operator's time over the floor's at the largest size measured with a floor, over the same at the
    smallest (1: the operator grows exactly as kube-apiserver's own work does)."""
    points = sorted((p for p in results["scale.sweep"] if "floor_s" in p), key=lambda p: p["objects"])
    first, last = points[0], points[-1]
    return (last["applied_s"] / last["floor_s"]) / (first["applied_s"] / first["floor_s"])


def rss_points(results: JSON) -> list[JSON]:
    """Sweep points that measured the operator's memory, smallest first, each with its growth above the empty
    operator (the first point's memory before its KfDef) per 1,000 objects."""
    points = sorted((p for p in results["scale.sweep"] if "rss_mb" in p), key=lambda p: p["objects"])
    if not points:
        return []
    base = points[0]["rss_before_mb"]
    return [{**p, "growth_per_1000_mb": (p["rss_mb"] - base) / p["objects"] * 1000} for p in points]


def _rss_growth(results: JSON) -> float:
    """Memory above the empty operator per object at the largest size over the same at the smallest."""
    points = rss_points(results)
    return points[-1]["growth_per_1000_mb"] / points[0]["growth_per_1000_mb"]


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
    Target("release.rss_mb < 120 (the release at rest; issue 26)", _value("release.rss_mb"), lambda r: 120.0,
           strict=True, unit="MiB"),
    Target("heal.p99_ms < 20 (issue 26)", _value("heal.p99_ms"), lambda r: 20.0, strict=True, unit="ms"),
    Target("noop.writes == 0 (the operator's writes of anything, every restart, from kube-apiserver's audit log)",
           lambda r: r["noop.writes"]["max"], lambda r: 0.0),
    Target("release.noop.writes == 0 (both stacks; the operator's writes, audit log; issue 18)",
           _value("release.noop.writes"), lambda r: 0.0),
    Target("idle.writes == 0 (both stacks, 5 minutes at rest; the operator's writes, audit log; issue 18)",
           _value("idle.writes"), lambda r: 0.0),
    Target("memory per object at the largest size <= at the smallest (no worse than linear; issue 18)",
           _rss_growth, lambda r: 1.0, unit="x"),
    Target("noop.s <= 0.1 x apply.operator_s", _value("noop.s"), _times(0.1, "apply.operator_s"), unit="s"),
    Target("heal.p50_ms < 100", _value("heal.p50_ms"), lambda r: 100.0, strict=True, unit="ms"),
    Target("heal.p99_ms < 1000", _value("heal.p99_ms"), lambda r: 1000.0, strict=True, unit="ms"),
    Target("namespace heal < 10 s (issue 5)", lambda r: r["heal.namespace_s"]["max"], lambda r: 10.0, strict=True,
           unit="s"),
    Target("CRD heal < 10 s (issue 5)", lambda r: r["heal.crd_s"]["max"], lambda r: 10.0, strict=True, unit="s"),
    Target("teardown.s < 60", _value("teardown.s"), lambda r: 60.0, strict=True, unit="s"),
    Target("idle.rss_mb < 150", _value("idle.rss_mb"), lambda r: 150.0, strict=True, unit="MiB"),
    Target("idle.requests_per_min == 0 beyond open watches", _value("idle.requests_per_min"), lambda r: 0.0),
    Target("scale: time per object at the largest size <= at the smallest (no worse than linear)",
           _per_object_growth, lambda r: 1.0, unit="x"),
    Target("scale: operator / floor at the largest size <= at the smallest (the operator's own growth no worse "
           "than linear; issue 18)", _growth_over_floor, lambda r: 1.0, unit="x"),
    Target("ha.failover_s <= lease duration + 2 s, every trial (issue 16)", lambda r: r["ha.failover_s"]["max"],
           lambda r: r["ha.failover_s"]["lease_duration_s"] + 2.0, unit="s"),
    Target("ha.handover_s < 2 s, every trial (issue 16)", lambda r: r["ha.handover_s"]["max"], lambda r: 2.0,
           strict=True, unit="s"),
    Target("shards: KfDefs not reconciled by exactly their own shard == 0 (issue 16)",
           lambda r: r["shards.fleet_s"]["kfdefs"] - r["shards.fleet_s"]["served_by_its_shard"], lambda r: 0.0),
    Target("shards: leaders stepping down while the fleet converges == 0 (their renewals kept up under load)",
           lambda r: r["shards.fleet_s"]["step_downs"], lambda r: 0.0),
)


def target_rows(results: JSON) -> list[JSON]:
    rows = []
    for target in TARGETS:
        try:
            measured, limit, ok = target.check(results)
        except (KeyError, ZeroDivisionError, TypeError):
            rows.append({"target": target.text, "met": None, "note": "not measured"})
            continue
        note = ""
        if not ok:
            over = measured - limit
            note = f"missed by {fmt(over)} {target.unit}".rstrip()
            if limit:
                note += f" ({measured / limit:.2f}x the limit)"
        rows.append({"target": target.text, "measured": measured, "limit": limit, "met": ok, "note": note})
    return rows


def ratios(results: JSON) -> JSON:
    operator = results["apply.operator_s"]["value"]
    return {"operator/kubectl": operator / results["apply.kubectl_ssa_s"]["value"],
            "operator/floor": operator / results["apply.floor_s"]["value"],
            "operator_ready/kubectl":
                results["apply.operator_ready_s"]["value"] / results["apply.kubectl_ssa_s"]["value"],
            "kubectl/floor": results["apply.kubectl_ssa_s"]["value"] / results["apply.floor_s"]["value"],
            "noop/apply": results["noop.s"]["value"] / operator,
            **release_ratios(results), **floor_ratios(results), **heal_ratios(results)}


def heal_ratios(results: JSON) -> JSON:
    """The operator's heals against the heal floor's (``bench/heal.py``), when it ran."""
    if "heal.floor_p50_ms" not in results:
        return {}
    return {f"heal {p}/floor {p}": results[f"heal.{p}_ms"]["value"] / results[f"heal.floor_{p}_ms"]["value"]
            for p in ("p50", "p99")}


def release_ratios(results: JSON) -> JSON:
    """The same ratios for the real release (``bench/release.py``), when it ran."""
    if "release.apply.operator_s" not in results:
        return {}
    operator, kubectl = results["release.apply.operator_s"]["value"], results["release.apply.kubectl_ssa_s"]["value"]
    floor = results["release.apply.floor_s"]["value"]
    return {"release operator/kubectl": operator / kubectl, "release operator/floor": operator / floor,
            "release kubectl/floor": kubectl / floor}


def teardown_ratios(results: JSON) -> JSON:
    """Operator teardown over the floor's, per workload measured."""
    found = {}
    for prefix, label in _WORKLOAD_PREFIXES:
        if f"{prefix}teardown.floor_s" in results:
            found[f"{label}teardown operator/floor"] = (results[f"{prefix}teardown.s"]["value"]
                                                        / results[f"{prefix}teardown.floor_s"]["value"])
    return found


#: Workloads by the prefix of their keys, as the ratios name them.
_WORKLOAD_PREFIXES = (("", ""), ("release.", "release "))


def floor_ratios(results: JSON) -> JSON:
    """The operator against the floor of issue 26 (the kustomize CLI alone, then the raw apply) and against
    kustomize piped to kubectl, and its apply phase against the floor's apply, per workload measured (none for
    results that predate these figures)."""
    found = {}
    for prefix, label in _WORKLOAD_PREFIXES:
        def value(key: str, prefix: str = prefix) -> float:
            return results[f"{prefix}{key}"]["value"]

        if f"{prefix}apply.render_floor_s" in results:
            render_floor, operator = value("apply.render_floor_s"), value("apply.operator_s")
            found[f"{label}operator/(render floor + floor)"] = operator / (render_floor + value("apply.floor_s"))
            found[f"{label}operator/(render floor + kubectl)"] = operator / (render_floor
                                                                             + value("apply.kubectl_ssa_s"))
        if f"{prefix}apply.apply_phase_s" in results:
            found[f"{label}apply phase/floor"] = value("apply.apply_phase_s") / value("apply.floor_s")
    return found
