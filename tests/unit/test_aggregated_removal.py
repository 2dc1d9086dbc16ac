"""Removing aggregated ClusterRoles against the in-memory API server, in virtual time: in levels, each gone before
the roles it draws from are deleted, and the echoes kube-controller-manager's aggregation controller makes of them
deleted after the wave (``kfdef_operator.ssa.aggregation``)."""

from __future__ import annotations

import asyncio

import pytest

from kfdef_operator.ssa.aggregation import AGGREGATION_CONTROLLER
from kfdef_operator.ssa.changeset import Action
from kfdef_operator.ssa.inventory import ObjectRef, ref_of
from kfdef_operator.ssa.teardown import _ECHO_WINDOW_S
from tests import virtual_time
from tests.fake_kube import FakeApiServer, Received
from tests.unit.test_aggregation import RBAC, READ_PODS, cluster_role
from tests.unit.test_manager_fake import OWNER, apply_all, config_map, manager_on, namespace

#: Kubeflow's chain: admin draws from edit, edit from its part.
ADMIN = cluster_role("admin", aggregates_label="to-admin")
EDIT = cluster_role("edit", labels={"to-admin": "true"}, aggregates_label="to-edit")
PART = cluster_role("part", labels={"to-edit": "true"}, rules=READ_PODS)
STACK = [namespace("apps"), config_map("c1"), ADMIN, EDIT, PART]


def inventory(objects: list[dict]) -> dict[ObjectRef, str]:
    return {ref_of(obj): obj["apiVersion"].rpartition("/")[2] for obj in objects}


def role_path(name: str) -> str:
    return f"/apis/{RBAC}/clusterroles/{name}"


def echo_when_part_goes(server: FakeApiServer, *, manager: str = AGGREGATION_CONTROLLER) -> None:
    """What the aggregation controller does when its cache still held ``admin`` as ``part`` went: it puts
    ``admin`` back, holding nothing but rules (``manager``: someone else re-creating it instead)."""
    def echo(_: Received) -> None:
        server.put({"apiVersion": RBAC, "kind": "ClusterRole", "metadata": {"name": "admin"}, "rules": READ_PODS},
                   manager=manager)
    server.before("DELETE", role_path("part"), echo)


def test_an_echo_of_a_torn_down_aggregated_role_is_deleted_once_the_controller_had_its_window() -> None:
    server = FakeApiServer()
    echo_when_part_goes(server)

    async def scenario():
        manager = await manager_on(server)
        await apply_all(manager, STACK)
        started = virtual_time.now()
        result = await manager.teardown(OWNER, inventory(STACK), wave_timeout=60)
        return started, result

    started, result = virtual_time.run(scenario())
    assert result.done, result.remaining
    assert server.objects() == [], "nothing of the stack left, its echo neither"
    deletes = server.received("DELETE", role_path("admin"))
    assert len(deletes) == 2, "the role, then its echo"
    assert deletes[1].at >= started + _ECHO_WINDOW_S - 0.5
    assert (deletes[1].body.get("preconditions") or {}).get("uid"), "only the very echo read"


@pytest.mark.parametrize("manager", [AGGREGATION_CONTROLLER, "kubectl-client-side-apply"])
def test_a_prune_deletes_an_echo_and_keeps_a_role_someone_else_made_at_that_name(manager: str) -> None:
    server = FakeApiServer()
    echo_when_part_goes(server, manager=manager)

    async def scenario():
        manager = await manager_on(server)
        await apply_all(manager, STACK)
        return await manager.prune(OWNER, inventory([ADMIN, EDIT, PART]))

    changes = virtual_time.run(scenario())
    assert {change.ref.name: change.action for change in changes} == dict.fromkeys(["admin", "edit", "part"],
                                                                                   Action.DELETED)
    left = server.get(role_path("admin"))
    if manager == AGGREGATION_CONTROLLER:
        assert left is None and len(server.received("DELETE", role_path("admin"))) == 2
    else:
        assert left is not None and left["metadata"]["managedFields"][0]["manager"] == manager
        assert len(server.received("DELETE", role_path("admin"))) == 1


def test_aggregated_roles_go_in_levels_each_gone_before_what_it_draws_from_and_other_kinds_do_not_wait() -> None:
    server = FakeApiServer()

    async def scenario():
        manager = await manager_on(server)
        await apply_all(manager, STACK)
        # A finalizer holds admin for 2 s (someone's cleanup): edit and part wait for it, the ConfigMap does not.
        server.modify(role_path("admin"), lambda obj: obj["metadata"].__setitem__("finalizers", ["example.com/x"]))

        async def release_later():
            await asyncio.sleep(2)
            server.modify(role_path("admin"), lambda obj: obj["metadata"].__setitem__("finalizers", []))

        releaser = asyncio.create_task(release_later())
        started = virtual_time.now()
        result = await manager.teardown(OWNER, inventory(STACK), wave_timeout=60)
        await releaser
        return started, result

    started, result = virtual_time.run(scenario())
    assert result.done, result.remaining
    deletes = {r.path.rpartition("/")[2]: r.at for r in server.received("DELETE")}
    assert deletes["admin"] < started + 1 and deletes["c1"] < started + 1 and deletes["apps"] < started + 1
    assert started + 2 <= deletes["edit"] < deletes["part"], deletes
    assert server.objects() == []
