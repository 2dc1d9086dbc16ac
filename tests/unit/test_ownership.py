"""Ownership stamps, claims and normalisation (kfdef_operator.runtime.ownership)."""

from __future__ import annotations

import base64
import copy
import re
from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfdef_operator.api.names import (
    ADOPTED_ANNOTATION,
    DIGEST_ANNOTATION,
    INSTANCE_ANNOTATION,
    INSTANCE_LABEL,
    kfdef_path,
)
from kfdef_operator.api.names import API_VERSION as KFDEF_API_VERSION
from kfdef_operator.runtime.ownership import Owner, digest, opted_out, parse_instance
from kfdef_operator.ssa.claims import Claim
from kfdef_operator.ssa.normalize import normalize

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")  # apimachinery IsValidLabelValue
OWNER = Owner("kubeflow", "kubeflow-system", "uid-1")
OTHER = Owner("other", "kubeflow-system", "uid-2")

DNS_LABEL = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
DNS_SUBDOMAIN = st.lists(DNS_LABEL, min_size=1, max_size=4).map(".".join).filter(lambda s: len(s) <= 253)


def configmap(namespace: str | None = "kubeflow-system", **meta) -> dict:
    metadata = {"name": "settings", **meta}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"a": "1"}}


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch, as the API server applies OWNER.release_patch()."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --------------------------------------------------------------------------------------------------------------------
# Owner: label, instance annotation


def test_short_label_is_namespace_dot_name():
    assert OWNER.label == "kubeflow-system.kubeflow"
    assert OWNER.selector == f"{INSTANCE_LABEL}=kubeflow-system.kubeflow"


def test_instance_annotation_is_name_dot_namespace():
    assert OWNER.instance == "kubeflow.kubeflow-system"


def test_long_label_is_hashed_to_a_valid_value():
    owner = Owner("n" * 63, "s" * 63, "uid")
    assert len(owner.label) <= 63 and LABEL_VALUE.match(owner.label)
    assert owner.label.startswith("s" * 40)


def test_long_labels_of_different_owners_differ():
    a, b = Owner("x" * 60 + "a", "s" * 40, ""), Owner("x" * 60 + "b", "s" * 40, "")
    assert a.label != b.label


@given(name=DNS_LABEL, namespace=DNS_LABEL)
def test_label_is_always_a_valid_label_value(name, namespace):
    label = Owner(name, namespace, "uid").label
    assert len(label) <= 63
    assert LABEL_VALUE.match(label), label


@given(name=DNS_SUBDOMAIN, namespace=DNS_LABEL)
def test_label_is_valid_for_dotted_kfdef_names_too(name, namespace):
    label = Owner(name, namespace, "uid").label
    assert len(label) <= 63 and LABEL_VALUE.match(label), label


@given(name=DNS_LABEL, namespace=DNS_LABEL)
def test_label_is_deterministic_and_injective_in_practice(name, namespace):
    assert Owner(name, namespace, "a").label == Owner(name, namespace, "b").label
    assert Owner(name, namespace, "").label != Owner(name + "x", namespace, "").label


@pytest.mark.parametrize("value, expected", [
    ("kubeflow.kubeflow", ("kubeflow", "kubeflow")),
    ("my.dotted.kfdef.team-a", ("my.dotted.kfdef", "team-a")),
    ("a.b", ("a", "b")),
])
def test_parse_instance_splits_on_the_last_dot(value, expected):
    assert parse_instance(value) == expected


@given(name=DNS_SUBDOMAIN, namespace=DNS_LABEL)
def test_parse_instance_inverts_instance(name, namespace):
    assert parse_instance(Owner(name, namespace, "").instance) == (name, namespace)


# --------------------------------------------------------------------------------------------------------------------
# claim_of


