"""Reconciler against the in-memory API server, in virtual time: a KfDef's whole run (finalizer, apply, status,
events), retries after failures spaced by the backoff, teardown on deletion, stepping down as leader.

Only rendering is canned (tests/fake_operator.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from kfdef_operator.api.names import FINALIZER
from kfdef_operator.controller.reconciler import Reconciler
from kfdef_operator.controller.wiring import assemble
from kfdef_operator.ssa.inventory import ObjectRef
from tests import virtual_time
from tests.fake_kube import FakeApiServer
from tests.fake_operator import CM_COLLECTION, KFDEF, NAME, NAMESPACE, OBJECTS, cluster, kfdef, settings, source


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return source(tmp_path)


@contextlib.asynccontextmanager
async def operator(server: FakeApiServer, repo: Path, *, gate: asyncio.Event | None = None,
                   create: bool = True, objects: tuple[dict[str, Any], ...] = OBJECTS) -> AsyncIterator[Reconciler]:
    """A started Reconciler handed the KfDef's watch events (as kopf does), and the KfDef created (unless
    ``create`` is false: a restart finds it); it renders ``objects``."""
    reconciler = Reconciler(assemble(server.client(), settings(repo, objects), gate=gate))
    await reconciler.start()
    kube = server.client()

    async def follow() -> None:
        async for event in kube.watch(f"/apis/kfdef.apps.kubeflow.org/v1/namespaces/{NAMESPACE}/kfdefs",
                                      timeout_seconds=100_000):
            reconciler.observe(event["type"], event["object"])

    feed = asyncio.create_task(follow())
    if create:
        server.put(kfdef(repo))
    try:
        yield reconciler
    finally:
        feed.cancel()
        await asyncio.gather(feed, return_exceptions=True)
        await reconciler.stop()


async def until(check: Callable[[], object], *, within: float = 120.0) -> None:
    deadline = virtual_time.now() + within
    while not check():
        assert virtual_time.now() < deadline, "not reached in time"
        await asyncio.sleep(0.5)


def succeeded() -> float:
    """Runs that succeeded so far, in this process (the operator's metric)."""
    return REGISTRY.get_sample_value("kfdef_reconcile_duration_seconds_count", {"result": "success"}) or 0.0


def condition(server: FakeApiServer, kind: str) -> dict:
    body = server.get(KFDEF) or {}
    return next((c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def test_a_new_kfdef_gets_its_finalizer_before_anything_is_applied_then_its_objects_and_status(repo) -> None:
    server = cluster()

    async def scenario():
        async with operator(server, repo):
            await until(lambda: condition(server, "Ready").get("status") == "True")

    virtual_time.run(scenario())
    finalizer = next(r for r in server.received("PATCH", KFDEF) if "finalizers" in str(r.body))
    first_object_write = next(r for r in server.received(writes_only=True) if "/namespaces/apps" in r.path)
    assert finalizer.answered_at <= first_object_write.at
    assert FINALIZER in server.get(KFDEF)["metadata"]["finalizers"]
    assert {o["metadata"]["name"] for o in server.objects("ConfigMap")} == {"first", "second"}
    status = server.get(KFDEF)["status"]
    assert status["observedGeneration"] == 1
    assert any("Applied" in str(r.body) for r in server.received("POST", f"/namespaces/{NAMESPACE}/events"))


def test_an_object_denied_by_admission_is_retried_with_the_backoff_and_reported_meanwhile(repo) -> None:
    server = cluster()

    async def scenario():
        server.fail("PATCH", f"{CM_COLLECTION}/second", 400,
                    'admission webhook "guard.example.com" denied the request: not yet', times=3)
        async with operator(server, repo):
            await until(lambda: "denied" in condition(server, "Ready").get("message", ""))
            reported = condition(server, "Ready")
            await until(lambda: condition(server, "Ready").get("status") == "True", within=300)
        return reported

    reported = virtual_time.run(scenario())
    assert reported["status"] == "False" and "second" in reported["message"]
    attempts = server.received("PATCH", f"{CM_COLLECTION}/second")
    assert [a.status for a in attempts] == [400, 400, 400, 201]
    pauses = [round(b.at - a.answered_at) for a, b in itertools.pairwise(attempts)]
    assert pauses == [10, 20, 40], "retried after 10 s doubling (the policy may change)"
    assert [o["metadata"]["name"] for o in server.objects("ConfigMap")] == ["first", "second"]


def test_an_object_refused_for_its_content_is_reported_once_and_sent_again_only_at_the_resync(repo) -> None:
    server = cluster()

    async def scenario():
        server.fail("PATCH", f"{CM_COLLECTION}/second", 422, "data: Invalid value: refused", reason="Invalid",
                    times=None)
        async with operator(server, repo):
            await until(lambda: "refused" in condition(server, "Ready").get("message", ""))
            writes_when_reported = len(server.received(writes_only=True))
            await asyncio.sleep(540)  # virtual: most of the 600 s resync interval (jittered by 10 %)
            at_rest = server.received(writes_only=True)[writes_when_reported:]
            await until(lambda: len(server.received("PATCH", f"{CM_COLLECTION}/second")) == 2, within=240)
        return at_rest

    at_rest = virtual_time.run(scenario())
    assert at_rest == [], "a refusal for content is not sent again, nor reported again, before the resync"
    first, second = server.received("PATCH", f"{CM_COLLECTION}/second")
    assert 540 <= second.at - first.answered_at <= 660 + 10, "sent again at the resync"


def test_a_restart_lists_each_kind_once_and_still_puts_back_what_changed_while_the_operator_was_down(repo) -> None:
    server = cluster()
    first = f"{CM_COLLECTION}/first"

    async def scenario():
        async with operator(server, repo):
            await until(lambda: condition(server, "Ready").get("status") == "True")
        server.modify(first, lambda obj: obj["data"].__setitem__("k", "changed while down"))
        restarted, runs = len(server.log), succeeded()
        async with operator(server, repo, create=False):
            await until(lambda: succeeded() > runs and server.get(first)["data"] == {"k": "v"})
        return server.log[restarted:]

    after_restart = virtual_time.run(scenario())
    listings = [r for r in after_restart
                if r.method == "GET" and r.path.endswith("/configmaps") and not r.params.get("watch")]
    assert len(listings) == 1, "the watch's first listing compares every object; the run does not list them again"
    assert [r.path for r in after_restart if r.method == "PATCH" and r.path.startswith(CM_COLLECTION)
            and not r.dry_run] == [first], "only the changed object is sent again"


def test_an_inventory_in_the_first_format_is_pruned_from_and_replaced_by_the_next_status_write(repo) -> None:
    server = cluster()
    second = f"{CM_COLLECTION}/second"

    def first_format(obj: dict) -> None:  # what the operator wrote before status.inventory held strings
        obj["status"]["inventory"] = {"entries": [
            {"id": "_apps__Namespace", "v": "v1", "a": 0}, {"id": "apps_first__ConfigMap", "v": "v1", "a": 0},
            {"id": "apps_second__ConfigMap", "v": "v1", "a": 0}]}

    async def scenario():
        async with operator(server, repo):
            await until(lambda: condition(server, "Ready").get("status") == "True")
        server.modify(KFDEF, first_format)
        runs = succeeded()
        async with operator(server, repo, create=False, objects=OBJECTS[:2]):
            await until(lambda: succeeded() > runs and server.get(second) is None)

    virtual_time.run(scenario())
    assert server.get(second) is None, "pruned: the first format's inventory was read"
    assert server.get(KFDEF)["status"]["inventory"] == {"applications": [
        {"name": "app", "objects": ["_apps__Namespace_v1", "apps_first__ConfigMap_v1"]}]}


def applied_then_deleted(repo: Path) -> FakeApiServer:
    """The KfDef applied until Ready, then deleted until gone."""
    server = cluster()

    async def scenario():
        async with operator(server, repo):
            await until(lambda: condition(server, "Ready").get("status") == "True")
            await server.client().request("DELETE", KFDEF)
            await until(lambda: server.get(KFDEF) is None)

    virtual_time.run(scenario())
    return server


def test_a_kfdef_no_longer_served_here_is_not_healed_here(repo) -> None:
    """A KfDef that stops being served here (deleted, or moved to another shard) gets no write from this instance.

    Two watch events in this order decided a flaky HA run: the KfDef leaving this shard, then one of its objects
    deleted. The new shard heals that object; the old one must not heal it too. The test hands both at once."""
    server = cluster()
    first = ObjectRef("", "ConfigMap", "apps", "first")

    async def scenario() -> tuple[object, float]:
        async with operator(server, repo) as reconciler:
            await until(lambda: condition(server, "Ready").get("status") == "True")
            live = reconciler.parts.tracker.get(first)
            assert live is not None
            reconciler.observe("DELETED", server.get(KFDEF))  # what the watch says when the shard label changes
            server.remove(f"{CM_COLLECTION}/first")
            scheduled = reconciler.parts.stack_events("DELETED", first, live, None)
            released = virtual_time.now()
            await asyncio.sleep(30)
        return scheduled, released

    scheduled, released = virtual_time.run(scenario())
    assert scheduled is None, "a heal was scheduled for a KfDef this instance no longer serves"
    assert [f"{r.method} {r.path}" for r in server.received(writes_only=True) if r.at >= released] == []
    assert server.get(f"{CM_COLLECTION}/first") is None


def test_a_deleted_kfdef_is_torn_down_and_let_go(repo) -> None:
    server = applied_then_deleted(repo)
    assert server.objects("ConfigMap") == [] and not [n for n in server.objects("Namespace")
                                                     if n["metadata"]["name"] == "apps"]
    deletes = [r.path.rpartition("/")[2] for r in server.received("DELETE") if "/namespaces/apps" in r.path
               or r.path.endswith("/namespaces/apps")]
    assert deletes and deletes[0] == "apps", "Namespaces go first in the last wave (their emptying takes longest)"


def test_a_teardown_held_by_a_finalizer_is_retried_with_the_backoff_and_reported(repo) -> None:
    server = cluster()

    async def scenario():
        async with operator(server, repo):
            await until(lambda: condition(server, "Ready").get("status") == "True")
            server.modify(f"{CM_COLLECTION}/first",
                          lambda obj: obj["metadata"].__setitem__("finalizers", ["example.com/hold"]))
            await server.client().request("DELETE", KFDEF)
            await asyncio.sleep(400)
            still_there = server.get(KFDEF) is not None
            server.modify(f"{CM_COLLECTION}/first", lambda obj: obj["metadata"].__setitem__("finalizers", []))
            await until(lambda: server.get(KFDEF) is None, within=200)
        return still_there

    assert virtual_time.run(scenario()), "the KfDef is held while one of its objects is"
    stuck = [r for r in server.received("POST", f"/namespaces/{NAMESPACE}/events") if "TeardownStuck" in str(r.body)]
    assert stuck and "example.com/hold" in str(stuck[0].body)
    # Each run waits the wave timeout (60 s) for the held object, then the next run comes 5 s, 10 s, 20 s... later.
    runs = [r for r in server.received("DELETE", f"{CM_COLLECTION}/first")]
    pauses = [round(b.at - a.answered_at - 60) for a, b in itertools.pairwise(runs)]
    assert pauses[:3] == [5, 10, 20], pauses


def test_stepping_down_stops_every_write_at_once(repo) -> None:
    server = cluster()

    async def scenario():
        gate = asyncio.Event()
        async with operator(server, repo, gate=gate) as reconciler:
            await asyncio.sleep(5)
            standby_writes = len(server.received(writes_only=True))
            reconciler.take_over()
            await until(lambda: condition(server, "Ready").get("status") == "True")
            reconciler.step_down()
            stepped_down = virtual_time.now()
            server.remove(f"{CM_COLLECTION}/first")  # a leader would heal this at once
            await asyncio.sleep(30)
        return standby_writes, stepped_down

    standby_writes, stepped_down = virtual_time.run(scenario())
    assert standby_writes == 0, "a standby writes nothing"
    assert [r for r in server.received(writes_only=True) if r.at >= stepped_down] == []


def test_a_leader_taking_over_a_written_status_exports_its_conditions(repo) -> None:
    """Stepping down drops a KfDef's condition metrics; leading again over a status that needs no write (the
    usual failover, or a lease lost under load and won back) exports them all the same."""
    server = cluster()
    labels = {"namespace": NAMESPACE, "name": NAME, "type": "Ready"}

    async def scenario():
        async with operator(server, repo, gate=asyncio.Event()) as reconciler:
            reconciler.take_over()
            await until(lambda: condition(server, "Ready").get("status") == "True")
            reconciler.step_down()
            dropped = REGISTRY.get_sample_value("kfdef_condition", labels)
            writes, runs = len(server.received(writes_only=True)), succeeded()
            reconciler.take_over()
            await until(lambda: succeeded() > runs)
            return dropped, server.received(writes_only=True)[writes:]

    dropped, writes = virtual_time.run(scenario())
    assert dropped is None
    assert writes == [], "the status was right: nothing written"
    assert REGISTRY.get_sample_value("kfdef_condition", labels) == 1.0


def events_posted(server: FakeApiServer) -> list[str]:
    return [r.body["reason"] for r in server.received("POST", f"/namespaces/{NAMESPACE}/events")]


def test_a_run_is_reported_once_it_is_over_its_status_first_then_its_events_then_the_finalizer(repo) -> None:
    server = applied_then_deleted(repo)
    kfdef_writes = [r for r in server.received(writes_only=True) if r.path.startswith(KFDEF)
                    or "/events" in r.path]
    said = [("event " + r.body["reason"]) if "/events" in r.path
            else "finalizer" if "finalizers" in str(r.body) else "status" for r in kfdef_writes]
    applied, deleted = said.index("event Applied"), said.index("event Deleted")
    assert said[:applied] == ["finalizer", "status", "status", "status", "status", "status", "event Ready"], \
        "the steps, the inventory, then the outcome's status, which turns Ready"
    assert said[deleted - 2:] == ["status", "status", "event Deleted", "finalizer"], \
        "'deleting 3 objects', the emptied inventory, the Event, and only then the finalizer goes"


def test_a_result_the_status_cannot_hold_fails_the_run_which_is_retried(repo) -> None:
    server = cluster()

    async def scenario():
        # The run's last status write (the only one with a summary) is refused once.
        server.fail("PATCH", f"{KFDEF}/status", 403, "forbidden for now",
                    when=lambda r: "summary" in (r.body or {}).get("status", {}))
        async with operator(server, repo):
            await until(lambda: condition(server, "Reconciling").get("reason") == "StatusNotWritten")
            refused = virtual_time.now()
            await until(lambda: condition(server, "Ready").get("status") == "True")
            return virtual_time.now() - refused

    took = virtual_time.run(scenario())
    assert 5 <= took < 10, "retried after 5 s"
    assert events_posted(server)[:1] == ["StatusNotWritten"], "said once, instead of the run's own Events"
    assert "Applied" not in events_posted(server)[:2]


def test_a_new_generation_backs_off_from_the_start_again(repo) -> None:
    server = cluster()
    second = f"{CM_COLLECTION}/second"

    async def scenario():
        server.fail("PATCH", second, 400, 'admission webhook "guard.example.com" denied the request: no',
                    times=None)
        async with operator(server, repo):
            await until(lambda: len(server.received("PATCH", second)) == 4, within=300)  # 10, 20, 40 s apart
            server.modify(KFDEF, lambda obj: obj.__setitem__("spec", {**obj["spec"], "interval": "20m"}))
            await until(lambda: len(server.received("PATCH", second)) == 7, within=300)

    virtual_time.run(scenario())
    attempts = server.received("PATCH", second)
    pauses = [round(b.at - a.answered_at) for a, b in itertools.pairwise(attempts)]
    assert pauses[:3] == [10, 20, 40]
    assert pauses[4:] == [10, 20], "the new generation's own failures count from the first"
