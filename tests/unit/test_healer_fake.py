"""Healer against the in-memory API server, in virtual time, fed by the real Tracker's watches: what is put back and
how, the backoff against a fight, retries of refused heals, objects someone else took, a watch that ends."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from kfdef_operator.runtime.events import EventRecorder
from kfdef_operator.runtime.heal import Healer
from kfdef_operator.runtime.heal_policy import FIGHT_THRESHOLD
from kfdef_operator.runtime.identity import Identities
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.runtime.stack_events import StackEvents
from kfdef_operator.runtime.tracker import Tracker
from kfdef_operator.ssa.aggregation import AGGREGATION_CONTROLLER
from kfdef_operator.ssa.changeset import Action, Change
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.inventory import ref_of
from tests import virtual_time
from tests.fake_kube import FakeApiServer

OWNER = Owner("stack", "apps", "uid-of-the-kfdef")
CM_PATH = "/api/v1/namespaces/apps/configmaps/settings"


def config_map(name: str = "settings", **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "apps"},
            "data": data or {"mode": "on"}}


@dataclass
class Healing:
    """A stack applied through its identity's ResourceManager, its objects watched by a Tracker whose events go to
    the Healer (StackEvents)."""

    server: FakeApiServer
    stack: Stack
    healer: Healer
    tracker: Tracker
    reports: list[float]

    async def settle(self, seconds: float = 0.5) -> None:
        await asyncio.sleep(seconds)

    async def close(self) -> None:
        await self.healer.stop()
        await self.tracker.close()


async def healing(server: FakeApiServer, objects: list[dict]) -> Healing:
    kube = server.client()
    discovery = Discovery(kube)
    await discovery.refresh()
    stack = Stack(OWNER, 1)
    reports: list[float] = []
    tracker = Tracker(kube, lambda *event: stack_events(*event))  # its events come once it watches
    identities = Identities(kube, discovery, tracker, concurrency=24)
    stack.identity = identities.of(OWNER.namespace, "")
    manager = identities.manager(stack.identity)
    healer = Healer(identities, tracker, EventRecorder(kube), {stack.key: stack},
                    lambda _: reports.append(virtual_time.now()))
    stack_events = StackEvents(lambda label: stack if label == OWNER.label else None, healer, lambda _: None)
    resolved = [(obj, discovery.cached(obj["apiVersion"], obj["kind"])) for obj in objects]
    stack.want({ref_of(obj): obj for obj in objects})
    stack.resources = {ref_of(obj): resource for obj, resource in resolved}
    await tracker.watch({(resource, "") for _, resource in resolved})
    stack.record_apply(await manager.apply_all(OWNER, resolved, []))
    healer.applied(stack)
    await asyncio.sleep(1)  # the apply's own watch events pass
    return Healing(server, stack, healer, tracker, reports)


def cluster() -> FakeApiServer:
    server = FakeApiServer()
    server.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}})
    return server


def test_a_deleted_object_is_created_again_create_only_within_milliseconds() -> None:
    server = cluster()

    async def scenario():
        h = await healing(server, [config_map()])
        deleted_at = virtual_time.now()
        server.remove(CM_PATH)
        await h.settle()
        await h.close()
        return h, deleted_at

    h, deleted_at = virtual_time.run(scenario())
    (create,) = server.received("POST", "/namespaces/apps/configmaps")
    assert create.at - deleted_at < 0.1
    applies = [r for r in server.received("PATCH", CM_PATH) if "apply-patch" in r.content_type]
    assert len(applies) == 1, "put back by a create, never by an apply that could overwrite"
    assert server.get(CM_PATH)["data"] == {"mode": "on"}
    assert OWNER.claim(server.get(CM_PATH)["metadata"]).value == "ours"
    assert h.stack.changes[ref_of(config_map())].action is Action.CREATED
    assert any("Healed" in str(r.body) for r in server.received("POST", "/events"))


def test_drift_is_re_asserted_and_fields_of_other_managers_stay() -> None:
    server = cluster()

    def tamper(obj: dict) -> None:
        obj["data"]["mode"] = "off"
        obj["metadata"].setdefault("labels", {})["team"] = "theirs"

    async def scenario():
        h = await healing(server, [config_map()])
        server.modify(CM_PATH, tamper)
        await h.settle()
        await h.close()

    virtual_time.run(scenario())
    healed = server.get(CM_PATH)
    assert healed["data"] == {"mode": "on"}
    assert healed["metadata"]["labels"]["team"] == "theirs"


def healed(obj: dict | None) -> bool:
    """Created again, and its fields recorded as applied (the heal's last request)."""
    return obj is not None and any(e["operation"] == "Apply" for e in obj["metadata"]["managedFields"])


def test_an_object_deleted_again_and_again_is_healed_with_growing_pauses_and_named_as_a_fight() -> None:
    server = cluster()
    rounds = FIGHT_THRESHOLD + 3

    async def scenario():
        h = await healing(server, [config_map()])
        deletions = []
        for _ in range(rounds):
            while not healed(server.get(CM_PATH)):  # wait for the heal, however long it is held back
                await asyncio.sleep(0.01)
            deletions.append(virtual_time.now())
            server.remove(CM_PATH)
        await h.settle(10)
        problems = dict(h.stack.problems)
        await h.close()
        return deletions, problems

    deletions, problems = virtual_time.run(scenario())
    creates = [r.at for r in server.received("POST", "/namespaces/apps/configmaps")]
    waits = [round(create - deleted, 1) for deleted, create in zip(deletions, creates, strict=True)]
    assert waits[:FIGHT_THRESHOLD] == [0.0] * FIGHT_THRESHOLD
    assert waits[FIGHT_THRESHOLD:] == [1.0, 2.0, 4.0]
    assert any("something keeps deleting or changing it" in p for p in problems.values())


def test_a_refused_heal_is_retried_after_doubling_pauses_and_reported_failed_meanwhile() -> None:
    server = cluster()

    async def scenario():
        h = await healing(server, [config_map()])
        server.fail("POST", "/namespaces/apps/configmaps", 500, "etcdserver: leader changed", times=3)
        server.remove(CM_PATH)
        await asyncio.sleep(1.0)
        during = h.stack.changes[ref_of(config_map())]
        await h.settle(5)
        await h.close()
        return during, h.stack.changes[ref_of(config_map())]

    during, after = virtual_time.run(scenario())
    attempts = server.received("POST", "/namespaces/apps/configmaps")
    assert [a.status for a in attempts] == [500, 500, 500, 201]
    pauses = [round(b.at - a.answered_at, 2) for a, b in zip(attempts, attempts[1:], strict=False)]
    assert pauses == [0.5, 1.0, 2.0]
    assert during.action is Action.FAILED and "leader changed" in during.message
    assert after.action is Action.CREATED


def test_a_heal_refused_for_its_content_is_reported_and_not_sent_again() -> None:
    server = cluster()

    async def scenario():
        h = await healing(server, [config_map()])
        server.fail("POST", "/namespaces/apps/configmaps", 422, 'ConfigMap "settings" is invalid: data: Too long',
                    reason="Invalid", times=None)
        server.remove(CM_PATH)
        await h.settle(120)
        await h.close()
        return h.stack.changes[ref_of(config_map())]

    change = virtual_time.run(scenario())
    assert change.refused and "Too long" in change.message
    assert len(server.received("POST", "/namespaces/apps/configmaps")) == 1


def test_an_object_someone_else_created_after_the_delete_is_left_to_them() -> None:
    server = cluster()

    async def scenario():
        h = await healing(server, [config_map()])
        server.before("POST", "/namespaces/apps/configmaps", lambda _: server.put(config_map(mode="theirs")))
        removed_at = virtual_time.now()
        server.remove(CM_PATH)
        await h.settle()
        await h.close()
        return h.stack.changes[ref_of(config_map())], removed_at

    change, change_at = virtual_time.run(scenario())
    assert change.action is Action.CONFLICT
    assert server.get(CM_PATH)["data"] == {"mode": "theirs"}
    assert [r for r in server.received("PATCH", CM_PATH) if r.at > change_at] == [], "never stamped or overwritten"


def suspend(stack: Stack) -> None:
    stack.suspended = True


def lose_identity(stack: Stack) -> None:
    stack.identity = None  # as before its first reconcile settles who it acts as


@pytest.mark.parametrize("change", [suspend, lose_identity], ids=["suspended", "acting as no identity yet"])
def test_a_stack_suspended_or_without_an_identity_is_not_healed(change) -> None:
    server = cluster()

    async def scenario():
        h = await healing(server, [config_map()])
        change(h.stack)
        server.remove(CM_PATH)
        await h.settle(5)
        await h.close()

    virtual_time.run(scenario())
    assert server.get(CM_PATH) is None
    assert not server.received("POST", "/namespaces/apps/configmaps")


def test_a_deletion_while_the_watch_was_down_is_healed_once_it_is_back() -> None:
    server = cluster()

    async def scenario():
        h = await healing(server, [config_map()])
        server.fail("GET", "/configmaps", 500, "watch refused", when=lambda r: "watch" in r.params, times=1)
        server.end_watches()
        server.remove(CM_PATH)  # while no watch is open
        await h.settle(5)
        await h.close()

    virtual_time.run(scenario())
    assert server.get(CM_PATH) is not None
    assert len(server.received("POST", "/namespaces/apps/configmaps")) == 1


def test_a_retried_heal_of_an_object_created_again_meanwhile_sends_no_create() -> None:
    server = cluster()

    async def scenario():
        h = await healing(server, [config_map()])
        server.fail("POST", "/namespaces/apps/configmaps", 500, "etcdserver: leader changed", times=1)
        server.remove(CM_PATH)
        await asyncio.sleep(0.1)  # the first attempt failed; its retry waits 0.5 s
        stamped = OWNER.stamp(config_map(), namespaced=True, adopted=False)
        server.put(stamped, manager="kfdef-operator")  # as the reconcile's apply re-creates it meanwhile
        await h.settle(2)
        await h.close()
        return h.stack.changes[ref_of(config_map())]

    change = virtual_time.run(scenario())
    assert [a.status for a in server.received("POST", "/namespaces/apps/configmaps")] == [500]
    assert server.get(CM_PATH)["data"] == {"mode": "on"}
    assert change.action is not Action.CONFLICT


def test_a_heal_does_not_wait_for_an_earlier_heal_of_another_object() -> None:
    """One object's heal hangs after its create (the server never answers the follow-up): the next object
    deleted comes back at once all the same, each object healed by one create only."""
    server = cluster()
    other_path = "/api/v1/namespaces/apps/configmaps/other"

    async def scenario():
        h = await healing(server, [config_map(), config_map("other")])
        server.fail("PATCH", CM_PATH, 504, hang=True, times=None)
        server.remove(CM_PATH)
        await h.settle()
        deleted_at = virtual_time.now()
        server.remove(other_path)
        await h.settle()
        await h.close()
        return deleted_at

    deleted_at = virtual_time.run(scenario())
    creates = server.received("POST", "/namespaces/apps/configmaps")
    assert [c.body["metadata"]["name"] for c in creates] == ["settings", "other"]
    assert creates[1].at - deleted_at < 0.1
    assert server.get(other_path) is not None


def test_a_status_update_right_after_the_create_does_not_make_recording_the_apply_conflict() -> None:
    """A controller writes the new object's status at once (a Deployment's): the follow-up that turns the
    create's ``Update`` entry into the ``Apply`` one is not refused for it, so one request does it."""
    server = cluster()

    def controller_writes_status(_) -> None:
        server.modify(CM_PATH, lambda obj: obj.setdefault("status", {}).__setitem__("seen", True))

    async def scenario():
        h = await healing(server, [config_map()])
        server.before("PATCH", CM_PATH, controller_writes_status)
        server.remove(CM_PATH)
        await h.settle()
        await h.close()

    virtual_time.run(scenario())
    follow_ups = [r for r in server.received("PATCH", CM_PATH) if "apply-patch" not in r.content_type]
    assert [r.status for r in follow_ups] == [200]
    entries = server.get(CM_PATH)["metadata"]["managedFields"]
    assert [e["operation"] for e in entries if e["manager"] == OWNER.field_manager] == ["Apply"]


ADMIN = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "admin"},
         "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"to-admin": "true"}}]}, "rules": []}
