"""ResourceManager against the in-memory API server (tests/fake_kube.py), in virtual time: apply order, teardown
waves, preconditions and the error paths."""

from __future__ import annotations

import asyncio
import itertools

from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.ssa.changeset import Action
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.inventory import ObjectRef, ref_of
from kfdef_operator.ssa.manager import ResourceManager
from kfdef_operator.ssa.teardown import TeardownResult
from tests import virtual_time
from tests.fake_kube import FakeApiServer, Received
from tests.stacks import crd

OWNER = Owner("stack", "owners", "uid-of-the-kfdef")
GROUP = "widgets.example.com"


def namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def config_map(name: str, ns: str = "apps", **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
            "data": data or {"k": "v"}}


def widget(name: str, ns: str = "apps") -> dict:
    return {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": name, "namespace": ns},
            "spec": {"size": 1}}


def webhook(name: str) -> dict:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name}, "webhooks": []}


async def manager_on(server: FakeApiServer, **options) -> ResourceManager:
    kube = server.client()
    discovery = Discovery(kube)
    await discovery.refresh()
    return ResourceManager(kube, discovery, **options)


async def apply_all(manager: ResourceManager, objects: list[dict]):
    resolved, later = [], []
    for obj in objects:
        resource = manager.discovery.cached(obj["apiVersion"], obj["kind"])
        if resource is None:
            later.append(obj)
        else:
            resolved.append((obj, resource))
    return await manager.apply_all(OWNER, resolved, later)


def first_write(server: FakeApiServer, name: str) -> Received:
    return next(r for r in server.received(writes_only=True) if r.path.endswith(f"/{name}"))


def test_namespaces_and_crds_are_applied_before_what_lives_in_them_and_webhooks_last() -> None:
    server = FakeApiServer(crd_established_after=5.0)

    async def scenario():
        manager = await manager_on(server)
        changes = await apply_all(manager, [webhook("guard"), widget("w1"), config_map("c1"), crd(GROUP, "Widget"),
                                            namespace("apps")])
        return {str(c.ref.name): c.action for c in changes}

    actions = virtual_time.run(scenario())

    assert set(actions.values()) == {Action.CREATED}, actions
    ns, crd_write, cm, cr, hook = (first_write(server, n) for n in ("apps", f"widgets.{GROUP}", "c1", "w1", "guard"))
    assert ns.answered_at <= min(cm.at, cr.at, crd_write.at), "the namespace exists before anything else is sent"
    assert cr.at >= crd_write.at + 5.0, "the custom resource waits until its CRD is Established"
    assert cm.at < crd_write.at + 5.0, "objects that need no CRD do not wait for the CRDs"
    assert hook.at >= max(cr.answered_at, cm.answered_at), "admission objects go last"


def test_crds_the_sets_custom_resources_need_go_first_and_no_other_crd_is_waited_for() -> None:
    """kube-apiserver makes new CRDs Established one after another, in the order they were created: the CRDs of
    kinds the set has objects of are created first, the others once those are answered; a CRD no object of the set
    needs is reported applied without waiting for its Established (the KfDef's readiness covers it)."""
    server = FakeApiServer(crd_established_after=5.0)
    unneeded = crd("gadgets.example.com", "Gadget")
    server.never_established.add(unneeded["metadata"]["name"])

    async def scenario():
        manager = await manager_on(server)
        changes = await apply_all(manager, [unneeded, crd(GROUP, "Widget"), widget("w1"), namespace("apps")])
        return {str(c.ref.name): (c.action, c.message) for c in changes}, asyncio.get_running_loop().time()

    actions, returned_at = virtual_time.run(scenario())

    assert {action for action, _ in actions.values()} == {Action.CREATED}, actions
    needed, other, cr = (first_write(server, n) for n in (f"widgets.{GROUP}", unneeded["metadata"]["name"], "w1"))
    assert other.at >= needed.answered_at, "the CRD no object needs is sent after the ones that are needed"
    assert cr.at >= needed.at + 5.0, "the custom resource still waits until its own CRD is Established"
    assert returned_at < cr.answered_at + 1.0, "the apply waited for a CRD no object of the set needs"


