"""Fair sharing of the work pool's threads between tenants (namespaces), on its own: which job starts next."""

from __future__ import annotations

import pytest

from kfdef_operator.controller.fairshare import FairShare


def start_all(share: FairShare[str]) -> list[str]:
    """The jobs that may start now, in the order they start."""
    started = []
    while (taken := share.take()) is not None:
        started.append(taken[1])
    return started


def test_one_tenant_alone_gets_every_thread_in_order_and_no_more():
    share: FairShare[str] = FairShare(4)
    for number in range(6):
        share.add("hostile", f"h{number}")
    assert start_all(share) == ["h0", "h1", "h2", "h3"]
    assert (share.running, share.waiting) == (4, 2)
    share.finish("hostile")
    assert start_all(share) == ["h4"]


def test_a_tenant_under_its_share_starts_at_once_though_another_holds_every_thread():
    """Issue 39, item 1: four slow KfDefs of one namespace held all four threads; another namespace waited."""
    share: FairShare[str] = FairShare(4)
    for number in range(8):
        share.add("hostile", f"h{number}")
    assert start_all(share) == ["h0", "h1", "h2", "h3"]
    share.add("small", "s0")
    assert start_all(share) == ["s0"]  # beyond the four: its share is two, it runs none
    assert (share.running, share.running_of("small"), share.share()) == (5, 1, 2)
    share.add("small", "s1")
    assert start_all(share) == ["s1"]
    share.add("small", "s2")
    assert start_all(share) == []  # two running: its whole share
    share.finish("hostile")
    assert start_all(share) == []  # five still run, more than the four threads: nobody over its share starts
    share.finish("small")
    share.finish("small")
    assert start_all(share) == ["s2"]  # the tenant running fewer goes first
    share.finish("small")
    assert start_all(share) == ["h4"]


def test_a_free_thread_goes_to_the_tenant_running_fewest_then_to_the_one_waiting_longest():
    share: FairShare[str] = FairShare(3)
    for job in ("a0", "a1", "a2", "a3", "b0", "b1", "c0"):
        share.add(job[0], job)
    assert start_all(share) == ["a0", "b0", "c0"]  # one each, not a's three first
    share.finish("c")
    assert start_all(share) == ["a1"]  # a and b run one each; a's next job came first
    share.finish("a")
    share.finish("a")
    assert start_all(share) == ["a2", "a3"]  # a runs none, then as many as b; a3 came before b1
    assert share.waiting == 1


def test_every_tenant_gets_one_thread_when_there_are_more_tenants_than_threads_within_twice_the_size():
    share: FairShare[str] = FairShare(2)
    share.add("a", "a0")
    share.add("a", "a1")
    assert start_all(share) == ["a0", "a1"]
    for tenant in "bcde":
        share.add(tenant, f"{tenant}0")
    assert start_all(share) == ["b0", "c0"]  # twice the size at most
    assert (share.running, share.waiting, share.share()) == (4, 2, 1)
    share.finish("a")
    assert start_all(share) == ["d0"]


def test_withdrawn_jobs_never_start():
    share: FairShare[str] = FairShare(1)
    share.add("a", "a0")
    share.add("a", "a1")
    share.add("b", "b0")
    assert start_all(share) == ["a0", "b0"]
    assert share.withdraw("a", "a1") and not share.withdraw("a", "a0")
    share.finish("a")
    share.finish("b")
    assert start_all(share) == [] and share.waiting == 0
    share.add("c", "c0")
    assert share.withdraw_all() == ["c0"] and start_all(share) == []


def test_a_pool_needs_a_thread():
    with pytest.raises(ValueError, match="at least one thread"):
        FairShare(0)
