"""Deciding that a CRD needs its stored versions migrated, and the plan (ssa/storedversions.py); the migration itself
runs against kube-apiserver in tests/cluster/test_stored_versions.py."""

from __future__ import annotations

import copy

import pytest

from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.ssa.storedversions import (
    NotMigratable,
    is_stored_version_refusal,
    lost_fields,
    managed_fields_at_storage,
    plan_migration,
)

#: kube-apiserver v1.36's answer to a CRD dropping a stored version (its one cause).
STORED_VERSION_CAUSE = {
    "reason": "FieldValueInvalid", "field": "status.storedVersions[0]",
    "message": 'Invalid value: "v1alpha1": missing from spec.versions; v1alpha1 was previously a storage version, and '
               "must remain in spec.versions until a storage migration ensures no data remains persisted in v1alpha1 "
               "and removes v1alpha1 from status.storedVersions"}


def answer(status: int, *causes: dict) -> KubeApiError:
    return KubeApiError(status, "PATCH", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.io",
                        {"reason": "Invalid", "message": "invalid", "details": {"causes": list(causes)}})


def test_the_refusal_of_a_crd_dropping_a_stored_version_is_recognised():
    assert is_stored_version_refusal(answer(422, STORED_VERSION_CAUSE))
    assert is_stored_version_refusal(answer(422, {"field": "spec.versions[0].schema", "message": "x"},
                                            STORED_VERSION_CAUSE))


@pytest.mark.parametrize("error", [
    answer(422, {"field": "spec.scope", "message": 'Invalid value: "Cluster": field is immutable'}),
    answer(409, STORED_VERSION_CAUSE),
    answer(422),
], ids=["other-field", "conflict", "no-causes"])
def test_other_answers_are_not(error):
    assert not is_stored_version_refusal(error)


def entry(name: str, *, storage: bool, served: bool = True, marker: str = "") -> dict:
    return {"name": name, "served": served, "storage": storage,
            "schema": {"openAPIV3Schema": {"type": "object", "description": marker or name}}}


def crd(*versions: dict, conversion: dict | None = None, scope: str = "Namespaced") -> dict:
    spec = {"group": "example.io", "scope": scope, "names": {"kind": "Widget", "plural": "widgets"},
            "versions": list(versions)}
    if conversion is not None:
        spec["conversion"] = conversion
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.io"}, "spec": spec}


def live(*versions: dict, stored: list[str]) -> dict:
    return {**crd(*versions), "status": {"storedVersions": stored}}


def test_no_plan_when_every_stored_version_is_kept():
    rendered = crd(entry("v1alpha1", storage=False, served=False), entry("v1", storage=True))
    assert plan_migration(rendered, live(entry("v1alpha1", storage=True), stored=["v1alpha1"])) is None
    assert plan_migration(crd(entry("v1", storage=True)), live(entry("v1", storage=True), stored=["v1"])) is None


def test_the_plan_keeps_the_dropped_versions_served_beside_the_rendered_ones():
    rendered = crd(entry("v1beta1", storage=True))
    current = live(entry("v1alpha3", storage=False, marker="live v1alpha3"),
                   entry("v1alpha2", storage=True, served=False, marker="live v1alpha2"),
                   stored=["v1alpha2", "v1alpha3"])
    original = copy.deepcopy(rendered)
    plan = plan_migration(rendered, current)
    assert plan is not None
    assert (plan.name, plan.group, plan.kind, plan.plural, plan.namespaced) == (
        "widgets.example.io", "example.io", "Widget", "widgets", True)
    assert plan.dropped == ("v1alpha2", "v1alpha3") and plan.storage == "v1beta1"
    assert [(v["name"], v["served"], v["storage"], v["schema"]["openAPIV3Schema"]["description"])
            for v in plan.bridge["spec"]["versions"]] == [
        ("v1beta1", True, True, "v1beta1"), ("v1alpha2", True, False, "live v1alpha2"),
        ("v1alpha3", True, False, "live v1alpha3")]
    assert {key: value for key, value in plan.bridge["spec"].items() if key != "versions"} == {
        key: value for key, value in rendered["spec"].items() if key != "versions"}
    assert rendered == original, "the rendered CRD is left as it was"
    assert plan.resource("v1alpha2").collection_path() == "/apis/example.io/v1alpha2/widgets"