def test_reapplying_an_unchanged_set_writes_nothing() -> None:
    server = FakeApiServer()

    async def scenario():
        manager = await manager_on(server)
        objects = [namespace("apps"), config_map("c1"), crd(GROUP, "Widget"), widget("w1")]
        await apply_all(manager, objects)
        writes = len(server.received(writes_only=True))
        again = await apply_all(manager, objects)
        return writes, again

    writes, again = virtual_time.run(scenario())
    assert writes == 4
    assert {c.action for c in again} == {Action.UNCHANGED}
    assert len(server.received(writes_only=True)) == writes


def test_an_object_of_another_owner_is_reported_and_not_touched() -> None:
    server = FakeApiServer()
    server.put(namespace("apps"))
    other = Owner("other", "owners", "uid-other")
    server.put(other.stamp(config_map("c1"), namespaced=True, adopted=False))
    server.put(namespace("owners"))
    server.put({"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef",
                "metadata": {"name": "other", "namespace": "owners"}})

    async def scenario():
        manager = await manager_on(server)
        return await apply_all(manager, [config_map("c1", k="changed")])

    (change,) = virtual_time.run(scenario())
    assert change.action is Action.CONFLICT
    assert not server.received("PATCH", "/configmaps/c1")
    assert server.get("/api/v1/namespaces/apps/configmaps/c1")["data"] == {"k": "v"}


def test_a_422_refusal_fails_only_that_object() -> None:
    server = FakeApiServer()
    server.put(namespace("apps"))

    async def scenario():
        manager = await manager_on(server)
        server.fail("PATCH", "/configmaps/bad", 422, "data: Invalid value", reason="Invalid")
        return {c.ref.name: c for c in await apply_all(manager, [config_map("bad"), config_map("good")])}

    changes = virtual_time.run(scenario())
    assert changes["bad"].action is Action.FAILED and "422 Invalid: data: Invalid value" in changes["bad"].message
    assert changes["good"].action is Action.CREATED


def test_an_immutable_field_re_creates_a_stateless_object_the_owner_created_but_never_a_configmap() -> None:
    server = FakeApiServer()
    server.put(namespace("apps"))
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "namespace": "apps"},
               "spec": {"clusterIP": "10.0.0.1"}}

    async def scenario():
        manager = await manager_on(server)
        await apply_all(manager, [service, config_map("c1")])
        old_uid = server.get("/api/v1/namespaces/apps/services/svc")["metadata"]["uid"]
        immutable = "spec.clusterIP: Invalid value: field is immutable"
        server.fail("PATCH", "/services/svc", 422, immutable, reason="Invalid")
        server.fail("PATCH", "/configmaps/c1", 422, immutable, reason="Invalid")
        changed = [{**service, "spec": {"clusterIP": "10.0.0.2"}}, config_map("c1", k="v2")]
        return old_uid, {c.ref.name: c for c in await apply_all(manager, changed)}

    old_uid, changes = virtual_time.run(scenario())
    assert changes["svc"].action is Action.CREATED and "re-created" in changes["svc"].message
    assert server.get("/api/v1/namespaces/apps/services/svc")["metadata"]["uid"] != old_uid
    assert server.received("DELETE", "/services/svc")[0].body["preconditions"] == {"uid": old_uid}
    assert changes["c1"].action is Action.FAILED and "spec.force" in changes["c1"].message
    assert not server.received("DELETE", "/configmaps/c1")


