"""Which fields of an adopted object other writers hold, judged from its managedFields (ssa.fieldsets, ssa.foreign).

The managedFields below are as kube-apiserver 1.36 wrote them in tests/cluster/test_adopted_fields.py's setting: a
tenant's create (an Update, holding the server's defaults too), then the operator's adopting apply.
"""

from __future__ import annotations

import json

from kfdef_operator.ssa import foreign
from kfdef_operator.ssa.fieldsets import MISSING, describe, locate, outside, pointer, union, value_at

OURS = "kfdef-operator"


def entry(manager: str, fields: dict, *, operation: str = "Update", subresource: str = "") -> dict:
    found = {"manager": manager, "operation": operation, "apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": fields}
    return {**found, "subresource": subresource} if subresource else found


def meta(*entries: dict) -> dict:
    return {"uid": "u1", "resourceVersion": "7", "managedFields": list(entries)}


def obj(*entries: dict, **content: object) -> dict:
    return {"metadata": meta(*entries), **content}


TENANT_POLICY = entry("tenant", {"f:metadata": {"f:labels": {".": {}, "f:owner": {}}},
                                 "f:spec": {"f:egress": {}, "f:ingress": {}, "f:policyTypes": {}}})
OUR_POLICY = entry(OURS, {"f:metadata": {"f:labels": {"f:kfdef.apps.kubeflow.org/instance": {}}},
                          "f:spec": {"f:podSelector": {}, "f:policyTypes": {}}}, operation="Apply")


def test_the_fields_only_another_manager_holds_are_its_and_shared_ones_are_not():
    held = foreign.held_by_others(obj(OUR_POLICY, TENANT_POLICY), OURS)
    assert foreign.described(held) == (("tenant", "metadata.labels.owner"), ("tenant", "spec.egress"),
                               ("tenant", "spec.ingress"))  # policyTypes: the stack applies it too


def test_a_part_only_another_manager_holds_is_one_path_however_many_fields_it_has():
    theirs = {"f:spec": {"f:containers": {
        'k:{"name":"app"}': {".": {}, "f:image": {}, "f:imagePullPolicy": {}},
        'k:{"name":"sidecar"}': {".": {}, "f:image": {}, "f:name": {}, "f:args": {}}}}}
    ours = {"f:spec": {"f:containers": {'k:{"name":"app"}': {"f:image": {}}}}}
    assert [describe(p) for p in outside(theirs, ours)] == [
        "spec.containers[name=app].imagePullPolicy", "spec.containers[name=sidecar]"]


def test_subresources_status_bookkeeping_and_routine_keys_are_nobodys_concern():
    held = foreign.held_by_others(obj(
        OUR_POLICY,
        # kube-controller-manager's status writes, an autoscaler's replicas: through subresources.
        entry("kube-controller-manager", {"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}},
                                          "f:status": {"f:replicas": {}}}, subresource="status"),
        entry("hpa", {"f:spec": {"f:replicas": {}}}, subresource="scale"),
        entry("kubectl-client-side-apply", {
            "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}},
                           "f:labels": {"f:kubernetes.io/metadata.name": {}},
                           "f:finalizers": {".": {}, 'v:"example.org/keep"': {}},
                           "f:ownerReferences": {}},
            "f:status": {"f:phase": {}},
            "f:spec": {"f:template": {"f:metadata": {"f:annotations": {
                "f:kubectl.kubernetes.io/restartedAt": {}}}}}}),
    ), OURS)
    assert held == {}


