"""The one retry-delay formula (kfdef_operator.backoff) and the sequences each of its callers waits."""

from __future__ import annotations

import math
import random

import pytest

from kfdef_operator.backoff import exponential, jittered


def sequence(attempts: range, *, base: float, cap: float = math.inf) -> list[float]:
    return [exponential(attempt, base=base, cap=cap) for attempt in attempts]


def test_base_doubles_with_each_attempt_up_to_the_cap():
    assert sequence(range(6), base=1.0, cap=10.0) == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_a_negative_attempt_counts_as_the_first():
    assert exponential(-3, base=5.0) == 5.0


def test_a_huge_attempt_neither_overflows_nor_passes_the_cap():
    assert exponential(10_000, base=1.0, cap=300.0) == 300.0
    assert math.isfinite(exponential(10_000, base=0.05))


def test_without_a_cap_the_delay_keeps_doubling():
    assert sequence(range(1, 4), base=1.5) == [3.0, 6.0, 12.0]


# The callers' sequences, pinned: switching a caller to the helper must not change what it waits.

def test_heal_fight_backoff_one_second_doubling_to_five_minutes():  # runtime/heal_policy.py fight_backoff
    assert sequence(range(11), base=1.0, cap=300.0) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]


def test_failed_heal_retries_half_a_second_doubling_to_a_minute():  # runtime/heal_policy.py HealRequest
    assert sequence(range(9), base=0.5, cap=60.0) == [0.5, 1, 2, 4, 8, 16, 32, 60, 60]


def test_lease_watch_retries_from_0_4_s_to_6_4_s():  # runtime/election.py, failures counted from 1
    assert sequence(range(1, 8), base=0.2, cap=6.4) == [0.4, 0.8, 1.6, 3.2, 6.4, 6.4, 6.4]


def test_tracker_watch_retries_from_0_4_s_to_10_s_before_jitter():  # runtime/tracker.py, failures from 1
    assert sequence(range(1, 8), base=0.2, cap=10.0) == [0.4, 0.8, 1.6, 3.2, 6.4, 10.0, 10.0]


def test_api_request_retries_50_ms_doubling_to_2_s():  # ssa/client.py _retry_delay, attempts from 0
    from kfdef_operator.ssa.client import _retry_delay
    assert [_retry_delay(attempt, None) for attempt in range(8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    assert _retry_delay(0, "7") == 7.0  # the server's Retry-After wins


def test_download_retries_double_the_configured_first_delay():  # source/http.py, attempts from 1, no cap
    assert sequence(range(0, 3), base=1.0) == [1.0, 2.0, 4.0]


def test_reconcile_retries_five_seconds_doubling_to_ten_minutes():  # controller/queue.py WorkQueue.retry_delay
    from kfdef_operator.controller.queue import WorkQueue

    async def work(key: object) -> None:
        return None

    queue = WorkQueue(work)
    assert [queue.retry_delay("k", base=5.0) for _ in range(9)] == [5, 10, 20, 40, 80, 160, 320, 600, 600]
    assert [queue.retry_delay("other", base=5.0, cap=120.0) for _ in range(6)] == [5, 10, 20, 40, 80, 120]
    queue.forget("k")
    assert queue.retry_delay("k", base=10.0) == 10.0, "a forgotten key backs off from the start"
    queue.forget()
    assert queue.retry_delay("other", base=5.0) == 5.0, "forget() forgets every key"


def test_crd_and_deletion_waits_poll_from_20_ms():  # ssa/waits.py: Established up to 0.2 s, gone up to 0.5 s
    assert sequence(range(6), base=0.02, cap=0.2) == [0.02, 0.04, 0.08, 0.16, 0.2, 0.2]
    assert sequence(range(6), base=0.02, cap=0.5) == [0.02, 0.04, 0.08, 0.16, 0.32, 0.5]


@pytest.mark.parametrize("fraction", [0.1, 0.5])
def test_jitter_stays_within_the_fraction_and_spreads(fraction):
    random.seed(25)
    samples = [jittered(10.0, fraction) for _ in range(2000)]
    assert all(10.0 * (1 - fraction) <= sample <= 10.0 * (1 + fraction) for sample in samples)
    # Spread over the whole band, both sides of the middle.
    assert min(samples) < 10.0 * (1 - fraction / 2) and max(samples) > 10.0 * (1 + fraction / 2)


def test_no_jitter_keeps_the_delay():
    assert jittered(3.0, 0.0) == 3.0
