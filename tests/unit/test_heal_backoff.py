"""Backoff against a fight over one object (kfdef_operator.runtime.heal_policy.fight_backoff)."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfdef_operator.runtime.heal_policy import FIGHT_THRESHOLD, FIGHT_WINDOW_S, MAX_BACKOFF_S, fight_backoff

NOW = 10_000.0


def history(count: int, *, span: float = 10.0) -> deque[float]:
    """``count`` heals spread over the last ``span`` seconds (oldest first)."""
    return deque(NOW - span + span * i / max(count, 1) for i in range(count))


@pytest.mark.parametrize("count", range(FIGHT_THRESHOLD))
def test_no_delay_below_the_threshold(count):
    assert fight_backoff(history(count), NOW) == 0.0


def test_delay_doubles_from_the_threshold_on():
    delays = [fight_backoff(history(FIGHT_THRESHOLD + extra), NOW) for extra in range(6)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]


def test_delay_is_capped():
    assert fight_backoff(history(FIGHT_THRESHOLD + 8), NOW) == 256.0
    assert fight_backoff(history(FIGHT_THRESHOLD + 9), NOW) == MAX_BACKOFF_S
    assert fight_backoff(history(FIGHT_THRESHOLD + 50), NOW) == MAX_BACKOFF_S


def test_delay_is_capped_for_any_number_of_heals():
    heals = history(FIGHT_THRESHOLD + 1100)
    try:
        delay = fight_backoff(heals, NOW)
    except OverflowError as error:
        raise AssertionError(
            "BUG in kfdef_operator/runtime/heal_policy.py fight_backoff(): 2.0 ** excess is computed before the cap, "
            f"so 1027 or more heals inside the window raise OverflowError ({error}) instead of returning "
            "MAX_BACKOFF_S") from None
    assert delay == MAX_BACKOFF_S


def test_heals_outside_the_window_are_dropped_and_forgotten():
    old = [NOW - FIGHT_WINDOW_S - 5 - i for i in range(10, 0, -1)]
    recent = [NOW - 1.0]
    heals = deque(old + recent)

    assert fight_backoff(heals, NOW) == 0.0
    assert list(heals) == recent


def test_a_heal_exactly_at_the_window_edge_still_counts():
    heals = deque([NOW - FIGHT_WINDOW_S] * FIGHT_THRESHOLD)
    assert fight_backoff(heals, NOW) == 1.0
    assert len(heals) == FIGHT_THRESHOLD


def test_fight_calms_down_as_time_passes():
    heals = history(FIGHT_THRESHOLD + 3, span=5.0)
    assert fight_backoff(heals, NOW) == 8.0
    assert fight_backoff(heals, NOW + FIGHT_WINDOW_S + 1) == 0.0
    assert not heals


def test_a_heal_loop_is_never_backed_off_more_than_32_s():
    """Something that undoes every heal at once (a write loop with a controller, a fight): the heals are never more
    than 32 s apart, so the tests' idle minutes (tests/releases/test_on_cluster.py,
    tests/cluster/test_aggregated_roles.py) see at least one write of any such loop."""
    heals: deque[float] = deque()
    now, gaps = NOW, []
    for _ in range(500):
        gap = fight_backoff(heals, now)
        now += gap
        heals.append(now)
        gaps.append(gap)
    assert max(gaps) == 32.0


def test_empty_history():
    assert fight_backoff(deque(), NOW) == 0.0


@given(st.lists(st.floats(0, 2 * FIGHT_WINDOW_S), max_size=40).map(sorted))
def test_delay_depends_only_on_heals_inside_the_window(ages_from_start):
    heals = deque(NOW - 2 * FIGHT_WINDOW_S + age for age in ages_from_start)
    inside = sum(1 for t in heals if NOW - t <= FIGHT_WINDOW_S)

    delay = fight_backoff(heals, NOW)

    assert len(heals) == inside
    expected = 0.0 if inside < FIGHT_THRESHOLD else min(2.0 ** (inside - FIGHT_THRESHOLD), MAX_BACKOFF_S)
    assert delay == expected
    assert 0.0 <= delay <= MAX_BACKOFF_S

