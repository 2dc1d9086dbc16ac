"""Waiting for an object's next watch event (Tracker.next_event): what a CRD's Established wait sleeps on."""

from __future__ import annotations

import asyncio

from kfdef_operator.runtime.tracker import Tracker
from kfdef_operator.ssa.inventory import ref_of

CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n", "uid": "u"}}
OTHER = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d", "namespace": "n", "uid": "v"}}


def test_a_waiter_wakes_at_the_objects_next_event_and_not_at_anothers():
    async def scenario() -> tuple[bool, bool]:
        tracker = Tracker(None, lambda *_: None)  # type: ignore[arg-type]  # no watch runs: events handed in
        waiter = asyncio.create_task(tracker.next_event(ref_of(CONFIG_MAP), 30))
        await asyncio.sleep(0)
        tracker._dispatch("ADDED", OTHER)
        await asyncio.sleep(0)
        woken_by_other = waiter.done()
        tracker._dispatch("MODIFIED", CONFIG_MAP)
        await asyncio.wait_for(waiter, 5)  # far below the waiter's own 30 s
        return woken_by_other, not tracker._waiters

    woken_by_other, nothing_left = asyncio.run(scenario())
    assert not woken_by_other
    assert nothing_left


def test_a_waiter_returns_after_its_timeout_without_an_event():
    async def scenario() -> bool:
        tracker = Tracker(None, lambda *_: None)  # type: ignore[arg-type]
        await tracker.next_event(ref_of(CONFIG_MAP), 0.05)
        return not tracker._waiters

    assert asyncio.run(scenario())
