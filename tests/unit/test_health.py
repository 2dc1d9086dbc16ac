"""Readiness of live objects (kfdef_operator.ssa.health)."""

from __future__ import annotations

import pytest

from kfdef_operator.ssa.discovery import UnknownKind, provider_of
from kfdef_operator.ssa.health import CRD_CLEANUP_FAILED, READY, State, assess, has_health


def cond(type_: str, status: str = "True", reason: str = "", message: str = "") -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": message}


def live(api_version: str, kind: str, *, generation: int = 1, spec: dict | None = None, status: dict | None = None,
         **meta) -> dict:
    obj = {"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "generation": generation, **meta},
           "spec": spec or {}}
    if status is not None:
        obj["status"] = status
    return obj


def deployment(replicas: int | None = 2, *, generation: int = 1, **status) -> dict:
    spec = {} if replicas is None else {"replicas": replicas}
    return live("apps/v1", "Deployment", generation=generation, spec=spec, status=status)


AVAILABLE = [cond("Available"), cond("Progressing", reason="NewReplicaSetAvailable")]


@pytest.mark.parametrize("case, obj, state, message", [
    ("available", deployment(2, observedGeneration=1, updatedReplicas=2, availableReplicas=2, conditions=AVAILABLE),
     State.READY, ""),
    ("replicas defaults to 1", deployment(None, observedGeneration=1, updatedReplicas=1, conditions=AVAILABLE),
     State.READY, ""),
    ("scaled to zero", deployment(0, observedGeneration=1, conditions=AVAILABLE), State.READY, ""),
    ("no status yet", deployment(2), State.PROGRESSING, "not observed"),
    ("old observedGeneration", deployment(2, generation=3, observedGeneration=2, updatedReplicas=2,
                                          conditions=AVAILABLE), State.PROGRESSING, "not observed"),
    ("rolling out", deployment(3, observedGeneration=1, updatedReplicas=1, conditions=AVAILABLE),
     State.PROGRESSING, "1/3 replicas updated"),
    ("updated, not available", deployment(2, observedGeneration=1, updatedReplicas=2, availableReplicas=1,
                                          conditions=[cond("Available", "False")]),
     State.PROGRESSING, "1/2 replicas available"),
    ("deadline exceeded", deployment(2, observedGeneration=1, updatedReplicas=0, conditions=[
        cond("Progressing", "False", "ProgressDeadlineExceeded", "ReplicaSet web-1 has timed out")]),
     State.FAILED, "ReplicaSet web-1 has timed out"),
    ("deadline exceeded wins over an old generation", deployment(2, generation=5, observedGeneration=4, conditions=[
        cond("Progressing", "False", "ProgressDeadlineExceeded")]), State.FAILED, "rollout stuck"),
])
def test_deployment(case, obj, state, message):
    health = assess(obj)
    assert health.state is state, case
    assert message in health.message
    assert health.ready is (state is State.READY)


@pytest.mark.parametrize("kind", ["StatefulSet", "ReplicaSet"])
@pytest.mark.parametrize("case, spec, generation, status, state, message", [
    ("all ready", {"replicas": 3}, 1, {"observedGeneration": 1, "readyReplicas": 3}, State.READY, ""),
    ("some ready", {"replicas": 3}, 1, {"observedGeneration": 1, "readyReplicas": 1}, State.PROGRESSING, "1/3"),
    ("replicas defaults to 1", {}, 1, {"observedGeneration": 1, "readyReplicas": 1}, State.READY, ""),
    ("none ready, no status", {"replicas": 1}, 1, None, State.PROGRESSING, "not observed"),
    ("old observedGeneration", {"replicas": 1}, 2, {"observedGeneration": 1, "readyReplicas": 1},
     State.PROGRESSING, "not observed"),
])
def test_statefulset_and_replicaset(kind, case, spec, generation, status, state, message):
    health = assess(live("apps/v1", kind, generation=generation, spec=spec, status=status))
    assert health.state is state, case
    assert message in health.message


@pytest.mark.parametrize("case, generation, status, state", [
    ("all scheduled pods ready", 1, {"observedGeneration": 1, "desiredNumberScheduled": 2, "numberReady": 2},
     State.READY),
    ("nothing to schedule", 1, {"observedGeneration": 1, "desiredNumberScheduled": 0, "numberReady": 0}, State.READY),
    ("pods not ready", 1, {"observedGeneration": 1, "desiredNumberScheduled": 3, "numberReady": 2}, State.PROGRESSING),
    ("old observedGeneration", 2, {"observedGeneration": 1, "desiredNumberScheduled": 1, "numberReady": 1},
     State.PROGRESSING),
])
def test_daemonset(case, generation, status, state):
    assert assess(live("apps/v1", "DaemonSet", generation=generation, status=status)).state is state, case


def test_daemonset_not_ready_message_counts_pods():
    health = assess(live("apps/v1", "DaemonSet", status={"observedGeneration": 1, "desiredNumberScheduled": 3,
                                                         "numberReady": 2}))
    assert health.message == "2/3 pods ready"


@pytest.mark.parametrize("case, conditions, state, message", [
    ("complete", [cond("Complete")], State.READY, ""),
    ("failed", [cond("Failed", message="BackoffLimitExceeded")], State.FAILED, "BackoffLimitExceeded"),
    ("failed wins over complete", [cond("Complete"), cond("Failed", message="boom")], State.FAILED, "boom"),
    ("running", [], State.PROGRESSING, "not complete"),
    ("conditions false", [cond("Complete", "False"), cond("Failed", "False")], State.PROGRESSING, "not complete"),
])
def test_job(case, conditions, state, message):
    health = assess(live("batch/v1", "Job", status={"conditions": conditions}))
    assert health.state is state, case
    assert message in health.message