def test_a_map_only_another_manager_holds_is_named_without_its_routine_keys():
    theirs = entry("kubectl-client-side-apply", {"f:metadata": {"f:annotations": {
        ".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}, "f:example.org/tier": {}}}})
    assert foreign.described(foreign.held_by_others(obj(OUR_POLICY, theirs), OURS)) == (
        ("kubectl-client-side-apply", "metadata.annotations[example.org/tier]"),)


def test_no_manager_is_trusted_by_its_name():
    spoofed = entry("kube-controller-manager", {"f:spec": {"f:ingress": {}}})
    assert foreign.described(foreign.held_by_others(obj(OUR_POLICY, spoofed), OURS)) == (("kube-controller-manager",
                                                                           "spec.ingress"),)


def test_an_object_nobody_else_wrote_holds_nothing_foreign():
    assert foreign.held_by_others(obj(OUR_POLICY), OURS) == {}
    assert foreign.held_by_others({}, OURS) == {}


def test_the_rules_of_an_aggregated_cluster_role_are_the_aggregation_controllers():
    rules = entry("clusterrole-aggregation-controller", {"f:rules": {}}, operation="Apply")
    ours = entry(OURS, {"f:aggregationRule": {"f:clusterRoleSelectors": {}}}, operation="Apply")
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"}
    assert foreign.held_by_others(obj(ours, rules, **role, aggregationRule={"clusterRoleSelectors": []}), OURS) == {}
    # A role that aggregates nothing: rules someone else wrote are theirs.
    assert foreign.described(foreign.held_by_others(obj(rules, **role), OURS)) == (
        ("clusterrole-aggregation-controller", "rules"),)


def test_paths_are_found_in_the_object_by_key_value_and_position():
    obj = {"spec": {"ports": [{"port": 80, "protocol": "TCP"}, {"port": 443, "protocol": "TCP", "name": "https"}],
                    "finalizers": ["a", "b/c"], "items": [[1], [2]]},
           "metadata": {"labels": {"app.kubernetes.io/name": "x"}}}
    https = ("f:spec", "f:ports", 'k:{"port":443,"protocol":"TCP"}', "f:name")
    assert locate(obj, https) == ["spec", "ports", 1, "name"]
    assert value_at(obj, https) == "https"
    assert pointer(locate(obj, ("f:spec", "f:finalizers", 'v:"b/c"'))) == "/spec/finalizers/1"
    assert value_at(obj, ("f:spec", "f:items", "i:1")) == [2]
    assert pointer(["metadata", "labels", "app.kubernetes.io/name", "~x"]) == (
        "/metadata/labels/app.kubernetes.io~1name/~0x")
    for nowhere in [("f:spec", "f:ports", 'k:{"port":8080,"protocol":"TCP"}'), ("f:spec", "f:missing"),
                    ("f:spec", "f:items", "i:5"), ("f:spec", "f:ports", "k:not json")]:
        assert locate(obj, nowhere) is None
        assert value_at(obj, nowhere) is MISSING


def test_paths_read_as_a_person_writes_them():
    assert describe(("f:metadata", "f:labels", "f:app.kubernetes.io/name")) == "metadata.labels[app.kubernetes.io/name]"
    assert describe(("f:spec", "f:ports", 'k:{"port":443,"protocol":"TCP"}')) == "spec.ports[port=443,protocol=TCP]"
    assert describe(("f:metadata", "f:finalizers", 'v:"keep"')) == 'metadata.finalizers[="keep"]'
    assert describe(("f:spec", "f:items", "i:3")) == "spec.items[3]"


def test_the_removal_patch_guards_the_object_and_removes_list_items_from_the_last():
    obj = {"metadata": {"uid": "u1", "resourceVersion": "7"},
           "spec": {"rules": [{"name": "a"}, {"name": "b"}, {"name": "c"}], "extra": {"deep": 1}}}
    held = {"tenant": [("f:spec", "f:rules", 'k:{"name":"a"}'), ("f:spec", "f:extra")],
            "other": [("f:spec", "f:rules", 'k:{"name":"c"}'), ("f:spec", "f:extra", "f:deep"),
                      ("f:spec", "f:gone")]}
    assert foreign.removal_patch(obj, held) == [
        {"op": "test", "path": "/metadata/uid", "value": "u1"},  # any version: a status update must not fail it
        {"op": "remove", "path": "/spec/rules/2"},
        {"op": "remove", "path": "/spec/rules/0"},
        {"op": "remove", "path": "/spec/extra"},  # spec.extra.deep goes with it; spec.gone is not there
    ]


def test_fields_back_with_the_same_value_after_their_removal_are_the_servers_defaults():
    live = {"spec": {"strategy": {"type": "RollingUpdate"}, "progressDeadlineSeconds": 600, "ingress": [{}],
                     "policyTypes": ["Ingress", "Egress"]}}
    without = {"spec": {"strategy": {"type": "RollingUpdate"}, "progressDeadlineSeconds": 600,
                        "policyTypes": ["Ingress"]}}
    held = {"tenant": [("f:spec", "f:strategy"), ("f:spec", "f:ingress"), ("f:spec", "f:policyTypes")],
            "kubectl-create": [("f:spec", "f:progressDeadlineSeconds")]}
    assert foreign.changed_by_removal(live, without, held) == {"tenant": [("f:spec", "f:ingress"),
                                                                  ("f:spec", "f:policyTypes")]}


def test_the_takeover_hands_a_managers_fields_to_the_owners_apply_entry_and_keeps_the_rest():
    status = entry("kube-controller-manager", {"f:status": {"f:replicas": {}}}, subresource="status")
    tenant_scale = entry("tenant", {"f:spec": {"f:replicas": {}}}, subresource="scale")
    bystander = entry("bystander", {"f:metadata": {"f:labels": {"f:team": {}}}})
    obj = {"apiVersion": "networking.k8s.io/v1",
           "metadata": meta(OUR_POLICY, TENANT_POLICY, status, tenant_scale, bystander)}
    guard, replace = foreign.takeover_patch(obj, OURS, ["tenant"], api_version="networking.k8s.io/v1",
                                    time="2026-01-01T00:00:00Z")[1:]
    assert guard == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert replace["path"] == "/metadata/managedFields"
    entries = replace["value"]
    assert [(e["manager"], e.get("subresource", "")) for e in entries] == [
        (OURS, ""), ("kube-controller-manager", "status"), ("tenant", "scale"), ("bystander", "")]
    assert entries[0]["operation"] == "Apply" and entries[0]["time"] == "2026-01-01T00:00:00Z"
    assert entries[0]["fieldsV1"] == union(OUR_POLICY["fieldsV1"], TENANT_POLICY["fieldsV1"])
    assert entries[0]["fieldsV1"]["f:spec"] == {"f:egress": {}, "f:ingress": {}, "f:podSelector": {},
                                                "f:policyTypes": {}}


def test_the_takeover_makes_an_apply_entry_for_an_owner_that_has_none():
    obj = {"metadata": meta(TENANT_POLICY)}
    entries = foreign.takeover_patch(obj, OURS, ["tenant"], api_version="networking.k8s.io/v1", time="t")[-1]["value"]
    assert entries == [{"manager": OURS, "operation": "Apply", "apiVersion": "networking.k8s.io/v1",
                        "fieldsType": "FieldsV1", "time": "t", "fieldsV1": TENANT_POLICY["fieldsV1"]}]


def test_the_fields_named_are_bounded_in_count_and_length():
    assert foreign.spelled([("tenant", "spec.egress"), ("tenant", "spec.ingress"), ("x", "metadata.labels.a")]) == (
        "tenant: spec.egress, spec.ingress; x: metadata.labels.a")
    many = [("tenant", f"spec.field{i:02d}") for i in range(30)]
    assert foreign.spelled(many) == "tenant: " + ", ".join(f"spec.field{i:02d}" for i in range(8)) + " and 22 more"
    huge = [("m" * 500, "spec." + "p" * 500), ("m" * 500, "spec." + "q" * 500), ("other", "spec.x")]
    text = foreign.spelled(huge)
    assert text == f"{'m' * 79}…: {('spec.' + 'p' * 500)[:79]}…, {('spec.' + 'q' * 500)[:79]}…; other: spec.x"
    assert len(foreign.spelled([(f"manager{i}", "spec." + "p" * 70) for i in range(20)])) < 400
    assert json.dumps(foreign.spelled([])) == '""'