@pytest.mark.parametrize("meta, claim", [
    (None, Claim.ABSENT),
    ({}, Claim.UNCLAIMED),
    ({"labels": None, "annotations": None}, Claim.UNCLAIMED),
    ({"labels": {"app": "x"}, "annotations": {"note": "y"}}, Claim.UNCLAIMED),
    ({"annotations": {ADOPTED_ANNOTATION: "true"}}, Claim.UNCLAIMED),  # a leftover adopted mark alone claims nothing
    ({"annotations": {INSTANCE_ANNOTATION: OWNER.instance}}, Claim.OURS),  # kfctl v1.2 stamped only the annotation
    ({"labels": {INSTANCE_LABEL: OWNER.label}}, Claim.OURS),
    ({"labels": {INSTANCE_LABEL: OWNER.label}, "annotations": {INSTANCE_ANNOTATION: OWNER.instance}}, Claim.OURS),
    ({"labels": {INSTANCE_LABEL: OWNER.label},
      "annotations": {INSTANCE_ANNOTATION: OWNER.instance, ADOPTED_ANNOTATION: "true"}}, Claim.ADOPTED),
    ({"labels": {INSTANCE_LABEL: OWNER.label},
      "annotations": {INSTANCE_ANNOTATION: OWNER.instance, ADOPTED_ANNOTATION: "false"}}, Claim.OURS),
    ({"annotations": {INSTANCE_ANNOTATION: OTHER.instance}}, Claim.FOREIGN),
    ({"labels": {INSTANCE_LABEL: OTHER.label}}, Claim.FOREIGN),
    ({"labels": {INSTANCE_LABEL: OTHER.label}, "annotations": {INSTANCE_ANNOTATION: OWNER.instance}}, Claim.FOREIGN),
    ({"labels": {INSTANCE_LABEL: OWNER.label}, "annotations": {INSTANCE_ANNOTATION: OTHER.instance}}, Claim.FOREIGN),
    ({"labels": {INSTANCE_LABEL: OTHER.label},
      "annotations": {INSTANCE_ANNOTATION: OTHER.instance, ADOPTED_ANNOTATION: "true"}}, Claim.FOREIGN),
])
def test_claim_of(meta, claim):
    assert OWNER.claim(meta) is claim


def test_claim_of_a_stamped_object_is_ours_or_adopted():
    assert OWNER.claim(OWNER.stamp(configmap(), namespaced=True, adopted=False)["metadata"]) is Claim.OURS
    assert OWNER.claim(OWNER.stamp(configmap(), namespaced=True, adopted=True)["metadata"]) is Claim.ADOPTED
    assert OTHER.claim(OWNER.stamp(configmap(), namespaced=True, adopted=False)["metadata"]) is Claim.FOREIGN


# --------------------------------------------------------------------------------------------------------------------
# stamp


def owner_refs(obj: dict) -> list[dict]:
    return obj["metadata"].get("ownerReferences") or []


def test_stamp_adds_label_annotations_and_digest():
    stamped = OWNER.stamp(configmap(labels={"app": "x"}, annotations={"note": "y"}), namespaced=True, adopted=False)
    meta = stamped["metadata"]
    assert meta["labels"] == {"app": "x", INSTANCE_LABEL: OWNER.label}
    assert meta["annotations"]["note"] == "y"
    assert meta["annotations"][INSTANCE_ANNOTATION] == OWNER.instance
    assert re.fullmatch(r"[0-9a-f]{16}", meta["annotations"][DIGEST_ANNOTATION])
    assert ADOPTED_ANNOTATION not in meta["annotations"]


def test_stamp_sets_owner_reference_on_same_namespace_objects_it_creates():
    stamped = OWNER.stamp(configmap(), namespaced=True, adopted=False)
    assert owner_refs(stamped) == [{"apiVersion": KFDEF_API_VERSION, "kind": "KfDef", "name": "kubeflow",
                                    "uid": "uid-1", "blockOwnerDeletion": False, "controller": False}]


@pytest.mark.parametrize("case, obj, namespaced, adopted, owner", [
    ("cluster-scoped", configmap(namespace=None), False, False, OWNER),
    ("cluster-scoped even if the object names the KfDef's namespace", configmap(), False, False, OWNER),
    ("another namespace", configmap(namespace="other"), True, False, OWNER),
    ("namespace not set yet", configmap(namespace=None), True, False, OWNER),
    ("adopted", configmap(), True, True, OWNER),
    ("owner without uid", configmap(), True, False, Owner("kubeflow", "kubeflow-system", "")),
])
def test_stamp_sets_no_owner_reference(case, obj, namespaced, adopted, owner):
    assert owner_refs(owner.stamp(obj, namespaced=namespaced, adopted=adopted)) == [], case


