"""``status.inventory`` written and read (kfdef_operator.runtime.inventory), the status write's merge patch, and
the format a status writer writes for the KfDef CRD installed."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator

import pytest

from kfdef_operator.runtime.inventory import (
    Held,
    InventoryEntry,
    InventoryFormat,
    decode,
    encode,
    encode_first_format,
    read,
)
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.runtime.status import StatusWriter, merge_patch
from kfdef_operator.ssa.inventory import ObjectRef
from tests.fake_kube import _merge as applied  # RFC 7386, as the API server applies a merge patch

WEB = ObjectRef("apps", "Deployment", "kubeflow", "web")
SETTINGS = ObjectRef("", "ConfigMap", "kubeflow", "settings")
ROLE = ObjectRef("rbac.authorization.k8s.io", "ClusterRole", "", "system:aggregate-to-admin")
JOB = ObjectRef("batch", "Job", "kubeflow", "migrate")
OLD = ObjectRef("", "Service", "kubeflow", "retired")

INVENTORY = {WEB: InventoryEntry("v1"), ROLE: InventoryEntry("v1"), OLD: InventoryEntry("v1"),
             JOB: InventoryEntry("v1", run_once="sha256:abc"), SETTINGS: InventoryEntry("v1")}
RENDERED_BY = {WEB: "web-app", SETTINGS: "web-app", ROLE: "rbac", JOB: "rbac"}


def test_entries_are_strings_grouped_by_application_in_the_order_given():
    assert encode(INVENTORY, RENDERED_BY.get, ["rbac", "unused", "web-app"]) == {
        "applications": [
            {"name": "rbac", "objects": ["_system:aggregate-to-admin_rbac.authorization.k8s.io_ClusterRole_v1",
                                        "kubeflow_migrate_batch_Job_v1"]},
            {"name": "web-app", "objects": ["kubeflow_web_apps_Deployment_v1", "kubeflow_settings__ConfigMap_v1"]},
        ],
        "stale": ["kubeflow_retired__Service_v1"],
        "runOnce": {"kubeflow_migrate_batch_Job": "sha256:abc"},
    }


def test_an_application_not_named_in_the_order_still_gets_its_group():
    assert encode({WEB: InventoryEntry("v1")}, {WEB: "late"}.get, []) == {
        "applications": [{"name": "late", "objects": ["kubeflow_web_apps_Deployment_v1"]}]}


def test_read_gives_back_what_was_encoded():
    status = {"inventory": encode(INVENTORY, RENDERED_BY.get, ["web-app", "rbac"])}
    assert decode(status) == INVENTORY
    assert {held.ref: held.application for held in read(status)} == {**RENDERED_BY, OLD: None}


def test_the_first_format_is_read_with_its_applications_and_digests():
    status = {"applications": [{"name": "web-app"}, {"name": "rbac"}],
              "inventory": {"entries": [
                  {"id": "kubeflow_web_apps_Deployment", "v": "v1", "a": 0},
                  {"id": "kubeflow_migrate_batch_Job", "v": "v1", "d": "sha256:abc", "a": 1},
                  {"id": "kubeflow_retired__Service", "v": "v1"},            # no longer rendered
                  {"id": "kubeflow_settings__ConfigMap", "v": "v1", "a": 7},  # an index past the applications
                  {"id": "too_short"}, {"v": "v1"}, "not a mapping", None]}}
    assert read(status) == [
        Held(WEB, InventoryEntry("v1"), "web-app"),
        Held(JOB, InventoryEntry("v1", "sha256:abc"), "rbac"),
        Held(OLD, InventoryEntry("v1"), None),
        Held(SETTINGS, InventoryEntry("v1"), None),
    ]


def test_the_first_format_wins_when_both_are_there():
    """Only an operator that knows nothing else writes ``entries``, merging them beside the newer fields."""
    status = {"inventory": {"entries": [{"id": "kubeflow_web_apps_Deployment", "v": "v1"}],
                            "applications": [{"name": "app", "objects": ["kubeflow_retired__Service_v1"]}]}}
    assert decode(status) == {WEB: InventoryEntry("v1")}


@pytest.mark.parametrize("inventory", [
    None, "text", [], {},
    {"applications": "text", "stale": {"a": 1}},
    {"applications": [None, "text", {"name": "app", "objects": [7, None, "too_short", "a_b_c_d"]}],
     "runOnce": ["kubeflow_web_apps_Deployment"]},
])
def test_a_malformed_inventory_reads_as_what_can_be_read_of_it(inventory):
    assert read({"inventory": inventory}) == []


def test_a_malformed_digest_or_group_name_is_dropped_not_the_object():
    status = {"inventory": {"applications": [{"name": 3, "objects": ["kubeflow_migrate_batch_Job_v1"]}],
                            "runOnce": {"kubeflow_migrate_batch_Job": 5}}}
    assert read(status) == [Held(JOB, InventoryEntry("v1"), None)]


def test_the_merge_patch_removes_what_the_new_value_dropped():
    old = {"entries": [{"id": "x"}], "runOnce": {"a": "1", "b": "2"}, "stale": ["s"], "applications": [1]}
    new = {"runOnce": {"a": "1", "c": "3"}, "applications": [1, 2]}
    patch = merge_patch(old, new)
    assert patch == {"entries": None, "stale": None, "runOnce": {"b": None, "c": "3"}, "applications": [1, 2]}
    assert applied(old, patch) == new


@pytest.mark.parametrize("old, new", [(None, {"a": 1}), ({"a": 1}, [1]), ([1], [2]), ("x", "y")])
def test_anything_but_two_objects_is_replaced_whole(old, new):
    assert merge_patch(old, new) == new


class CrdServer:
    """The client seam of a status writer: one KfDef's status, patched as kube-apiserver does, then pruned of the
    inventory fields the installed CRD does not know (``known``), as it prunes every write; records the patches."""

    def __init__(self, status: dict, known: tuple[str, ...]) -> None:
        self.status = status
        self.known = known
        self.patches: list[dict] = []

    async def request(self, method: str, path: str, *, body: dict, content_type: str) -> dict:
        assert (method, content_type) == ("PATCH", "application/merge-patch+json") and path.endswith("/status")
        self.patches.append(body["status"])
        self.status = applied(self.status, body["status"])
        inventory = self.status.get("inventory")
        if isinstance(inventory, dict):
            self.status["inventory"] = {key: value for key, value in inventory.items() if key in self.known}
        return {"metadata": {"name": "kf"}, "status": copy.deepcopy(self.status)}


FIRST_FORMAT_CRD = ("entries",)
STRING_FORMAT_CRD = ("entries", "applications", "stale", "runOnce")


@pytest.fixture(autouse=True)
def _metrics_forgotten() -> Iterator[None]:
    """The writers' metrics series removed after each test: the registry is the process's, and other tests read it."""
    yield
    for writer in WRITERS:
        writer.forget()
    WRITERS.clear()


WRITERS: list[StatusWriter] = []


def _writer(server: CrdServer, inventory_format: InventoryFormat | None = None) -> tuple[StatusWriter, Stack]:
    stack = Stack(Owner("inventory-format", "status-writer-tests", "uid-1"), 1, status=copy.deepcopy(server.status),
                  applications=["web-app", "rbac"])
    stack.reload(copy.deepcopy(server.status))
    stack.inventory = dict(INVENTORY)
    stack.want({ref: {} for ref in RENDERED_BY})
    stack.application_of = dict(RENDERED_BY)
    writer = StatusWriter(server, stack, None, None, health_timeout=60,  # type: ignore[arg-type]
                          inventory_format=inventory_format or InventoryFormat())
    WRITERS.append(writer)
    return writer, stack


def _first_format_status() -> dict:
    """A status as the operator wrote it before the string format."""
    stack_status = {"applications": [{"name": "web-app"}, {"name": "rbac"}]}
    return {**stack_status, "inventory": encode_first_format(INVENTORY, RENDERED_BY.get, ["web-app", "rbac"])}


def test_a_crd_that_keeps_the_strings_gets_them_and_loses_the_first_format_at_once():
    server = CrdServer(_first_format_status(), STRING_FORMAT_CRD)
    writer, _ = _writer(server)
    asyncio.run(writer.update())
    assert [set(patch.get("inventory", {})) for patch in server.patches] == [
        {"applications", "stale", "runOnce"},  # added beside the first format, until the answer shows them kept
        {"entries"}]                           # then the first format removed (null)
    assert server.patches[1] == {"inventory": {"entries": None}}
    assert set(server.status["inventory"]) == {"applications", "stale", "runOnce"}
    assert decode(server.status) == INVENTORY
    asyncio.run(writer.update())
    assert len(server.patches) == 2, "nothing changed: nothing written"


def test_a_crd_older_than_the_strings_keeps_the_first_format_and_is_not_written_again_at_rest(caplog):
    server = CrdServer(_first_format_status(), FIRST_FORMAT_CRD)
    writer, stack = _writer(server)
    asyncio.run(writer.update())
    assert decode(server.status) == INVENTORY and set(server.status["inventory"]) == {"entries"}
    assert "older than this operator" in caplog.text
    writes = len(server.patches)
    asyncio.run(writer.update())
    assert len(server.patches) == writes, "the pruned strings are not sent again and again"
    stack.generation = 2
    asyncio.run(writer.update())
    assert "applications" not in server.patches[-1].get("inventory", {})
    assert decode(server.status) == INVENTORY


def test_strings_pruned_after_they_were_kept_are_followed_at_once_by_the_first_format():
    """The CRD replaced by an older one while the operator runs: the write that lost the inventory is repaired by
    the next request, not the next status change."""
    kept = InventoryFormat()
    kept.strings_kept = True
    server = CrdServer({}, FIRST_FORMAT_CRD)
    writer, _ = _writer(server, kept)
    asyncio.run(writer.update())
    assert [set(patch.get("inventory", {})) for patch in server.patches] == [
        {"applications", "stale", "runOnce"}, {"entries"}]
    assert decode(server.status) == INVENTORY and kept.strings_kept is False


def test_an_inventory_read_in_the_string_format_proves_the_crd_keeps_it():
    strings = {"inventory": encode(INVENTORY, RENDERED_BY.get, ["web-app", "rbac"])}
    inventory_format = InventoryFormat()
    inventory_format.observe(strings["inventory"])
    inventory_format.observe(_first_format_status()["inventory"])  # proves nothing either way
    assert inventory_format.strings_kept is True
