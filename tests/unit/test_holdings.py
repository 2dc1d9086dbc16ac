"""Prune's data guard, its pure part: which objects a Namespace or CRD holds count as someone else's data."""

from __future__ import annotations

from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.ssa.holdings import Holdings, held_note, is_held_note, user_objects

OWNER = Owner("kubeflow", "platform", "uid-1")
CONFIG_MAPS = Resource("", "v1", "ConfigMap", "configmaps", True)


def item(name: str, namespace: str = "team", **meta: object) -> dict:
    return {"metadata": {"name": name, "namespace": namespace, **meta}}


def test_the_owners_objects_and_what_something_owns_are_not_someone_elses_data():
    ours = OWNER.stamp({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ours", "namespace": "team"}},
                       namespaced=True, adopted=False)
    owned = item("derived", ownerReferences=[{"kind": "Deployment", "name": "web", "uid": "u"}])
    assert user_objects([ours, owned, item("notes")], CONFIG_MAPS, OWNER) == ["ConfigMap team/notes"]


def test_adopted_and_other_owners_objects_are_someone_elses():
    adopted = OWNER.stamp({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "adopted",
                                                                                  "namespace": "team"}},
                          namespaced=True, adopted=True)
    other = Owner("other", "elsewhere", "uid-2").stamp(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "theirs", "namespace": "team"}},
        namespaced=True, adopted=False)
    assert user_objects([adopted, other], CONFIG_MAPS, OWNER) == ["ConfigMap team/adopted", "ConfigMap team/theirs"]


def test_what_the_control_plane_puts_in_every_namespace_is_no_ones_data():
    assert user_objects([item("kube-root-ca.crt")], CONFIG_MAPS, OWNER) == []
    accounts = Resource("", "v1", "ServiceAccount", "serviceaccounts", True)
    assert user_objects([item("default"), item("builder")], accounts, OWNER) == ["ServiceAccount team/builder"]
    for group, kind in (("", "Event"), ("events.k8s.io", "Event"), ("coordination.k8s.io", "Lease"),
                        ("", "Endpoints"), ("discovery.k8s.io", "EndpointSlice")):
        assert user_objects([item("x")], Resource(group, "v1", kind, kind.lower() + "s", True), OWNER) == []


def test_cluster_scoped_objects_are_named_without_a_namespace():
    gadgets = Resource("example.org", "v1", "Gadget", "gadgets", False)
    assert user_objects([{"metadata": {"name": "g"}}], gadgets, OWNER) == ["Gadget g"]


def test_the_note_says_how_many_which_and_what_to_do():
    note = held_note(Holdings(5, ("ConfigMap team/a", "ConfigMap team/b", "Widget team/c")))
    assert note == ("no longer rendered, but holds 5 objects the stack did not create (ConfigMap team/a, "
                    "ConfigMap team/b, Widget team/c ...): released from the stack and kept; delete those objects, "
                    "or set spec.force: true, to let the stack delete it")
    assert str(Holdings(1, ("Widget team/c",))) == "1 object the stack did not create (Widget team/c)"
    assert is_held_note(f"Namespace team: {note}") and not is_held_note("rendered twice (last wins): x")