def test_stamp_marks_adopted_objects():
    stamped = OWNER.stamp(configmap(), namespaced=True, adopted=True)
    assert stamped["metadata"]["annotations"][ADOPTED_ANNOTATION] == "true"
    assert stamped["metadata"]["labels"][INSTANCE_LABEL] == OWNER.label


def test_stamp_keeps_other_owner_references_and_does_not_duplicate_ours():
    foreign = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x", "uid": "uid-x"}
    once = OWNER.stamp(configmap(ownerReferences=[foreign]), namespaced=True, adopted=False)
    twice = OWNER.stamp(once, namespaced=True, adopted=False)
    assert [r["uid"] for r in owner_refs(twice)] == ["uid-x", "uid-1"]


def test_stamp_does_not_mutate_its_input():
    original = configmap(labels={"app": "x"}, ownerReferences=[{"uid": "uid-x"}])
    pristine = copy.deepcopy(original)
    OWNER.stamp(original, namespaced=True, adopted=True)
    OWNER.stamp(original, namespaced=True, adopted=False)
    assert original == pristine


def test_stamp_is_idempotent():
    once = OWNER.stamp(configmap(), namespaced=True, adopted=False)
    assert OWNER.stamp(once, namespaced=True, adopted=False) == once


def test_digest_ignores_key_order():
    a = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "n"}, "data": {"a": "1",
                                                                                                        "b": "2"}}
    b = {"data": {"b": "2", "a": "1"}, "metadata": {"namespace": "n", "name": "x"}, "kind": "ConfigMap",
         "apiVersion": "v1"}
    assert digest(a) == digest(b)
    stamped_a = OWNER.stamp(a, namespaced=True, adopted=False)
    stamped_b = OWNER.stamp(b, namespaced=True, adopted=False)
    digests = [s["metadata"]["annotations"][DIGEST_ANNOTATION] for s in (stamped_a, stamped_b)]
    assert digests[0] == digests[1]


@pytest.mark.parametrize("change", [
    lambda o: o["data"].update(a="2"),
    lambda o: o["data"].update(c="3"),
    lambda o: o["metadata"].setdefault("labels", {}).update(tier="web"),
    lambda o: o.update(immutable=True),
])
def test_digest_changes_with_content(change):
    original = configmap()
    changed = copy.deepcopy(original)
    change(changed)
    assert digest(original) != digest(changed)

    def digest_of(obj):
        return OWNER.stamp(obj, namespaced=True, adopted=False)["metadata"]["annotations"][DIGEST_ANNOTATION]
    assert digest_of(original) != digest_of(changed)


def test_digest_depends_on_adoption_and_owner():
    def digest_of(owner, adopted):
        return owner.stamp(configmap(), namespaced=True, adopted=adopted)["metadata"]["annotations"][DIGEST_ANNOTATION]
    assert len({digest_of(OWNER, False), digest_of(OWNER, True), digest_of(OTHER, False)}) == 3


# --------------------------------------------------------------------------------------------------------------------
# normalize


def test_normalize_drops_status_and_server_metadata():
    live_like = {"apiVersion": "apps/v1", "kind": "Deployment", "status": {"replicas": 1},
                 "metadata": {"name": "web", "namespace": "n", "labels": {"app": "web"}, "creationTimestamp": None,
                              "resourceVersion": "7", "uid": "u", "generation": 3, "managedFields": [{}],
                              "selfLink": "/x"},
                 "spec": {"replicas": 1}}
    assert normalize(live_like) == {"apiVersion": "apps/v1", "kind": "Deployment",
                                    "metadata": {"name": "web", "namespace": "n", "labels": {"app": "web"}},
                                    "spec": {"replicas": 1}}


def test_normalize_turns_secret_string_data_into_base64_data():
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
              "data": {"kept": "a2VwdA==", "both": "b2xk"},
              "stringData": {"password": "hunter2", "both": "new", "port": 5432}}
    normalized = normalize(secret)
    assert "stringData" not in normalized
    decoded = {k: base64.b64decode(v).decode() for k, v in normalized["data"].items()}
    assert decoded == {"kept": "kept", "both": "new", "password": "hunter2", "port": "5432"}