def test_a_rendered_version_stays_as_rendered_even_when_stored():
    """storedVersions [v1alpha1, v1]: only v1alpha1 is taken from the live CRD; v1 is the rendered one."""
    plan = plan_migration(crd(entry("v1", storage=True, marker="rendered v1")),
                          live(entry("v1alpha1", storage=False), entry("v1", storage=True, marker="live v1"),
                               stored=["v1alpha1", "v1"]))
    assert plan is not None and plan.dropped == ("v1alpha1",)
    assert [v["schema"]["openAPIV3Schema"]["description"] for v in plan.bridge["spec"]["versions"]] == [
        "rendered v1", "v1alpha1"]


@pytest.mark.parametrize(("conversion", "as_is"), [
    (None, True), ({"strategy": "None"}, True),
    ({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"]}}, False)])
def test_only_a_crd_without_conversion_webhook_reads_the_same_at_every_version(conversion, as_is):
    plan = plan_migration(crd(entry("v1", storage=True), conversion=conversion),
                          live(entry("v1alpha1", storage=True), stored=["v1alpha1"]))
    assert plan is not None and plan.converted_as_is is as_is


def test_cluster_scoped_kinds_are_listed_without_namespace():
    plan = plan_migration(crd(entry("v1", storage=True), scope="Cluster"),
                          live(entry("v1alpha1", storage=True), stored=["v1alpha1"]))
    assert plan is not None and not plan.namespaced
    assert plan.resource("v1").object_path("one") == "/apis/example.io/v1/widgets/one"


@pytest.mark.parametrize("versions", [[entry("v1", storage=False)], [entry("v1", storage=True),
                                                                     entry("v2", storage=True)]],
                         ids=["none", "two"])
def test_a_rendered_crd_without_a_single_storage_version_cannot_be_migrated_to(versions):
    with pytest.raises(NotMigratable, match="storage versions, not one"):
        plan_migration(crd(*versions), live(entry("v1alpha1", storage=True), stored=["v1alpha1"]))


def test_the_storage_version_hash_is_the_one_discovery_shows():
    """Recorded from kube-apiserver v1.36's discovery (``/apis/example.io/v1``) for widgets.example.io stored at v1."""
    plan = plan_migration(crd(entry("v1", storage=True)), live(entry("v1alpha1", storage=True), stored=["v1alpha1"]))
    assert plan is not None and plan.storage_version_hash == "1ko09pd2AaU="


def test_lost_fields_are_those_the_new_reading_lacks():
    before = {"apiVersion": "example.io/v1alpha1", "metadata": {"name": "a", "labels": {"x": "y"}},
              "spec": {"size": 2, "legacy": "only here", "nothing": None,
                       "items": [{"name": "i", "old": 1}, {"name": "j"}], "tags": ["a", "b"]},
              "status": {"phase": "Done"}}
    after = {"apiVersion": "example.io/v1", "metadata": {"name": "a"},
             "spec": {"size": 2, "items": [{"name": "i"}, {"name": "j"}], "tags": ["a", "b"], "added": True},
             "status": {}}
    assert lost_fields(before, after) == [".spec.legacy", ".spec.items[0].old", ".status.phase"]


def test_nothing_is_lost_between_equal_readings():
    obj = {"apiVersion": "example.io/v1alpha1", "kind": "Widget", "metadata": {"name": "a"}, "spec": {"size": 1}}
    assert lost_fields(obj, {**obj, "apiVersion": "example.io/v1"}) == []


def test_managed_fields_of_a_dropped_version_move_to_the_storage_version():
    plan = plan_migration(crd(entry("v1", storage=True)), live(entry("v1alpha2", storage=True),
                                                               stored=["v1alpha2", "v1"]))
    assert plan is not None
    fields = {"f:spec": {"f:size": {}}}
    managed = [{"manager": "kfdef-operator", "operation": "Apply", "apiVersion": "example.io/v1alpha2",
                "fieldsType": "FieldsV1", "fieldsV1": fields},
               {"manager": "kubectl", "operation": "Update", "apiVersion": "example.io/v1", "fieldsV1": fields},
               {"manager": "other", "operation": "Update", "apiVersion": "elsewhere.io/v1alpha2"}]
    moved = managed_fields_at_storage(managed, plan)
    assert [entry["apiVersion"] for entry in moved] == ["example.io/v1", "example.io/v1", "elsewhere.io/v1alpha2"]
    assert moved[0] == {**managed[0], "apiVersion": "example.io/v1"}  # the field set kept as recorded
    assert managed_fields_at_storage(managed[1:], plan) is None