@pytest.mark.parametrize("case, conditions, state, message", [
    ("established", [cond("NamesAccepted"), cond("Established")], State.READY, ""),
    ("not yet", [cond("NamesAccepted")], State.PROGRESSING, "not Established"),
    ("no status", None, State.PROGRESSING, "not Established"),
    ("established false", [cond("Established", "False")], State.PROGRESSING, "not Established"),
    ("names not accepted", [cond("NamesAccepted", "False", "MultipleNamesConflict", '"things" is already in use'),
                            cond("Established", "False")], State.FAILED, "already in use"),
    ("names not accepted even if established", [cond("NamesAccepted", "False", message="clash"),
                                                cond("Established")], State.FAILED, "clash"),
])
def test_crd(case, conditions, state, message):
    status = None if conditions is None else {"conditions": conditions}
    health = assess(live("apiextensions.k8s.io/v1", "CustomResourceDefinition", status=status))
    assert health.state is state, case
    assert message in health.message


@pytest.mark.parametrize("case, conditions, state, message", [
    ("available", [cond("Available")], State.READY, ""),
    ("unavailable", [cond("Available", "False", "MissingEndpoints", "endpoints for service/x have no addresses")],
     State.PROGRESSING, "no addresses"),
    ("no status", [], State.PROGRESSING, "no status yet"),
])
def test_apiservice(case, conditions, state, message):
    health = assess(live("apiregistration.k8s.io/v1", "APIService", status={"conditions": conditions}))
    assert health.state is state, case
    assert message in health.message


@pytest.mark.parametrize("obj", [
    deployment(2, observedGeneration=1, updatedReplicas=2, availableReplicas=2, conditions=AVAILABLE),
    live("v1", "ConfigMap"),
    live("batch/v1", "Job", status={"conditions": [cond("Complete")]}),
])
def test_objects_being_deleted_are_progressing(obj):
    obj["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    health = assess(obj)
    assert health.state is State.PROGRESSING
    assert "deleted" in health.message


@pytest.mark.parametrize("terminating, reason", [
    (cond("Terminating", reason="InstanceDeletionFailed", message="could not list instances: storage is "
                                                                   "(re)initializing"), CRD_CLEANUP_FAILED),
    (cond("Terminating", reason="InstanceDeletionInProgress"), ""),
    (cond("Terminating", "False", reason="InstanceDeletionCompleted"), ""),
    (cond("Terminating", "False", reason="InstanceDeletionFailed"), ""),
    (None, ""),
])
def test_a_crd_whose_cleanup_failed_says_so_while_being_deleted(terminating, reason):
    crd = live("apiextensions.k8s.io/v1", "CustomResourceDefinition", deletionTimestamp="2024-01-01T00:00:00Z",
               status={"conditions": [cond("Established"), *([terminating] if terminating else [])]})
    health = assess(crd)
    assert (health.state, health.reason) == (State.PROGRESSING, reason)
    assert "deleted" in health.message
    if reason:
        assert "storage is (re)initializing" in health.message


@pytest.mark.parametrize("api_version, kind", [
    ("v1", "ConfigMap"), ("v1", "Service"), ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("kubeflow.org/v1", "Notebook"), ("v1", "Namespace"),
    # Same kind name in another group: no assessor applies.
    ("example.com/v1", "Deployment"), ("example.com/v1", "Job"),
])
def test_kinds_without_health_are_ready_once_they_exist(api_version, kind):
    assert assess(live(api_version, kind, status={"conditions": [cond("Ready", "False")]})) == READY
    group = api_version.rpartition("/")[0]
    assert not has_health(group, kind)


@pytest.mark.parametrize("group, kind", [
    ("apps", "Deployment"), ("apps", "StatefulSet"), ("apps", "ReplicaSet"), ("apps", "DaemonSet"), ("batch", "Job"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"), ("apiregistration.k8s.io", "APIService"),
])
def test_has_health(group, kind):
    assert has_health(group, kind)


def test_assess_tolerates_missing_metadata_and_status():
    assert assess({"apiVersion": "v1", "kind": "ConfigMap"}) == READY
    assert assess({"apiVersion": "batch/v1", "kind": "Job"}).state is State.PROGRESSING


@pytest.mark.parametrize(("status", "state"), [
    ({}, State.PROGRESSING), ({"state": "UpgradePending"}, State.PROGRESSING),
    ({"state": "AtLatestKnown"}, State.READY),
    ({"conditions": [{"type": "ResolutionFailed", "status": "True", "message": "no catalog"}]}, State.FAILED)])
def test_an_olm_subscription_is_ready_at_latest_known(status, state):
    obj = {"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription", "metadata": {"name": "s"},
           "status": status}
    assert assess(obj).state is state


@pytest.mark.parametrize(("phase", "state"), [
    (None, State.PROGRESSING), ("Installing", State.PROGRESSING), ("Succeeded", State.READY), ("Failed", State.FAILED)])
def test_an_olm_cluster_service_version_is_ready_when_succeeded(phase, state):
    obj = {"apiVersion": "operators.coreos.com/v1alpha1", "kind": "ClusterServiceVersion", "metadata": {"name": "c"},
           "status": {"phase": phase} if phase else {}}
    assert assess(obj).state is state


def test_a_kind_of_a_distribution_group_names_what_provides_it():
    assert "provided by OpenShift itself" in str(UnknownKind("route.openshift.io/v1", "Route"))
    assert "Operator Lifecycle Manager" in str(UnknownKind("operators.coreos.com/v1", "OperatorGroup"))
    assert "is its CRD installed?" in str(UnknownKind("example.com/v1", "Thing"))
    assert provider_of("notopenshift.io") is None
