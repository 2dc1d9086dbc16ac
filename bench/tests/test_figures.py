"""The figures of issue 26 derived from a session's results: its targets and ratios, and older results without them."""

from __future__ import annotations

import pytest

from bench.figures import floor_ratios, target_rows
from bench.fleet import longest_renewal_gap
from bench.results import TargetRow, parse
from bench.streams import Arrival
from bench.tests.sessions import full, with_figures, without

#: The stored session with the figures of issue 26 set to round values.
NEW = with_figures(full(), apply__operator_s=6.0, apply__render_floor_s=1.0, apply__floor_s=4.0,
                   apply__kubectl_ssa_s=20.0, apply__apply_phase_s=4.4, release__apply__operator_s=15.0,
                   release__apply__render_floor_s=6.0, release__apply__floor_s=8.0,
                   release__apply__kubectl_ssa_s=30.0, release__apply__apply_phase_s=9.0, teardown__s=12.9,
                   teardown__floor_s=10.0, release__teardown__s=12.0, release__teardown__floor_s=10.0,
                   release__rss_mb=119.0, heal__p99_ms=20.0)
#: The same as sessions before issue 26 wrote them.
OLDER = without(NEW, "render_floor", "apply_phase")


def _row(rows: tuple[TargetRow, ...], text: str) -> TargetRow:
    [row] = [row for row in rows if row.target.startswith(text) and "issue 26)" in row.target]
    return row


def test_floor_ratios_per_workload() -> None:
    ratios = floor_ratios(parse(NEW))
    assert ratios["operator/(render floor + floor)"] == pytest.approx(6.0 / 5.0)
    assert ratios["operator/(render floor + kubectl)"] == pytest.approx(6.0 / 21.0)
    assert ratios["apply phase/floor"] == pytest.approx(1.1)
    assert ratios["release operator/(render floor + floor)"] == pytest.approx(15.0 / 14.0)
    assert ratios["release operator/(render floor + kubectl)"] == pytest.approx(15.0 / 36.0)
    assert ratios["release apply phase/floor"] == pytest.approx(9.0 / 8.0)


def test_results_that_predate_the_new_figures_have_no_floor_ratios() -> None:
    assert floor_ratios(parse(OLDER)) == {}


def test_the_targets_of_issue_26() -> None:
    rows = target_rows(parse(NEW))
    apply = _row(rows, "apply.operator_s <= 1.10")
    assert (apply.measured, apply.limit, apply.met) == (6.0, pytest.approx(5.5), False)
    release = _row(rows, "release.apply.operator_s <= 1.10")
    assert (release.limit, release.met) == (pytest.approx(15.4), True)
    assert _row(rows, "release.apply.apply_phase_s").limit == pytest.approx(9.2)
    assert _row(rows, "release.apply.operator_s <= 0.40").limit == pytest.approx(14.4)
    assert _row(rows, "teardown.s <= 1.3").met is True       # 12.9 against 13
    assert _row(rows, "release.teardown.s <= 1.3").met is True
    assert _row(rows, "release.rss_mb < 120").met is True
    assert _row(rows, "heal.p99_ms < 20").met is False       # strictly under


def test_issue_18_floor_targets_are_gone() -> None:
    texts = [row.target for row in target_rows(parse(NEW))]
    assert not [text for text in texts if "<= 1.15 x apply.floor_s" in text or "1.15 x release.apply.floor_s (issue 18)"
                in text]


def test_older_results_leave_the_new_targets_unmeasured() -> None:
    rows = target_rows(parse(OLDER))
    assert _row(rows, "apply.operator_s <= 1.10").met is None
    assert _row(rows, "release.apply.apply_phase_s").met is None
    assert _row(rows, "teardown.s <= 1.3").met is True


def test_shard_leaders_stepping_down_is_a_missed_target_and_older_fleets_are_unmeasured() -> None:
    def step_downs_row(**fleet: int | None) -> TargetRow:
        data = full()
        data["shards.fleet_s"].update(fleet)
        [row] = [row for row in target_rows(parse(data)) if row.target.startswith("shards: leaders")]
        return row

    assert step_downs_row(step_downs=None).met is None
    assert step_downs_row(step_downs=0).met is True
    assert step_downs_row(step_downs=1).met is False


def test_the_longest_renewal_gap_is_per_lease_and_ignores_other_leases() -> None:
    def renewal(at: float, name: str) -> Arrival:
        return Arrival(at, "MODIFIED", {"metadata": {"name": name}})

    events = [renewal(0.0, "a"), renewal(1.0, "b"), renewal(2.0, "a"), renewal(7.5, "a"), renewal(3.0, "b"),
              renewal(0.5, "kwok-node-0"), renewal(30.0, "kwok-node-0")]
    assert longest_renewal_gap(events, {"a", "b"}) == 5.5
