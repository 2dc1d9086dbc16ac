"""Sessions for the report's tests: the stored full run (``bench/results.json``), the session before it, a quick
run's (``quick-results.json``), and variants of them with figures changed or left out."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

from bench import release, upgrade
from kfdef_operator.api.types import JSON

BENCH = Path(__file__).resolve().parents[1]
QUICK = Path(__file__).resolve().parent / "quick-results.json"


def full() -> JSON:
    return json.loads((BENCH / "results.json").read_text())


def before() -> JSON:
    return json.loads((BENCH / "results-before.json").read_text())


def quick() -> JSON:
    return json.loads(QUICK.read_text())


def entry(value: float, unit: str = "s") -> JSON:
    """A figure measured once."""
    return {"value": value, "median": value, "min": value, "max": value, "n": 1, "unit": unit, "samples": [value]}


def with_figures(data: JSON, **values: float) -> JSON:
    """``data`` with the figures ``values`` (``__`` in a name stands for ``.``) at these values (value, median, min
    and max), the samples and the details the session recorded beside them kept."""
    changed = copy.deepcopy(data)
    for name, value in values.items():
        key = name.replace("__", ".")
        changed[key] = {**entry(value), **changed.get(key, {}), "value": value, "median": value, "min": value,
                        "max": value}
    return changed


def without(data: JSON, *parts: str) -> JSON:
    """``data`` without the entries whose key holds any of ``parts`` (as a session that predates them)."""
    return {key: value for key, value in copy.deepcopy(data).items() if not any(part in key for part in parts)}


#: CPU seconds of one path, as ``Bench.cpu`` differences hold them.
_CPU = {"etcd": 2.0, "kube-apiserver": 30.0, "kube-controller-manager": 2.5, "kube-scheduler": 0.5, "kwok": 0.4,
        "operator": 6.0, "render": 8.0}


def _prepared(version: str, objects: int, left_out: int) -> release.Release:
    return release.Release(version, {}, [{} for _ in range(objects)], left_out, 5.0, frozenset(), [])


def upgrade_run(*, ready_s: list[float | None], teardown_s: list[float], fresh_ready_s: list[float]) -> JSON:
    """The entries ``bench/upgrade.py`` writes for rounds of these seconds: round i's upgrade Ready after
    ``ready_s[i]`` (None: not Ready in time, its first apply done after 23.8 s), v1.2.0 torn down in
    ``teardown_s[i]``, v1.11.0 afresh Ready after ``fresh_ready_s[i]``."""
    upgrades = [{"applied_s": 23.8 if ready is None else ready - 10, "ready_s": ready, "old_ready_s": 10.0,
                 "failure": None if ready is not None else (
                     f"KfDef kubeflow-{index} edited from Kubeflow v1.2.0 to v1.11.0: not Ready for generation 2 300 s "
                     "after the edit (its first apply done after 23.8 s); conditions: Ready=False (HealthCheckTimeout, "
                     "generation 2): 3 of 628 objects not ready: Certificate.cert-manager.io kubeflow/kfp-cache-cert "
                     "(missing)"),
                 "cpu": _CPU, "steps": {"queued": 0.02, "fetch": 0.5, "render": 6.0, "apply": 17.3},
                 "writes_operator": 1100, "writes_operator_by_request": {"PATCH deployments": 118},
                 "writes_others": {"kube-controller-manager": {"DELETE pods": 60}, "kwok": {"PATCH pods": 120}},
                 "applied": {"configured": 213, "created": 387}, "pruned": {"deleted": 262},
                 "recreated": ["Deployment.apps kubeflow/ml-pipeline", "Deployment.apps kubeflow/mysql",
                               "StatefulSet.apps kubeflow/metacontroller"],
                 "migrated": {"certificates.cert-manager.io": 3, "orders.acme.cert-manager.io": 0},
                 "first_apply_failures": [{"object": "Issuer.cert-manager.io kubeflow/selfsigned-issuer",
                                           "message": "404 : 404 page not found"}] if index == 0 else []}
                for index, ready in enumerate(ready_s)]
    replacements = [{"old_ready_s": 10.0, "teardown_s": teardown, "fresh_applied_s": fresh - 3,
                     "fresh_ready_s": fresh, "cpu": _CPU, "writes_operator": 1400,
                     "writes_operator_by_request": {"PATCH deployments": 60},
                     "writes_others": {"kube-controller-manager": {"DELETE pods": 300}}}
                    for teardown, fresh in zip(teardown_s, fresh_ready_s, strict=True)]
    releases = upgrade.Releases(_prepared("v1.2.0", 552, 13), _prepared("v1.11.0", 628, 25))
    return upgrade.results(releases, {"upgrade": upgrades, "replacement": replacements}, quick=False)


def with_upgrade(data: JSON, **rounds: list) -> JSON:
    """``data`` with an upgrade run of ``rounds`` (:func:`upgrade_run`'s arguments) in place of its own."""
    return {**without(data, "upgrade."), **upgrade_run(**rounds)}


def _value(data: JSON, key: str) -> float:
    return data[key]["value"]


def met(data: JSON) -> JSON:
    """``data`` with figures that meet every target (``bench/figures.py``'s ``TARGETS``)."""
    changed = _sweep(data, applied_s=lambda objects: 1 + 0.005 * objects, floor_s=lambda objects: 1 + 0.005 * objects,
                     rss_mb=lambda base, objects: base + 10)     # less above the empty operator per object as it grows
    changed = with_figures(
        changed, apply__operator_s=_value(data, "apply.render_floor_s") + _value(data, "apply.floor_s"),
        release__apply__operator_s=_value(data, "release.apply.render_floor_s") + _value(data, "release.apply.floor_s"),
        release__apply__apply_phase_s=_value(data, "release.apply.floor_s"),
        release__apply__kubectl_ssa_s=10 * _value(data, "release.apply.floor_s"),
        teardown__s=_value(data, "teardown.floor_s"), release__teardown__s=_value(data, "release.teardown.floor_s"),
        release__rss_mb=100, idle__rss_mb=100, heal__p50_ms=5, heal__p99_ms=10, heal__namespace_s=1, heal__crd_s=1,
        noop__writes=0, release__noop__writes=0, idle__writes=0, idle__requests_per_min=0,
        ha__failover_s=data["ha.failover_s"]["lease_duration_s"], ha__handover_s=1)
    changed = with_figures(changed, noop__s=0.05 * _value(changed, "apply.operator_s"))
    changed["shards.fleet_s"].update(served_by_its_shard=changed["shards.fleet_s"]["kfdefs"], step_downs=0)
    return with_upgrade(changed, ready_s=[28.0, 30.0, 31.0], teardown_s=[10.0, 11.0, 12.0],
                        fresh_ready_s=[18.0, 19.0, 20.0])


def missed(data: JSON) -> JSON:
    """``data`` with figures that miss every target, and a sweep size that failed."""
    changed = _sweep(data, applied_s=lambda objects: objects * objects / 10_000, floor_s=lambda objects: objects / 100,
                     rss_mb=lambda base, objects: base + objects * objects / 100_000)  # more per object as it grows
    both = _value(data, "apply.render_floor_s") + _value(data, "apply.floor_s")
    release_both = _value(data, "release.apply.render_floor_s") + _value(data, "release.apply.floor_s")
    changed = with_figures(
        changed, apply__operator_s=2 * both, release__apply__operator_s=2 * release_both,
        release__apply__apply_phase_s=2 * _value(data, "release.apply.floor_s"),
        release__apply__kubectl_ssa_s=_value(data, "release.apply.floor_s"),
        teardown__s=max(100.0, 2 * _value(data, "teardown.floor_s")),
        release__teardown__s=2 * _value(data, "release.teardown.floor_s"),
        release__rss_mb=150, idle__rss_mb=200, heal__p50_ms=150, heal__p99_ms=1500, heal__namespace_s=20,
        heal__crd_s=20, noop__writes=2, release__noop__writes=1, idle__writes=1, idle__requests_per_min=2,
        ha__failover_s=data["ha.failover_s"]["lease_duration_s"] + 5, ha__handover_s=3)
    changed = with_figures(changed, noop__s=_value(changed, "apply.operator_s"))
    changed["noop.writes"]["by_request"] = [{"PATCH kfdefs/status": 2} for _ in changed["noop.writes"]["by_request"]]
    changed["shards.fleet_s"].update(served_by_its_shard=changed["shards.fleet_s"]["kfdefs"] - 1, step_downs=1)
    changed["scale.sweep_failures"] = [{"scale": 10.0, "error": "Service IP range exhausted"}]
    return with_upgrade(changed, ready_s=[60.0, 64.0, 55.0], teardown_s=[10.0, 11.0, 12.0],
                        fresh_ready_s=[18.0, 19.0, 20.0])


def _sweep(data: JSON, *, applied_s: Callable[[int], float], floor_s: Callable[[int], float],
           rss_mb: Callable[[float, int], float]) -> JSON:
    """``data`` with each sweep size's seconds and memory given by its objects (and, for the memory, the empty
    operator's: the smallest size's memory before its KfDef)."""
    changed = copy.deepcopy(data)
    points = changed["scale.sweep"]
    base = min(points, key=lambda p: p["objects"])["rss_before_mb"]
    for point in points:
        objects = point["objects"]
        point.update(applied_s=applied_s(objects), floor_s=floor_s(objects), rss_mb=rss_mb(base, objects))
    return changed