async def teardown_finalized_later(server: FakeApiServer, manager: ResourceManager, objects: list[dict],
                                  path: str) -> tuple[float, TeardownResult]:
    """``objects`` torn down while the finalizers of the object at ``path`` are removed 30 s on (its controller's
    work); the virtual time the teardown started and its result."""
    started = virtual_time.now()

    async def release_later():
        await asyncio.sleep(30)
        server.modify(path, lambda obj: obj["metadata"].__setitem__("finalizers", []))

    releaser = asyncio.create_task(release_later())
    inventory = {ref_of(obj): obj["apiVersion"].rpartition("/")[2] for obj in objects}
    result = await manager.teardown(OWNER, inventory, wave_timeout=120)
    await releaser
    return started, result


def test_teardown_deletes_in_waves_each_awaited_before_the_next() -> None:
    server = FakeApiServer()
    objects = [namespace("apps"), config_map("c1"), crd(GROUP, "Widget"), widget("w1"), webhook("guard")]

    async def scenario():
        manager = await manager_on(server)
        await apply_all(manager, objects)
        # The custom resource holds a finalizer for 30 s: the CRD wave must wait for it.
        path = server.path_of(widget("w1"))
        server.modify(path, lambda obj: obj["metadata"].__setitem__("finalizers", ["example.com/cleanup"]))
        return await teardown_finalized_later(server, manager, objects, path)

    started, result = virtual_time.run(scenario())
    assert result.done, result.remaining
    deletes = {r.path.rpartition("/")[2]: r.at for r in server.received("DELETE")}
    assert deletes["guard"] <= deletes["w1"], "admission objects first"
    assert deletes[f"widgets.{GROUP}"] >= started + 30, "the CRD waits until its custom resources are gone"
    assert server.objects() == []


