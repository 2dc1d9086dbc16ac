"""Upgrade of removed API versions: golden conversions, policy, refusals, structural schemas."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kfdef_operator.upgrade.convert import POLICY_OFF, UnservedApiVersions, served_for_release, upgrade_objects
from kfdef_operator.upgrade.crd import API_APPROVAL_ANNOTATION, UNAPPROVED, is_protected_group
from kfdef_operator.upgrade.served import served_resources_for_release, served_versions_for_release
from kfdef_operator.upgrade.structural import is_structural, structural_schema

FIXTURES = Path(__file__).parent.parent / "fixtures" / "upgrade"
SERVED_1_36 = served_for_release("1.36")
GOLDEN = sorted(path.name.removesuffix(".before.yaml") for path in FIXTURES.glob("*.before.yaml"))


def load(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((FIXTURES / name).read_text()) if doc]


def crd_schemas(crd: dict) -> list[dict]:
    return [version["schema"]["openAPIV3Schema"] for version in crd["spec"]["versions"]]


def deployment(api_version: str = "apps/v1", **spec) -> dict:
    template = {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "web"}]}}
    return {"apiVersion": api_version, "kind": "Deployment", "metadata": {"name": "web", "namespace": "kubeflow"},
            "spec": {"template": template, **spec}}


def v1beta1_crd(schema: object, **spec) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.example.com"},
            "spec": {"group": "example.com", "version": "v1", "names": {"kind": "Thing", "plural": "things"},
                     "validation": {"openAPIV3Schema": schema}, **spec}}


# --------------------------------------------------------------------------------------------------------------------
# Golden conversions


def test_every_fixture_has_an_after_file():
    assert len(GOLDEN) >= 12
    assert all((FIXTURES / f"{name}.after.yaml").exists() for name in GOLDEN)


@pytest.mark.parametrize("name", GOLDEN)
def test_conversion_matches_golden_file(name):
    before = load(f"{name}.before.yaml")
    pristine = copy.deepcopy(before)

    result = upgrade_objects(before, SERVED_1_36)

    assert result.objects == load(f"{name}.after.yaml")
    assert before == pristine, "input objects must not be mutated"
    assert result.unserved == []
    assert [(item.kind, item.from_version) for item in result.upgraded] == [
        (obj["kind"], obj["apiVersion"]) for obj in pristine]
    for obj in result.objects:
        assert SERVED_1_36(obj["apiVersion"], obj["kind"])
        if obj["kind"] == "CustomResourceDefinition":
            assert all(is_structural(schema) == [] for schema in crd_schemas(obj))


def test_converted_crd_shares_no_objects_between_versions():
    # yaml.safe_dump would write shared dicts as anchors and aliases.
    crd = load("crd-v1beta1-schemaless.before.yaml")
    (converted,) = upgrade_objects(crd, SERVED_1_36).objects
    first, second = converted["spec"]["versions"]
    assert first["schema"] is not second["schema"] and first["subresources"] is not second["subresources"]
    assert "&id" not in yaml.safe_dump(converted)


def test_crd_with_two_storage_versions_keeps_the_named_version():
    crd = v1beta1_crd(None, version="v2", versions=[{"name": "v2", "served": True, "storage": True},
                                                    {"name": "v1", "served": True, "storage": True}])
    result = upgrade_objects([crd], SERVED_1_36)
    assert [v["storage"] for v in result.objects[0]["spec"]["versions"]] == [True, False]
    assert any("storage version set to v2" in note for note in result.upgraded[0].notes)


# --------------------------------------------------------------------------------------------------------------------
# Served objects, policy, refusals


def test_served_objects_are_returned_as_they_are():
    served = deployment()
    custom = {"apiVersion": "kubeflow.org/v1", "kind": "Notebook", "metadata": {"name": "nb", "namespace": "kf"}}
    result = upgrade_objects([served, custom], SERVED_1_36)
    assert result.objects[0] is served and result.objects[1] is custom
    assert result.upgraded == [] and result.unserved == []


def test_served_set_of_pairs_from_discovery():
    old = deployment("extensions/v1beta1")
    result = upgrade_objects([old], {("apps/v1", "Deployment"), ("v1", "Service")})
    assert result.objects[0]["apiVersion"] == "apps/v1"


def test_most_preferred_served_successor_is_chosen():
    hpa = {"apiVersion": "autoscaling/v2beta1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
           "spec": {"metrics": [{"type": "Resource", "resource": {"name": "cpu", "targetAverageUtilization": 5}}]}}
    on_1_24 = upgrade_objects([hpa], {("autoscaling/v2beta2", "HorizontalPodAutoscaler")})
    assert on_1_24.objects[0]["apiVersion"] == "autoscaling/v2beta2"
    assert on_1_24.objects[0]["spec"]["metrics"][0]["resource"]["target"] == {"type": "Utilization",
                                                                               "averageUtilization": 5}


def test_custom_resources_of_crds_among_the_objects_count_as_served():
    crd = load("crd-v1beta1.before.yaml")[0]
    notebook = {"apiVersion": "kubeflow.org/v1beta1", "kind": "Notebook", "metadata": {"name": "nb"}}
    result = upgrade_objects([crd, notebook], SERVED_1_36)
    assert result.objects[1] is notebook and result.unserved == []


def test_policy_off_raises_listing_every_unserved_object():
    objects = [deployment("extensions/v1beta1"), deployment(), load("crd-v1beta1.before.yaml")[0],
               {"apiVersion": "policy/v1beta1", "kind": "PodSecurityPolicy", "metadata": {"name": "restricted"}}]
    with pytest.raises(UnservedApiVersions) as raised:
        upgrade_objects(objects, SERVED_1_36, policy=POLICY_OFF)
    message = str(raised.value)
    assert message.splitlines()[1:4] == [
        "  - Deployment kubeflow/web (extensions/v1beta1)",
        "  - CustomResourceDefinition notebooks.kubeflow.org (apiextensions.k8s.io/v1beta1)",
        "  - PodSecurityPolicy restricted (policy/v1beta1)",
    ]
    assert message.startswith("3 objects") and "kfdef.apps.kubeflow.org/api-upgrade" in message
    assert len(raised.value.objects) == 3


def test_policy_off_with_everything_served_returns_the_objects():
    objects = [deployment()]
    assert upgrade_objects(objects, SERVED_1_36, policy=POLICY_OFF).objects == objects


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="auto, off"):
        upgrade_objects([], SERVED_1_36, policy="sometimes")


@pytest.mark.parametrize(("obj", "reason"), [
    ({"apiVersion": "policy/v1beta1", "kind": "PodSecurityPolicy"}, "without a successor"),
    ({"apiVersion": "extensions/v1beta1", "kind": "PodSecurityPolicy"}, "without a successor"),
    ({"apiVersion": "certificates.k8s.io/v1beta1", "kind": "CertificateSigningRequest"}, "signerName"),
    ({"apiVersion": "events.k8s.io/v1beta1", "kind": "Event"}, "not desired state"),
    ({"apiVersion": "kubeflow.org/v1alpha1", "kind": "Gone"}, "custom resources are never converted"),
    ({"apiVersion": "extensions/v1beta1", "kind": "Deployment", "spec": {"template": {}}}, "no labels"),
])
def test_unconvertible_objects_are_reported_and_left_out(obj, reason):
    obj = {**obj, "metadata": {"name": "x", "namespace": "ns"}}
    result = upgrade_objects([obj, deployment()], {("apps/v1", "Deployment")})
    assert [item.describe() for item in result.unserved] == [f"{obj['kind']} ns/x ({obj['apiVersion']})"]
    assert reason in result.unserved[0].reason
    assert result.objects == [deployment()]


def test_no_served_successor_is_reported():
    result = upgrade_objects([deployment("apps/v1beta2")], lambda api_version, kind: False)
    assert "apps/v1 is served" in result.unserved[0].reason


def test_notes_name_what_could_not_be_kept_exactly():
    objects = load("webhooks-v1beta1.before.yaml") + load("pdb-v1beta1.before.yaml") + load("reshaped.before.yaml")
    notes = {item.name: item.notes for item in upgrade_objects(objects, SERVED_1_36).upgraded}
    assert len(notes["admission-webhook-mutating-webhook-configuration"]) == 1
    assert "sideEffects Some" in notes["katib-validating"][0]
    assert "empty selector removed" in notes["placeholder"][0]
    assert notes["ml-pipeline"] == ()
    assert "example.com/rack" in notes["external-db"][0]


def test_what_v1_refuses_is_repaired_and_each_repair_is_a_note():
    result = upgrade_objects(load("v1-requirements.before.yaml"), SERVED_1_36)
    notes = {item.name: item.notes for item in result.upgraded}
    [approval] = notes["applications.app.k8s.io"]
    assert f"{API_APPROVAL_ANNOTATION}: {UNAPPROVED!r} added" in approval
    assert notes["volumesnapshots.snapshot.storage.k8s.io"] == () and notes["things.notk8s.io"] == ()
    assert notes["profiles-deployment"] == (
        "metadata.initializers dropped: the field was removed in Kubernetes 1.14",
        "spec.template.metadata.initializers dropped: the field was removed in Kubernetes 1.14")
    assert [note.split(" (")[0] for note in notes["inferenceservice.serving.kubeflow.org"]] == [
        "webhook inferenceservice.kfserving-webhook-server.pod-mutator: repeated name, this one renamed to "
        f"inferenceservice-{n}.kfserving-webhook-server.pod-mutator" for n in (3, 4)]


@pytest.mark.parametrize(("group", "protected"), [
    ("k8s.io", True), ("app.k8s.io", True), ("kubernetes.io", True), ("x.kubernetes.io", True),
    ("notk8s.io", False), ("k8s.io.example.com", False), ("kubeflow.org", False)])
def test_protected_groups_are_k8s_io_and_kubernetes_io_and_their_subgroups(group, protected):
    assert is_protected_group(group) is protected


def test_the_approval_value_is_one_the_server_accepts_without_claiming_a_review():
    # GetAPIApprovalState: a URL means approved, a value starting with "unapproved" is accepted and flagged.
    assert UNAPPROVED.startswith("unapproved") and "://" not in UNAPPROVED


def test_renamed_webhooks_stay_fully_qualified_dns_names():
    long_label = "w" * 63
    webhooks = [{"name": f"{long_label}.example.com", "sideEffects": "None"} for _ in range(12)]
    config = {"apiVersion": "admissionregistration.k8s.io/v1beta1", "kind": "ValidatingWebhookConfiguration",
              "metadata": {"name": "many"}, "webhooks": webhooks}
    [converted] = upgrade_objects([config], SERVED_1_36).objects
    names = [webhook["name"] for webhook in converted["webhooks"]]
    assert len(set(names)) == 12 and names[0] == f"{long_label}.example.com"
    assert names[-1] == f"{'w' * 60}-12.example.com"
    assert all(len(name.split(".")[0]) <= 63 and name.endswith(".example.com") for name in names)


def test_served_objects_lose_initializers_wherever_object_metadata_sits_each_noted():
    """Kubeflow v1.0.2's spark-operator Deployment (apps/v1, served) has them in its pod template: the server
    refuses the field everywhere, so every ObjectMeta an object embeds is cleaned, and only such objects change."""
    served = deployment()
    served["spec"]["template"]["metadata"]["initializers"] = {"pending": []}
    claims = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"}, "spec": {
        "template": {"metadata": {}}, "volumeClaimTemplates": [
            {"metadata": {"name": "data", "initializers": {"pending": []}}}]}}
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"}, "spec": {"jobTemplate": {
        "metadata": {"initializers": {}}, "spec": {"template": {"metadata": {"initializers": {}}}}}}}
    untouched = deployment()
    result = upgrade_objects([served, claims, cron, untouched], SERVED_1_36)
    assert result.objects[3] is untouched
    assert all("initializers" not in json.dumps(obj) for obj in result.objects)
    assert "initializers" in json.dumps(served), "the rendered object itself is not modified"
    notes = {item.kind: item.notes for item in result.upgraded}
    assert notes == {
        "Deployment": ("spec.template.metadata.initializers dropped: the field was removed in Kubernetes 1.14",),
        "StatefulSet": ("spec.volumeClaimTemplates[0].metadata.initializers dropped: the field was removed in "
                        "Kubernetes 1.14",),
        "CronJob": ("spec.jobTemplate.metadata.initializers dropped: the field was removed in Kubernetes 1.14",
                    "spec.jobTemplate.spec.template.metadata.initializers dropped: the field was removed in "
                    "Kubernetes 1.14")}
    assert all(item.from_version == item.to_version for item in result.upgraded)


def test_summary_counts_kinds():
    result = upgrade_objects(load("workloads-apps-v1beta.before.yaml") + [
        {"apiVersion": "policy/v1beta1", "kind": "PodSecurityPolicy", "metadata": {"name": "p"}}], SERVED_1_36)
    assert result.summary() == ("upgraded 7 objects (ControllerRevision 1, DaemonSet 2, Deployment 1, ReplicaSet 1, "
                                "StatefulSet 2); 1 objects of unserved API versions not convertible")


# --------------------------------------------------------------------------------------------------------------------
# Release table


def test_served_versions_for_release():
    assert "rbac.authorization.k8s.io/v1beta1" not in served_versions_for_release("1.36")
    assert "rbac.authorization.k8s.io/v1beta1" in served_versions_for_release("v1.21.3")
    assert {"v1", "apps/v1", "apiextensions.k8s.io/v1"} <= served_versions_for_release("1.36")
    assert "flowcontrol.apiserver.k8s.io/v1beta3" in served_versions_for_release("1.31")
    assert "flowcontrol.apiserver.k8s.io/v1beta3" not in served_versions_for_release("1.32")


def test_served_resources_for_release_are_per_kind():
    on_1_20 = served_resources_for_release("1.20")
    assert ("extensions/v1beta1", "Ingress") in on_1_20
    assert ("extensions/v1beta1", "Deployment") not in on_1_20
    assert ("rbac.authorization.k8s.io/v1alpha1", "Role") not in on_1_20  # alpha: off by default


def test_offline_predicate_assumes_unknown_pairs_served():
    assert SERVED_1_36("v1", "ConfigMap") and SERVED_1_36("kubeflow.org/v1", "Notebook")
    assert not SERVED_1_36("batch/v1beta1", "CronJob")


@pytest.mark.parametrize("release", ["2.0", "1", "latest"])
def test_bad_release_is_refused(release):
    with pytest.raises(ValueError):
        served_versions_for_release(release)


# --------------------------------------------------------------------------------------------------------------------
# Structural schemas

OBJ = {"type": "object"}


@pytest.mark.parametrize("schema", [
    {"type": "object"},
    {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    {"type": "object", "properties": {"metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
                                      "spec": {"type": "object", "additionalProperties": {"type": "string"}}}},
    {"type": "object", "properties": {"port": {"x-kubernetes-int-or-string": True,
                                               "anyOf": [{"type": "integer"}, {"type": "string"}]}}},
    {"type": "object", "properties": {"any": {"x-kubernetes-preserve-unknown-fields": True}}},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    {"type": "object", "properties": {"s": {"type": "object", "properties": {"a": {"type": "integer"}},
                                            "oneOf": [{"required": ["a"]}, {"properties": {"a": {"minimum": 1}}}]}}},
    {"type": "object", "properties": {"list": {"type": "array", "x-kubernetes-list-type": "map",
                                               "x-kubernetes-list-map-keys": ["name"],
                                               "items": {"type": "object", "required": ["name"],
                                                         "properties": {"name": {"type": "string"}}}}}},
    {"type": "object", "properties": {"pod": {"type": "object", "x-kubernetes-embedded-resource": True,
                                              "x-kubernetes-preserve-unknown-fields": True}}},
])
def test_structural_schemas_pass(schema):
    assert is_structural(schema) == []


@pytest.mark.parametrize(("schema", "violation"), [
    ({"properties": {}}, "<root>: type must be object at the root"),
    ({"type": "object", "properties": {"a": {}}}, "properties.a: type must be set for object fields"),
    ({"type": "object", "properties": {"a": {"type": "array"}}}, "properties.a: type array needs items"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": [OBJ]}}}, "items must be a single schema"),
    ({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": OBJ},
                                             "additionalProperties": True}}}, "mutually exclusive"),
    ({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": OBJ}}}},
     "may only restrict name and generateName"),
    ({"type": "object", "properties": {"a": {"$ref": "#/definitions/b"}}}, "$ref is not supported"),
    ({"type": "object", "additionalProperties": OBJ}, "<root>: additionalProperties is not supported here"),
    ({"type": "object", "properties": {"a": {"type": "integer", "anyOf": [{"type": "integer"}]}}},
     "properties.a.anyOf[0]: type is not allowed"),
    ({"type": "object", "properties": {"a": {"type": "object", "allOf": [{"properties": {"b": {}}}]}}},
     "property 'b' is not specified outside"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?!x)"}}}, "RE2"),
    ({"type": "object", "properties": {"a": {"type": "string", "x-kubernetes-list-type": "set"}}},
     "needs type: array"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": OBJ, "uniqueItems": True}}},
     "uniqueItems"),
    ({"type": "object", "properties": {"a": {"type": "object", "x-kubernetes-preserve-unknown-fields": False}}},
     "must be true or absent"),
    ({"type": "object", "properties": {"a": {"x-kubernetes-int-or-string": True,
                                             "x-kubernetes-preserve-unknown-fields": True}}}, "must not be set"),
    ({"type": "object", "properties": {"kind": {"type": "integer"}}}, "properties.kind must be type: string"),
    ({"type": "object", "nullable": True}, "nullable is not supported here"),
    ("object", "must be a schema object"),
])
def test_non_structural_schemas_are_reported(schema, violation):
    assert any(violation in found for found in is_structural(schema)), is_structural(schema)


def test_repair_keeps_what_is_structural_and_loosens_the_rest():
    schema = {"properties": {
        "metadata": {"properties": {"name": {"type": "string", "pattern": "^kf-"}, "labels": OBJ}},
        "spec": {"properties": {"size": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
                                "mode": {"type": "string", "oneOf": [{"type": "string", "enum": ["a"]}]},
                                "ref": {"$ref": "#/definitions/ref"},
                                "tags": {"type": "array"}}}}}
    repaired, notes = structural_schema(schema, preserve_unknown_fields=False)
    assert repaired == {"type": "object", "properties": {
        "metadata": {"type": "object", "properties": {"name": {"type": "string", "pattern": "^kf-"}}},
        "spec": {"type": "object", "properties": {
            "size": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "mode": {"type": "string"},
            "ref": {"x-kubernetes-preserve-unknown-fields": True},
            "tags": {"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": True}}}}}}
    assert any("spec.properties.mode.oneOf: not structural" in note for note in notes)
    assert any("ref: dropped $ref" in note for note in notes)


def test_preserving_unknown_fields_marks_object_nodes_but_not_metadata_or_maps():
    schema = {"type": "object", "properties": {"metadata": OBJ, "labels": {"type": "object",
                                                                          "additionalProperties": OBJ}}}
    repaired, _ = structural_schema(schema, preserve_unknown_fields=True)
    assert repaired["x-kubernetes-preserve-unknown-fields"] is True
    assert repaired["properties"]["metadata"] == OBJ
    assert "x-kubernetes-preserve-unknown-fields" not in repaired["properties"]["labels"]
    assert repaired["properties"]["labels"]["additionalProperties"]["x-kubernetes-preserve-unknown-fields"] is True


def test_missing_schema_preserves_unknown_fields():
    assert structural_schema(None, preserve_unknown_fields=False) == (
        {"type": "object", "x-kubernetes-preserve-unknown-fields": True}, [])


# Random, often non-structural, schemas: every keyword the repair knows, valid and invalid values.
_names = st.sampled_from(["metadata", "spec", "status", "kind", "apiVersion", "name", "generateName", "a", "b"])
_leaves = st.fixed_dictionaries({}, optional={
    "type": st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "null", "weird"]),
    "description": st.text(max_size=3), "nullable": st.booleans(), "uniqueItems": st.booleans(),
    "pattern": st.sampled_from(["^a", "(?=x)", "[", "\\1"]), "enum": st.lists(st.integers(), max_size=2),
    "default": st.integers(), "required": st.lists(_names, max_size=2), "$ref": st.just("#/x"),
    "x-kubernetes-preserve-unknown-fields": st.booleans(), "x-kubernetes-int-or-string": st.booleans(),
    "x-kubernetes-embedded-resource": st.booleans(), "x-kubernetes-list-type": st.sampled_from(["map", "set", "x"]),
    "x-kubernetes-list-map-keys": st.lists(_names, max_size=2), "x-kubernetes-map-type": st.sampled_from(["atomic",
                                                                                                          "x"]),
    "x-unknown": st.integers(),
})


def _extend(children):
    return st.tuples(_leaves, st.fixed_dictionaries({}, optional={
        "properties": st.dictionaries(_names, children, max_size=3),
        "items": children | st.lists(children, max_size=2),
        "additionalProperties": st.booleans() | children,
        "allOf": st.lists(children, max_size=2), "anyOf": st.lists(children, max_size=2)
        | st.just([{"type": "integer"}, {"type": "string"}]),
        "oneOf": st.lists(children, max_size=2), "not": children,
    })).map(lambda parts: {**parts[0], **parts[1]})


random_schemas = st.recursive(_leaves, _extend, max_leaves=12) | st.none() | st.integers()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=random_schemas, preserve=st.sampled_from([None, True, False]))
def test_any_v1beta1_crd_converts_to_a_structural_v1_crd(schema, preserve):
    spec = {} if preserve is None else {"preserveUnknownFields": preserve}
    result = upgrade_objects([v1beta1_crd(schema, **spec)], SERVED_1_36)
    (crd,) = result.objects
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1" and "preserveUnknownFields" not in crd["spec"]
    for converted in crd_schemas(crd):
        assert is_structural(converted) == []
        assert structural_schema(converted, preserve_unknown_fields=False)[0] == converted  # structural: kept


def test_each_result_object_knows_its_index_in_the_input():
    """Callers keep what they know of each object (its application) by index, never by matching objects again."""
    objects = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "served"}},
        {"apiVersion": "policy/v1beta1", "kind": "PodSecurityPolicy", "metadata": {"name": "left-out"}},
        {"apiVersion": "extensions/v1beta1", "kind": "Deployment", "metadata": {"name": "converted"},
         "spec": {"template": {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": []}}}},
    ]
    result = upgrade_objects(objects, served_for_release("1.36"))
    assert result.origin == [0, 2]
    assert [obj["metadata"]["name"] for obj in result.objects] == ["served", "converted"]
    assert result.objects[0] is objects[0] and result.objects[1]["apiVersion"] == "apps/v1"
