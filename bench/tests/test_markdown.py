"""docs/benchmarks.md from the stored results: older results lacking the figures of issue 26 show n/a, newer ones
show the floor of issue 26 beside the old one."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from bench.figures import JSON, ratios, target_rows, teardown_ratios
from bench.markdown import render_markdown
from bench.profile_steps import KUSTOMIZE, RENDER_STEP, WATCHES
from bench.tables import fmt

BENCH = Path(__file__).resolve().parents[1]
NEW_FIGURES = ("render_floor", "apply_phase")


def _without_new_figures(results: JSON) -> JSON:
    """A session as those before issue 26 wrote it."""
    return {key: value for key, value in results.items() if not any(name in key for name in NEW_FIGURES)}


def _rendered(results: JSON, before: JSON | None = None) -> str:
    """The page as ``bench/report.py`` writes it (targets and ratios derived again), without writing anything;
    ``before``: the stored ``results-before.json`` unless given."""
    results = copy.deepcopy(results)
    results["targets"] = target_rows(results)
    results["ratios"] = {**ratios(results), **teardown_ratios(results)}
    return render_markdown(results, before or json.loads((BENCH / "results-before.json").read_text()))


@pytest.fixture(scope="module")
def older() -> JSON:
    """The stored session, without the figures of issue 26 (as sessions before it wrote them)."""
    return _without_new_figures(json.loads((BENCH / "results.json").read_text()))


def _with_new_figures(results: JSON) -> JSON:
    results = copy.deepcopy(results)
    for key, value in (("apply.render_floor_s", 1.5), ("apply.apply_phase_s", 3.0),
                       ("release.apply.render_floor_s", 6.0), ("release.apply.apply_phase_s", 9.0)):
        results[key] = {"value": value, "median": value, "min": value, "max": value, "n": 1, "unit": "s"}
    return results


def _line(page: str, start: str) -> str:
    [line] = [line for line in page.splitlines() if line.startswith(start)]
    return line


def _against_floor(page: str) -> str:
    return page.split("## Against the floor of issue 26")[1].split("\n## ")[0]


def test_older_results_show_n_a(older: JSON) -> None:
    page = _rendered(older, _without_new_figures(json.loads((BENCH / "results-before.json").read_text())))
    assert "## Against the floor of issue 26" in page
    assert "n/a" in _line(_against_floor(page), "| v1.11.0 | ")
    assert _line(page, "| v1.11.0: render floor, kustomize alone (s) |").endswith("| n/a | n/a |")


def test_the_new_floor_beside_the_old_one(older: JSON) -> None:
    results = _with_new_figures(older)
    page = _rendered(results)
    operator, floor = results["release.apply.operator_s"]["median"], results["release.apply.floor_s"]["median"]
    row = _line(_against_floor(page), "| v1.11.0 | ").split(" | ")
    assert row[2:6] == ["6", fmt(floor), fmt(6.0 + floor), f"**{operator / (6.0 + floor):.2f}**"]
    assert f"operator / (render floor + floor) = **{operator / (6.0 + floor):.2f}**" in page
    assert f"apply phase / floor = **{9.0 / floor:.2f}**" in page
    assert "`release.apply.render_floor_s`" in page     # in the release's table


def test_a_missed_heal_target_names_what_each_client_wrote_during_the_heals(older: JSON) -> None:
    results = copy.deepcopy(older)
    results["heal.p99_ms"].update(value=500.0, writes_by_client={
        "operator": {"POST deployments": 50, "PATCH deployments": 50, "POST events": 50},
        "kube-controller-manager": {"PUT deployments/status": 261, "POST replicasets": 57},
        "kwok": {"DELETE pods": 100}})
    note = _line(_rendered(results), "- **heal.p99_ms**")
    assert "the operator wrote 150 requests (50 PATCH deployments, 50 POST deployments, 50 POST events)" in note
    assert "the cluster's own components 418 (kube-controller-manager 318, kwok 100)" in note


def test_a_missed_heal_target_shows_the_heal_floor_beside_it(older: JSON) -> None:
    """Results with the heal floor: its percentiles and the operator's p99 over its p99 in the note, the table and
    the ratios; results before it say nothing of it."""
    results = {key: value for key, value in copy.deepcopy(older).items() if not key.startswith("heal.floor_")}
    results["heal.p99_ms"]["value"] = 60.0
    heals = results["heal.p99_ms"]["n"]
    before_the_floor = _line(_rendered(results), "- **heal.p99_ms**")
    assert "heal floor" not in before_the_floor and f"During the {heals} heals the operator" in before_the_floor
    for key, value, samples in (("heal.floor_p50_ms", 12.0, [10.0, 12.0, 40.0]),
                                ("heal.floor_p99_ms", 40.0, [10.0, 12.0, 40.0])):
        results[key] = {"value": value, "median": 12.0, "min": 10.0, "max": 40.0, "n": 3, "unit": "ms",
                        "samples": samples}
    page = _rendered(results)
    note = _line(page, "- **heal.p99_ms**")
    assert "The heal floor" in note and "p99 40.0 ms" in note and "1.50 x the floor's" in note
    assert f"During the {heals} heals and the heal floor's {heals}" in note
    assert _line(page, "| `heal.floor_p99_ms` |").startswith("| `heal.floor_p99_ms` | 40.0 |")
    assert "heal p99 / heal floor p99 = 1.50" in page


def test_the_status_write_section_says_so_when_the_session_did_not_measure_it(older):
    page = _rendered({key: value for key, value in older.items() if not key.startswith("status_write.")})
    assert "Not measured in this session (`python -m bench.status_write`" in page


def test_the_status_write_section_gives_both_formats_and_their_ratio(older):
    entry = {"unit": "ms", "n": 3, "min": 1.0, "max": 50.0}
    measured = {**older,
                "status_write.strings.apiserver_cpu_ms": {**entry, "median": 12.4, "value": 12.4,
                                                          "note": "595 objects, KfDef 40,000 bytes; 100 writes"},
                "status_write.objects.apiserver_cpu_ms": {**entry, "median": 42.7, "value": 42.7,
                                                          "note": "595 objects, KfDef 52,000 bytes; 100 writes"},
                "status_write.strings.latency_ms": {**entry, "median": 9.3, "value": 9.3},
                "status_write.objects.latency_ms": {**entry, "median": 23.4, "value": 23.4}}
    page = _rendered(measured)
    assert "**12.4 ms of CPU per write with the inventory as strings**" in page
    assert "42.7 ms with an object per entry (its first format; 595 objects, KfDef 52,000 bytes): 3.4 x" in page


def test_a_missed_no_op_target_says_where_a_restarted_operator_spends_its_no_op(older: JSON) -> None:
    """The note on ``noop.s`` reads the profile's steps by the labels ``bench/profile_apply.py`` gives them (a
    quick run misses the target: its apply is short beside the no-op's fixed costs)."""
    results = copy.deepcopy(older)
    results["noop.s"]["value"] = results["apply.operator_s"]["value"]
    note = _line(_rendered(results), "- **noop.s**")
    noop = older["profile"]["noop"]
    assert (f"goes through its render step again ({fmt(noop['steps_s'][RENDER_STEP])} s, of which "
            f"{fmt(noop['steps_s'][KUSTOMIZE])} s in kustomize" in note)
    assert f"restarts a watch per kind with a list ({fmt(noop['steps_s'][WATCHES])} s)" in note
    assert f"Its {noop['requests_by_verb']['GET']} GETs are those lists" in note
