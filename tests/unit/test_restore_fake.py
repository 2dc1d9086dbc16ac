"""ResourceManager.restore, a heal's write, against the in-memory API server: the apply's ownership rule without
adopting anything, a create-only create, and writes only when a dry run shows they change something."""

from __future__ import annotations

import pytest

from kfdef_operator.api.names import RECONCILE_ANNOTATION, RECONCILE_DISABLED
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.ssa.changeset import Action, Change
from kfdef_operator.ssa.claims import Claim
from kfdef_operator.ssa.manager import ResourceManager
from tests import virtual_time
from tests.fake_kube import FakeApiServer
from tests.unit.test_manager_fake import config_map, manager_on

OWNER = Owner("stack", "owners", "uid-of-the-kfdef")
OTHER = Owner("other", "owners", "uid-of-the-other-kfdef")
SETTINGS = config_map("settings", mode="on")
PATH = "/api/v1/namespaces/apps/configmaps/settings"


def cluster() -> FakeApiServer:
    server = FakeApiServer()
    server.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}})
    server.put({"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef",
                "metadata": {"name": "other", "namespace": "owners"}, "spec": {}})
    return server


def ours(**data: str) -> dict:
    return OWNER.stamp(config_map("settings", **(data or {"mode": "on"})), namespaced=True, adopted=False)


def restore(server: FakeApiServer, **options) -> Change:
    async def scenario() -> Change:
        manager = await manager_on(server)
        return await manager.restore(OWNER, SETTINGS, resource(manager), **options)

    return virtual_time.run(scenario())


def resource(manager: ResourceManager):
    found = manager.discovery.cached("v1", "ConfigMap")
    assert found is not None
    return found


def writes(server: FakeApiServer) -> list[str]:
    return [f"{r.method} {r.path}" for r in server.received(writes_only=True) if "configmaps" in r.path]


def test_an_absent_object_is_created_create_only_without_a_read_when_known_absent() -> None:
    server = cluster()
    change = restore(server, known_absent=True)
    assert change.action is Action.CREATED
    assert [r.method for r in server.received(path="/configmaps")] == ["POST", "PATCH"]  # the create, its fields
    assert OWNER.claim(server.get(PATH)["metadata"]) is Claim.OURS


def test_an_absent_object_to_keep_absent_is_not_created() -> None:
    server = cluster()
    change = restore(server, keep_absent="run once")
    assert (change.action, change.message) == (Action.SKIPPED, "run once")
    assert writes(server) == []


def test_a_drifted_object_is_re_asserted() -> None:
    server = cluster()
    server.put(ours(mode="off"), manager=OWNER.field_manager)
    assert restore(server).action is Action.CONFIGURED
    assert server.get(PATH)["data"] == {"mode": "on"}


def test_an_object_in_line_but_for_the_servers_defaults_is_not_written() -> None:
    server = cluster()
    server.put(ours(), manager=OWNER.field_manager)
    change = restore(server)
    assert change.action is Action.UNCHANGED and change.live is not None
    assert writes(server) == []
    assert [r.dry_run for r in server.received("PATCH", PATH)] == [True]


def test_an_object_that_lost_its_stamps_is_the_owners_only_if_it_is_the_very_object_it_had() -> None:
    server = cluster()
    uid = server.put(config_map("settings", mode="off"))["metadata"]["uid"]
    assert restore(server, expected_uid="another-uid").action is Action.CONFLICT
    assert writes(server) == []
    assert restore(server, expected_uid=uid).action is Action.CONFIGURED
    assert OWNER.claim(server.get(PATH)["metadata"]) is Claim.OURS, "stamped as the owner's, not as adopted"


def apply_one(server: FakeApiServer) -> Change:
    async def scenario() -> Change:
        manager = await manager_on(server)
        live = server.get(PATH)
        return await manager.apply_one(OWNER, SETTINGS, resource(manager), live and live["metadata"])

    return virtual_time.run(scenario())


def opted_out(obj: dict) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "annotations": {**obj["metadata"].get("annotations", {}),
                                                                     RECONCILE_ANNOTATION: RECONCILE_DISABLED}}}


@pytest.mark.parametrize(("live", "applied", "restored"), [
    (OTHER.stamp(SETTINGS, namespaced=True, adopted=False), Action.CONFLICT, Action.CONFLICT),
    (opted_out(ours(mode="off")), Action.SKIPPED, Action.SKIPPED),
    (config_map("settings", mode="theirs"), Action.ADOPTED, Action.CONFLICT),
], ids=["another owner's", "opted out", "without stamps"])
def test_apply_and_restore_judge_who_holds_an_object_by_one_rule_but_a_restore_adopts_nothing(
        live, applied, restored) -> None:
    server = cluster()
    server.put(live)
    change = restore(server)
    assert change.action is restored
    assert writes(server) == []
    applied_change = apply_one(server)
    assert applied_change.action is applied
    if restored is applied:
        assert change.message == applied_change.message  # one rule, in one wording