def test_normalize_secret_with_null_data():
    normalized = normalize({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": None,
                            "stringData": {"k": "v"}})
    assert normalized["data"] == {"k": base64.b64encode(b"v").decode()}


def test_normalize_leaves_string_data_of_other_kinds_alone():
    custom = {"apiVersion": "example.com/v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "v"}}
    assert normalize(custom) == custom


def test_normalize_does_not_mutate_and_adds_missing_metadata():
    secret = {"apiVersion": "v1", "kind": "Secret", "stringData": {"k": "v"}, "status": {}}
    pristine = copy.deepcopy(secret)
    normalized = normalize(secret)
    assert secret == pristine
    assert normalized["metadata"] == {}


@pytest.mark.parametrize("rendered", [
    {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "uid": "u", "managedFields": [{}]},
     "data": {"a": "YQ=="}, "stringData": {"k": "v"}},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "agg"},
     "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"x": "y"}}]}, "rules": [{"verbs": ["get"]}]},
], ids=["secret", "aggregated-cluster-role"])
def test_normalize_copies_every_part_it_changes(rendered):
    pristine = copy.deepcopy(rendered)
    normalized = normalize(rendered)
    assert normalized != pristine and rendered == pristine


# --------------------------------------------------------------------------------------------------------------------
# release_patch, reconcile_disabled


def test_release_patch_removes_our_stamps_and_keeps_the_rest():
    stamped = OWNER.stamp(configmap(labels={"app": "x"}, annotations={"note": "y"}), namespaced=True, adopted=True)
    released = merge_patch(stamped, OWNER.release_patch())
    assert released["metadata"]["labels"] == {"app": "x"}
    assert released["metadata"]["annotations"] == {"note": "y"}
    assert OWNER.claim(released["metadata"]) is Claim.UNCLAIMED
    assert released["data"] == stamped["data"]


def test_touch_patch_only_sets_the_time_in_an_annotation_of_ours():
    stamped = OWNER.stamp(configmap(labels={"app": "x"}, annotations={"note": "y"}), namespaced=True, adopted=False)
    touched = merge_patch(stamped, OWNER.touch_patch())
    (added,) = set(touched["metadata"]["annotations"]) - set(stamped["metadata"]["annotations"])
    assert added == "kfdef.apps.kubeflow.org/touched-at"
    assert datetime.fromisoformat(touched["metadata"]["annotations"][added]).tzinfo is not None
    untouched = {**touched["metadata"], "annotations": stamped["metadata"]["annotations"]}
    assert {**touched, "metadata": untouched} == stamped
    assert OWNER.unchanged(touched["metadata"], stamped)  # the digest still matches: no re-apply


@pytest.mark.parametrize("meta, disabled", [
    (None, False), ({}, False), ({"annotations": None}, False),
    ({"annotations": {"kfdef.apps.kubeflow.org/reconcile": "disabled"}}, True),
    ({"annotations": {"kfdef.apps.kubeflow.org/reconcile": "enabled"}}, False),
])
def test_opted_out(meta, disabled):
    assert opted_out(meta) is disabled


def test_the_holder_named_by_a_stamp_is_a_kfdef_path_only_for_a_well_formed_annotation():
    owner = Owner("platform", "tenant-b", "uid-1")
    named = {"annotations": {INSTANCE_ANNOTATION: "ghost.tenant-a"}}
    assert owner.claim(named) is Claim.FOREIGN
    assert owner.holder_path(named) == kfdef_path("tenant-a", "ghost")
    assert owner.holder_path({"annotations": {INSTANCE_ANNOTATION: "no-namespace"}}) is None
    assert owner.holder_path({"annotations": {INSTANCE_ANNOTATION: "x.Not_A_Namespace"}}) is None
    assert owner.holder_path({"labels": {INSTANCE_LABEL: "tenant-a.ghost"}}) is None  # a label may be a hash


def test_a_secret_of_another_shape_is_left_for_the_api_server_to_refuse():
    """``data`` as a list of pairs is no mapping: it is not turned into one (nor does normalize fail on it)."""
    odd = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": [["a", "YQ=="]],
           "stringData": {"k": "v"}}
    normalized = normalize(odd)
    assert normalized["data"] == [["a", "YQ=="]] and normalized["stringData"] == {"k": "v"}
