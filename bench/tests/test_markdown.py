"""docs/benchmarks.md from the stored results: older results lacking the figures of issue 26 show n/a, newer ones
show the floor of issue 26 beside the old one; the notes on missed targets."""

from __future__ import annotations

import copy

import pytest

from bench.figures import judged
from bench.markdown import render_markdown
from bench.profile_steps import KUSTOMIZE, RENDER_STEP, WATCHES
from bench.results import load, parse
from bench.tables import fmt
from bench.tests import sessions
from kfdef_operator.api.types import JSON

NEW_FIGURES = ("render_floor", "apply_phase")


def _rendered(results: JSON, before: JSON | None = None) -> str:
    """The page as ``bench/report.py`` writes it (targets and ratios derived again), without writing anything;
    ``before``: the stored ``results-before.json`` unless given."""
    return render_markdown(judged(parse(results)), parse(before or sessions.before()))


@pytest.fixture(scope="module")
def older() -> JSON:
    """The stored session, without the figures of issue 26 (as sessions before it wrote them)."""
    return sessions.without(sessions.full(), *NEW_FIGURES)


def _with_new_figures(results: JSON) -> JSON:
    return sessions.with_figures(results, apply__render_floor_s=1.5, apply__apply_phase_s=3.0,
                                 release__apply__render_floor_s=6.0, release__apply__apply_phase_s=9.0)


def _line(page: str, start: str) -> str:
    [line] = [line for line in page.splitlines() if line.startswith(start)]
    return line


def _against_floor(page: str) -> str:
    return page.split("## Against the floor of issue 26")[1].split("\n## ")[0]


def test_older_results_show_n_a(older: JSON) -> None:
    page = _rendered(older, sessions.without(sessions.before(), *NEW_FIGURES))
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


def test_the_committed_page_is_the_committed_results_rendered_again() -> None:
    """``docs/benchmarks.md`` is what ``python -m bench --report-only`` makes of ``bench/results.json`` beside
    ``bench/results-before.json``, byte for byte (the targets and ratios derived again)."""
    page = render_markdown(judged(load(sessions.BENCH / "results.json")), load(sessions.BENCH / "results-before.json"))
    assert page == (sessions.BENCH.parent / "docs" / "benchmarks.md").read_text()


def test_the_results_written_again_are_those_stored() -> None:
    """The targets and ratios derived again are those the results file holds, as it holds them."""
    stored = sessions.full()
    results = judged(parse(stored))
    assert [row.to_json() for row in results.targets] == stored["targets"]
    assert results.ratios == stored["ratios"]


SESSIONS = pytest.mark.parametrize("session", [sessions.full, sessions.quick], ids=["full run", "quick run"])


def _section(page: str, heading: str) -> list[str]:
    """The lines of the section under ``heading``, up to the next heading, blank lines left out."""
    body = page.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]
    return [line for line in body.splitlines() if line]


def test_a_quick_run_renders_with_what_it_missed() -> None:
    """A quick run (``make bench-quick``: a quarter of the workload, fewer rounds; ``quick-results.json``, measured
    at 15ee13d) renders in quick mode, with a note on the one target it missed."""
    stored = sessions.quick()
    page = render_markdown(judged(parse(stored)), parse(sessions.before()))
    assert "(**quick mode**: smaller workload, fewer runs)" in _line(page, "- Date: ")
    assert [row["target"] for row in stored["targets"] if row["met"] is False] == ["heal.p99_ms < 20 (issue 26)"]
    assert [note.split("**")[1] for note in _section(page, "### Why targets are missed")] == ["heal.p99_ms"]


def test_a_quick_run_that_missed_noop_s_says_why() -> None:
    """The same quick run with its no-op 0.01 s slower, past ``0.1 x apply.operator_s`` (it met that by 0.007 s;
    the run of issue 40 did not): the report ended in ``KeyError: 'render (kustomize)'`` there."""
    stored = sessions.quick()
    slower = sessions.with_figures(stored, noop__s=stored["noop.s"]["value"] + 0.01)
    results = judged(parse(slower))
    assert [row.target for row in results.targets if row.met is False] == [
        "heal.p99_ms < 20 (issue 26)", "noop.s <= 0.1 x apply.operator_s"]
    note = _line(render_markdown(results, parse(sessions.before())), "- **noop.s**")
    assert f"({fmt(stored['profile']['noop']['steps_s'][WATCHES])} s)" in note


@SESSIONS
def test_the_report_renders_with_every_target_met(session) -> None:
    results = judged(parse(sessions.met(session())))
    assert {row.met for row in results.targets} == {True}
    page = render_markdown(results, parse(sessions.before()))
    assert _section(page, "### Why targets are missed") == ["Every target is met."]
    assert "**missed**" not in page


@SESSIONS
def test_the_report_renders_with_every_target_missed_and_says_why(session) -> None:
    results = judged(parse(sessions.missed(session())))
    assert {row.met for row in results.targets} == {False}
    page = render_markdown(results, parse(sessions.before()))
    notes = _section(page, "### Why targets are missed")
    assert [note.split("**")[1] for note in notes] == [
        "apply against the floors", "teardown (synthetic)", "teardown (v1.11.0)", "memory", "heal.p99_ms",
        "noop.writes", "sweep at x10.0 not measured", "noop.s", "scale", "upgrade.ready_s"]
    assert "**met**" not in page