def test_a_crd_goes_before_the_controllers_only_while_custom_resources_with_finalizers_are_left() -> None:
    """Decided per CRD once the stack's own custom resources are gone: one whose remaining custom resources carry a
    finalizer (or that cannot be listed) goes in a wave of its own before the Namespaces, which hold the controllers;
    the others go with the Namespaces, so that their cleanup overlaps with the Namespaces' grace period."""
    server = FakeApiServer()
    kinds = {"Widget": "widgets", "Gadget": "gadgets", "Thing": "things", "Part": "parts"}
    objects = [namespace("apps"), config_map("c1"), *[crd(GROUP, kind) for kind in kinds]]

    def made_by_a_controller(kind: str, name: str, **meta) -> dict:
        return {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": name, "namespace": "apps", **meta}}

    async def scenario():
        manager = await manager_on(server)
        await apply_all(manager, objects)
        # Not the stack's: a controller's Widget with its finalizer, released 30 s on; a Gadget without finalizers.
        held = server.put(made_by_a_controller("Widget", "made", finalizers=["example.com/cleanup"]))
        server.put(made_by_a_controller("Gadget", "made"))
        server.fail("GET", f"/apis/{GROUP}/v1/parts", 403, "forbidden", reason="Forbidden")
        return await teardown_finalized_later(server, manager, objects, server.path_of(held))

    started, result = virtual_time.run(scenario())
    assert result.done, result.remaining
    deletes = {r.path.rpartition("/")[2]: r.at for r in server.received("DELETE")}
    assert deletes["apps"] >= started + 30, "the Namespace waits for the CRD whose custom resource holds a finalizer"
    assert deletes[f"widgets.{GROUP}"] < started + 1
    assert deletes[f"parts.{GROUP}"] < started + 1, "a CRD whose custom resources cannot be listed waits too"
    for free in ("gadgets", "things"):  # with the Namespace, sent after it
        assert deletes["apps"] <= deletes[f"{free}.{GROUP}"] < started + 31, deletes
    assert server.objects() == []


def test_a_finalizer_on_a_later_page_of_custom_resources_holds_the_crd_before_the_namespaces() -> None:
    server = FakeApiServer()
    objects = [namespace("apps"), crd(GROUP, "Widget")]

    async def scenario():
        manager = await manager_on(server)
        await apply_all(manager, objects)
        for index in range(600):  # made by a controller; the last one, on the second page, holds a finalizer
            made = widget(f"made-{index:03}")
            made["metadata"]["finalizers"] = ["example.com/cleanup"] if index == 599 else []
            server.put(made)
        return await teardown_finalized_later(server, manager, objects, server.path_of(widget("made-599")))

    started, result = virtual_time.run(scenario())
    assert result.done, result.remaining
    listed = [r for r in server.received("GET", f"/apis/{GROUP}/v1/widgets") if r.path.endswith("/widgets")]
    assert len(listed) == 2, "in pages"
    deletes = {r.path.rpartition("/")[2]: r.at for r in server.received("DELETE")}
    assert deletes[f"widgets.{GROUP}"] < started + 1 and deletes["apps"] >= started + 30


def test_a_delete_answered_404_counts_as_gone_and_a_replaced_object_is_kept() -> None:
    server = FakeApiServer()
    server.put(namespace("apps"))

    async def scenario():
        manager = await manager_on(server)
        await apply_all(manager, [config_map("c1"), config_map("c2")])
        server.fail("DELETE", "/configmaps/c1", 404, "not found", reason="NotFound")
        # c2 is deleted by someone and created again by them between our read and our delete.
        original = server.get("/api/v1/namespaces/apps/configmaps/c2")

        def replace(received: Received) -> None:
            server.remove(received.path)
            server.put(config_map("c2", k="theirs"))
        server.before("DELETE", "/configmaps/c2", replace)
        changes = await manager.prune(OWNER, {ObjectRef("", "ConfigMap", "apps", "c1"): "v1",
                                              ObjectRef("", "ConfigMap", "apps", "c2"): "v1"})
        return original, {c.ref.name: c for c in changes}

    original, changes = virtual_time.run(scenario())
    assert changes["c1"].action is Action.GONE
    assert changes["c2"].action is Action.SKIPPED, changes["c2"]
    kept = server.get("/api/v1/namespaces/apps/configmaps/c2")
    assert kept["data"] == {"k": "theirs"} and kept["metadata"]["uid"] != original["metadata"]["uid"]


def test_a_fenced_client_sends_no_write() -> None:
    server = FakeApiServer()
    server.put(namespace("apps"))

    async def scenario():
        manager = await manager_on(server)
        manager.kube.fence = lambda: False
        return await apply_all(manager, [config_map("c1")])

    (change,) = virtual_time.run(scenario())
    assert change.action is Action.FAILED and "leader lease" in change.message
    assert server.received(writes_only=True) == [], "the refusal is the client's own, before any request"


def test_a_read_answered_500_is_retried_with_growing_pauses() -> None:
    server = FakeApiServer()
    server.put(namespace("apps"))

    async def scenario():
        manager = await manager_on(server)
        server.fail("GET", "/configmaps", 500, "etcd leader changed", times=3)
        return await apply_all(manager, [config_map("c1")])

    (change,) = virtual_time.run(scenario())
    assert change.action is Action.CREATED
    lists = server.received("GET", "/namespaces/apps/configmaps")
    pauses = [round(later.at - earlier.answered_at, 3) for earlier, later in itertools.pairwise(lists)]
    assert pauses == [0.05, 0.1, 0.2]


def test_a_throttled_write_is_sent_again_after_the_servers_retry_after() -> None:
    server = FakeApiServer()
    server.put(namespace("apps"))

    async def scenario():
        manager = await manager_on(server)
        server.fail("PATCH", "/configmaps/c1", 429, "storage is (re)initializing", reason="TooManyRequests",
                    retry_after="3")
        return await apply_all(manager, [config_map("c1")])

    (change,) = virtual_time.run(scenario())
    assert change.action is Action.CREATED
    refused, accepted = server.received("PATCH", "/configmaps/c1")
    assert (refused.status, accepted.status) == (429, 201)
    assert round(accepted.at - refused.answered_at, 3) == 3.0
