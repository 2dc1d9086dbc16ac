"""Drift detection: desired as a subset of live (kfdef_operator.ssa.drift)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfdef_operator.ssa.drift import comparable, drifted, is_subset

DESIRED = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "kubeflow", "labels": {"app": "web"},
                 "annotations": {"kfctl.kubeflow.io/kfdef-instance": "kubeflow.kubeflow"}},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
             "template": {"metadata": {"labels": {"app": "web"}},
                          "spec": {"containers": [{"name": "web", "image": "web:1",
                                                   "ports": [{"containerPort": 8080}]}]}}},
}


def as_live(desired: dict) -> dict:
    """What the server returns for ``desired``: defaults, server metadata and status added."""
    live = copy.deepcopy(desired)
    live["metadata"].update(uid="u-1", resourceVersion="42", generation=1, creationTimestamp="2024-01-01T00:00:00Z",
                            managedFields=[{"manager": "kfdef-operator"}])
    live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "1"
    spec = live["spec"]
    spec.update(progressDeadlineSeconds=600, revisionHistoryLimit=10,
                strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
    container = spec["template"]["spec"]["containers"][0]
    container.update(imagePullPolicy="IfNotPresent", terminationMessagePath="/dev/termination-log")
    container["ports"][0]["protocol"] = "TCP"
    spec["template"]["spec"].update(restartPolicy="Always", dnsPolicy="ClusterFirst")
    live["status"] = {"replicas": 2, "observedGeneration": 1}
    return live


# --------------------------------------------------------------------------------------------------------------------
# is_subset


@pytest.mark.parametrize("case, want, have", [
    ("equal scalars", 1, 1),
    ("server defaults added", {"a": 1}, {"a": 1, "b": 2}),
    ("nested defaults added", {"a": {"b": 1}}, {"a": {"b": 1, "c": 2}, "d": 3}),
    ("defaults inside list items", [{"port": 80}], [{"port": 80, "protocol": "TCP"}]),
    ("int port vs string", {"targetPort": 8080}, {"targetPort": "8080"}),
    ("string port vs int", {"port": "80"}, {"port": 80}),
    ("quantity as int vs string", {"cpu": 1}, {"cpu": "1"}),
    ("empty dict absent", {"a": {}}, {}),
    ("empty list absent", {"a": []}, {}),
    ("null absent", {"a": None}, {}),
    ("empty dict vs null", {"a": {}}, {"a": None}),
    ("empty list vs null", {"a": []}, {"a": None}),
    ("null vs empty dict", {"a": None}, {"a": {}}),
    ("empty want", {}, {"anything": 1}),
    ("empty lists", [], []),
])
def test_is_subset_holds(case, want, have):
    assert is_subset(want, have), case


@pytest.mark.parametrize("case, want, have", [
    ("changed scalar", {"replicas": 2}, {"replicas": 3}),
    ("changed nested scalar", {"a": {"b": "x"}}, {"a": {"b": "y"}}),
    ("removed key", {"a": 1, "b": 2}, {"a": 1}),
    ("removed nested key", {"a": {"b": 1}}, {"a": {}}),
    ("list got longer", [1, 2], [1, 2, 3]),
    ("list got shorter", [1, 2], [1]),
    ("list item changed", [{"name": "a"}], [{"name": "b"}]),
    ("list order changed", ["a", "b"], ["b", "a"]),
    ("dict replaced by scalar", {"a": {"b": 1}}, {"a": "x"}),
    ("list replaced by dict", {"a": [1]}, {"a": {"0": 1}}),
    ("value became null", {"a": 1}, {"a": None}),
    ("null became a value", {"a": None}, {"a": 1}),
    ("non-empty dict absent", {"a": {"b": 1}}, {}),
    ("bool vs string", {"a": True}, {"a": "yes"}),
    ("int vs different string", {"port": 80}, {"port": "http"}),
])
def test_is_subset_fails(case, want, have):
    assert not is_subset(want, have), case


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3)),
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(max_size=3), children,
                                                                                 max_size=3)),
    max_leaves=12)


@given(_JSON)
def test_anything_is_a_subset_of_itself(value):
    assert is_subset(value, value)


@given(st.dictionaries(st.text(max_size=3), _JSON, max_size=4), st.dictionaries(st.text(max_size=3), _JSON, max_size=3))
def test_added_keys_never_count_as_drift(want, extra):
    have = {**extra, **want}
    assert is_subset(want, have)


# --------------------------------------------------------------------------------------------------------------------
# drifted


def test_live_object_with_server_defaults_has_not_drifted():
    assert not drifted(DESIRED, as_live(DESIRED))


def test_status_and_server_metadata_are_ignored():
    desired = copy.deepcopy(DESIRED)
    desired["status"] = {"replicas": 99}
    desired["metadata"].update(uid="other", resourceVersion="1", generation=7, ownerReferences=[{"uid": "x"}],
                               finalizers=["f"], managedFields=[{"manager": "x"}])
    assert not drifted(desired, as_live(DESIRED))


def test_api_version_and_kind_are_not_compared():
    live = as_live(DESIRED)
    live["apiVersion"] = "apps/v1beta2"  # a watch may deliver another served version of the same object
    assert not drifted(DESIRED, live)


@pytest.mark.parametrize("case, change", [
    ("label removed", lambda live: live["metadata"]["labels"].pop("app")),
    ("label changed", lambda live: live["metadata"]["labels"].update(app="other")),
    ("all labels removed", lambda live: live["metadata"].pop("labels")),
    ("annotation removed", lambda live: live["metadata"]["annotations"].pop("kfctl.kubeflow.io/kfdef-instance")),
    ("replicas scaled", lambda live: live["spec"].update(replicas=5)),
    ("image changed", lambda live: live["spec"]["template"]["spec"]["containers"][0].update(image="web:2")),
    ("container added", lambda live: live["spec"]["template"]["spec"]["containers"].append({"name": "sidecar"})),
    ("port removed", lambda live: live["spec"]["template"]["spec"]["containers"][0].pop("ports")),
    ("spec removed", lambda live: live.pop("spec")),
])
def test_lost_desired_values_are_drift(case, change):
    live = as_live(DESIRED)
    change(live)
    assert drifted(DESIRED, live), case


def test_extra_labels_and_annotations_by_others_are_not_drift():
    live = as_live(DESIRED)
    live["metadata"]["labels"]["team"] = "ml"
    live["metadata"]["annotations"]["note"] = "hand-edited"
    assert not drifted(DESIRED, live)


def test_top_level_fields_other_than_spec_are_compared():
    desired = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}}
    assert not drifted(desired, {**desired, "metadata": {"name": "c", "uid": "u"}})
    assert drifted(desired, {**desired, "data": {"a": "2"}})
    assert drifted(desired, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})


def test_drifted_does_not_mutate():
    desired, live = copy.deepcopy(DESIRED), as_live(DESIRED)
    live_before = copy.deepcopy(live)
    drifted(desired, live)
    assert desired == DESIRED and live == live_before


# --------------------------------------------------------------------------------------------------------------------
# comparable


def test_comparable_strips_what_changes_on_every_write():
    live = as_live(DESIRED)
    result = comparable(live)
    assert "status" not in result
    assert not {"managedFields", "resourceVersion", "generation"} & set(result["metadata"])
    assert result["metadata"]["uid"] == "u-1" and result["metadata"]["labels"] == {"app": "web"}
    assert result["spec"] == live["spec"]
    assert "status" in live and "managedFields" in live["metadata"], "input must not be mutated"


def test_two_writes_that_change_only_bookkeeping_compare_equal():
    first = as_live(DESIRED)
    second = copy.deepcopy(first)
    second["metadata"].update(resourceVersion="43", generation=2, managedFields=[{"manager": "other"}])
    second["status"] = {"replicas": 0}
    assert comparable(first) == comparable(second)
    second["spec"]["replicas"] = 3
    assert comparable(first) != comparable(second)


def test_comparable_of_an_object_without_metadata():
    assert comparable({"kind": "X", "status": {}}) == {"kind": "X", "metadata": {}}


# --------------------------------------------------------------------------------------------------------------------
# what kube-apiserver 1.36 returned for v1.11.0's Deployments (each made the operator suspect drift after a restart)


def _with_container(**fields) -> dict:
    deployment = copy.deepcopy(DESIRED)
    deployment["spec"]["template"]["spec"]["containers"][0].update(fields)
    return deployment


@pytest.mark.parametrize("case, desired, live", [
    ("empty env value omitted", _with_container(env=[{"name": "A", "value": ""}]),
     _with_container(env=[{"name": "A"}])),
    ("zero probe delay omitted", _with_container(livenessProbe={"initialDelaySeconds": 0, "periodSeconds": 10}),
     _with_container(livenessProbe={"periodSeconds": 10})),
    ("false readOnly omitted", _with_container(volumeMounts=[{"name": "v", "mountPath": "/v", "readOnly": False}]),
     _with_container(volumeMounts=[{"name": "v", "mountPath": "/v"}])),
    ("milli-CPU in canonical form", _with_container(resources={"limits": {"cpu": "2000m", "memory": "1024Mi"}}),
     _with_container(resources={"limits": {"cpu": "2", "memory": "1Gi"}})),
    ("fractional CPU", _with_container(resources={"requests": {"cpu": "0.5"}}),
     _with_container(resources={"requests": {"cpu": "500m"}})),
])
def test_what_the_server_writes_differently_is_not_drift(case, desired, live):
    assert not drifted(desired, as_live(live)), case


@pytest.mark.parametrize("case, desired, live", [
    ("a non-zero value removed", _with_container(env=[{"name": "A", "value": "x"}]),
     _with_container(env=[{"name": "A"}])),
    ("a quantity changed", _with_container(resources={"limits": {"cpu": "2000m"}}),
     _with_container(resources={"limits": {"cpu": "1"}})),
    # Only resource quantities are compared by value: elsewhere "2000m" and "2" are different strings.
    ("an env value that looks like a quantity", _with_container(env=[{"name": "A", "value": "2000m"}]),
     _with_container(env=[{"name": "A", "value": "2"}])),
])
def test_real_changes_next_to_those_are_still_drift(case, desired, live):
    assert drifted(desired, as_live(live)), case
