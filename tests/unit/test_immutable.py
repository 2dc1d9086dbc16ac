"""Immutable-field refusals told apart from other refusals by the server's own words (ssa/immutable.py), and what a
re-create would destroy per kind. The answers are kube-apiserver v1.36's, as tests/cluster/test_immutable_fields.py
records them; here the parsing is pinned, with the answers a substring match got wrong."""

from __future__ import annotations

import pytest

from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.ssa.immutable import data_at_stake, is_immutable_error

STATEFULSET_SPEC = ("Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
                    "'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and "
                    "'minReadySeconds' are forbidden")


def invalid(*causes: tuple[str, str], status: int = 422, message: str | None = None) -> KubeApiError:
    body = {"reason": "Invalid", "message": message or "X is invalid: " + ", ".join(f"{f}: {m}" for f, m in causes),
            "details": {"causes": [{"field": field, "message": text} for field, text in causes]}}
    return KubeApiError(status, "PATCH", "/apis/x", body)


@pytest.mark.parametrize("causes", [
    [("spec", STATEFULSET_SPEC)],
    [("value", "Forbidden: may not be changed in an update.")],
    [("parameters", "Forbidden: updates to parameters are forbidden.")],
    [("spec.selector", 'Invalid value: {"matchLabels":{"app":"b"}}: field is immutable')],
    [("spec.selector", 'Invalid value: {"matchLabels":{"app":"y"}}: field is immutable'),
     ("spec.template", 'Invalid value: {"labels":{"app":"y"}}: field is immutable')],
    [("spec.clusterIPs[0]", 'Invalid value: ["None"]: may not change once set')],
    [("spec", "Forbidden: spec is immutable after creation except resources.requests and "
              "volumeAttributesClassName for bound claims\n@@ -10,7 +10,7 @@\n- \"StorageClassName\": \"slow\",")],
    [("data", "Forbidden: field is immutable when `immutable` is set")],
    [("roleRef", 'Invalid value: {"APIGroup":"rbac.authorization.k8s.io","Kind":"ClusterRole","Name":"edit"}: '
                 "cannot change roleRef")],
    [("spec", "Forbidden: pod updates may not change fields other than `spec.containers[*].image`")],
    [("spec.size", 'Invalid value: "string": Value is immutable')],  # a CRD's CEL rule self == oldSelf
], ids=["statefulset", "priorityclass", "volumeattributesclass", "selector", "job", "service", "pvc", "configmap",
        "rolebinding", "pod", "cel"])
def test_every_recorded_wording_is_an_immutable_field_refusal(causes):
    assert is_immutable_error(invalid(*causes))


def test_the_statefulset_answer_was_missed_by_the_substring_match():
    """The answer issue 38 saw for three StatefulSets of Kubeflow v1.2.0, which the old check did not recognise."""
    error = invalid(("spec", STATEFULSET_SPEC))
    text = error.message.lower()
    assert not ("immutable" in text or "cannot change" in text or "may not change" in text)
    assert is_immutable_error(error)


@pytest.mark.parametrize("causes", [
    # The manifest's value says "immutable"; the server's detail does not.
    [("metadata.labels", 'Invalid value: "field-is-immutable!": a valid label must be an empty string or consist '
                         "of alphanumeric characters")],
    [("spec.replicas", "Invalid value: -1: must be greater than or equal to 0")],
    # One cause is not about an immutable field: a re-create would be refused too, after the delete.
    [("spec.selector", 'Invalid value: {"matchLabels":{"app":"b"}}: field is immutable'),
     ("spec.replicas", "Invalid value: -1: must be greater than or equal to 0")],
    [("status.storedVersions[0]", 'Invalid value: "v1alpha1": missing from spec.versions; v1alpha1 was previously '
                                  "a storage version, and must remain in spec.versions")],
    [("spec.size", "Required value")],
], ids=["value-says-immutable", "plain-invalid", "mixed", "stored-versions", "required"])
def test_other_refusals_are_not(causes):
    assert not is_immutable_error(invalid(*causes))


def test_only_invalid_and_conflict_answers_count():
    assert not is_immutable_error(invalid(("data", "Forbidden: field is immutable when `immutable` is set"),
                                          status=403))


def test_an_answer_without_causes_is_read_from_its_message():
    assert is_immutable_error(invalid(message='Deployment.apps "d" is invalid: spec.selector: Invalid value: '
                                              '{"matchLabels":{"app":"b"}}: field is immutable'))
    assert not is_immutable_error(invalid(message='ConfigMap "immutable" is invalid: data[x y]: Invalid value: '
                                                  '"x y": a valid config key must consist of alphanumeric characters'))


def statefulset(policy: dict | None = None, claims: bool = True) -> dict:
    spec: dict = {"serviceName": "web"}
    if claims:
        spec["volumeClaimTemplates"] = [{"metadata": {"name": "data"}}]
    if policy is not None:
        spec["persistentVolumeClaimRetentionPolicy"] = policy
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": spec}


def test_a_statefulset_whose_claims_are_retained_puts_no_data_at_stake():
    assert data_at_stake("StatefulSet", statefulset()) is None
    assert data_at_stake("StatefulSet", statefulset({"whenDeleted": "Retain", "whenScaled": "Delete"})) is None
    assert data_at_stake("StatefulSet", statefulset({"whenDeleted": "Delete"}, claims=False)) is None


def test_a_statefulset_whose_claims_go_with_it_does():
    assert "claims would be deleted with it" in data_at_stake("StatefulSet", statefulset({"whenDeleted": "Delete"}))


@pytest.mark.parametrize("kind", ["PersistentVolumeClaim", "PersistentVolume", "ConfigMap", "Secret",
                                  "CustomResourceDefinition", "Namespace", "Pod"])
def test_data_holding_kinds_are_at_stake(kind):
    assert data_at_stake(kind, {"kind": kind}) == f"{kind} may hold data"


@pytest.mark.parametrize("kind", ["Deployment", "Service", "Job", "ClusterRoleBinding", "StorageClass",
                                  "PriorityClass"])
def test_stateless_kinds_are_not(kind):
    assert data_at_stake(kind, None) is None