ADMIN_PATH = "/apis/rbac.authorization.k8s.io/v1/clusterroles/admin"


def _heal_raced(server: FakeApiServer, manager: str) -> Change:
    """The stack's aggregated role ``admin`` deleted, and a role with rules only created at its name by ``manager``
    just before the heal's create arrives; the heal's result."""
    rules_only = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "admin"},
                  "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}

    async def scenario():
        h = await healing(server, [ADMIN])
        server.before("POST", "/clusterroles", lambda _: server.put(rules_only, manager=manager))
        server.remove(ADMIN_PATH)
        await h.settle()
        await h.close()
        return h.stack.changes[ref_of(ADMIN)]

    return virtual_time.run(scenario())


def test_an_echo_of_a_deleted_aggregated_role_that_beat_the_heal_is_replaced_by_the_stacks_role() -> None:
    """kube-controller-manager's aggregation controller may write the rules of an aggregated role it read just
    before the role's deletion: an apply that creates it anew, rules only. Left there, it aggregates nothing."""
    server = cluster()
    assert _heal_raced(server, AGGREGATION_CONTROLLER).action is Action.CREATED
    (deleted,) = server.received("DELETE", ADMIN_PATH)
    assert deleted.body["preconditions"]["uid"], "only the very echo read"
    healed = server.get(ADMIN_PATH)
    assert healed["aggregationRule"] == ADMIN["aggregationRule"]
    assert OWNER.claim(healed["metadata"]).value == "ours"


def test_a_role_someone_else_created_at_an_aggregated_roles_name_is_left_to_them() -> None:
    server = cluster()
    assert _heal_raced(server, "kubectl-create").action is Action.CONFLICT
    assert server.received("DELETE", ADMIN_PATH) == []
    assert "aggregationRule" not in server.get(ADMIN_PATH)
