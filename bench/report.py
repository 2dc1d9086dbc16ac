"""``bench/results.json``, ``docs/benchmarks.md`` and ``docs/benchmarks.png`` from one session's results."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JSON = dict[str, Any]

HEADLINE_KEYS = ("apply.operator_s", "apply.operator_ready_s", "apply.kubectl_ssa_s", "apply.floor_s", "render.s",
                 "noop.writes", "noop.s", "noop.restart_s", "noop.reconcile_s", "heal.p50_ms", "heal.p99_ms",
                 "heal.namespace_s", "heal.crd_s", "teardown.s", "idle.rss_mb", "idle.requests_per_min",
                 "scale.kfdefs_s", "ha.failover_s", "ha.takeover_s", "ha.handover_s", "ha.handover_lease_s",
                 "shards.fleet_s", "shards.single_s")


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


def _per_object_growth(results: JSON) -> float:
    """Seconds per object at the largest size over seconds per object at the smallest (1 = linear, no overhead)."""
    points = sorted(results["scale.sweep"], key=lambda p: p["objects"])
    first, last = points[0], points[-1]
    return (last["applied_s"] / last["objects"]) / (first["applied_s"] / first["objects"])


TARGETS = (
    Target("apply.operator_s <= 0.5 x apply.kubectl_ssa_s", _value("apply.operator_s"),
           lambda r: 0.5 * r["apply.kubectl_ssa_s"]["value"], unit="s"),
    Target("apply.operator_s <= 1.3 x apply.floor_s", _value("apply.operator_s"),
           lambda r: 1.3 * r["apply.floor_s"]["value"], unit="s"),
    Target("noop.writes == 0 (server-side count)", _value("noop.writes"), lambda r: 0.0),
    Target("noop.s <= 0.1 x apply.operator_s", _value("noop.s"), lambda r: 0.1 * r["apply.operator_s"]["value"],
           unit="s"),
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
    Target("ha.failover_s <= lease duration + 2 s, every trial (issue 16)", lambda r: r["ha.failover_s"]["max"],
           lambda r: r["ha.failover_s"]["lease_duration_s"] + 2.0, unit="s"),
    Target("ha.handover_s < 2 s, every trial (issue 16)", lambda r: r["ha.handover_s"]["max"], lambda r: 2.0,
           strict=True, unit="s"),
    Target("shards: KfDefs not reconciled by exactly their own shard == 0 (issue 16)",
           lambda r: r["shards.fleet_s"]["kfdefs"] - r["shards.fleet_s"]["served_by_its_shard"], lambda r: 0.0),
)


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


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
            note = f"missed by {_fmt(over)} {target.unit}".rstrip()
            if limit:
                note += f" ({measured / limit:.2f}x the limit)"
        rows.append({"target": target.text, "measured": measured, "limit": limit, "met": ok, "note": note})
    return rows


def ratios(results: JSON) -> JSON:
    operator = results["apply.operator_s"]["value"]
    return {"operator/kubectl": operator / results["apply.kubectl_ssa_s"]["value"],
            "operator/floor": operator / results["apply.floor_s"]["value"],
            "operator_ready/kubectl": results["apply.operator_ready_s"]["value"] / results["apply.kubectl_ssa_s"]["value"],
            "kubectl/floor": results["apply.kubectl_ssa_s"]["value"] / results["apply.floor_s"]["value"],
            "noop/apply": results["noop.s"]["value"] / operator,
            **release_ratios(results)}


def release_ratios(results: JSON) -> JSON:
    """The same ratios for the real release (``bench/release.py``), when it ran."""
    if "release.apply.operator_s" not in results:
        return {}
    operator, kubectl = results["release.apply.operator_s"]["value"], results["release.apply.kubectl_ssa_s"]["value"]
    floor = results["release.apply.floor_s"]["value"]
    return {"release operator/kubectl": operator / kubectl, "release operator/floor": operator / floor,
            "release kubectl/floor": kubectl / floor}


def write(results: JSON, out: Path, docs: Path) -> None:
    results["targets"] = target_rows(results)
    results["ratios"] = ratios(results)
    out.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    docs.mkdir(parents=True, exist_ok=True)
    from .plot import plot  # matplotlib is only needed here
    plot(results, docs / "benchmarks.png")
    from .markdown import render_markdown
    (docs / "benchmarks.md").write_text(render_markdown(results))
