"""Readiness of live objects (pure).

``assess(obj)`` says whether an applied object is doing its job: Deployments
Available at the current generation, StatefulSets and DaemonSets fully
ready, Jobs complete, CRDs Established, APIServices Available. Every other
kind is ready once it exists.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from kfdef_operator.api.types import JSON


class State(enum.Enum):
    READY = "ready"
    PROGRESSING = "progressing"
    FAILED = "failed"


#: kube-apiserver's reason on a CRD being deleted whose objects its cleanup finalizer could not delete.
CRD_CLEANUP_FAILED = "InstanceDeletionFailed"


@dataclass(frozen=True)
class Health:
    state: State
    message: str = ""
    reason: str = ""  # the API server's own reason, where a decision depends on it (CRD_CLEANUP_FAILED)

    @property
    def ready(self) -> bool:
        return self.state is State.READY


READY = Health(State.READY)


def _condition(obj: JSON, type_: str) -> JSON | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cast(JSON, cond)
    return None


def _is_true(obj: JSON, type_: str) -> bool:
    cond = _condition(obj, type_)
    return bool(cond and cond.get("status") == "True")


def _generation_observed(obj: JSON) -> bool:
    status = obj.get("status") or {}
    return bool(status.get("observedGeneration", 0) >= (obj.get("metadata") or {}).get("generation", 0))


def _deployment(obj: JSON) -> Health:
    progressing = _condition(obj, "Progressing")
    if progressing and progressing.get("reason") == "ProgressDeadlineExceeded":
        return Health(State.FAILED, f"rollout stuck: {progressing.get('message', '')}")
    if not _generation_observed(obj):
        return Health(State.PROGRESSING, "rollout not observed yet")
    status = obj.get("status") or {}
    want = (obj.get("spec") or {}).get("replicas", 1)
    refused = _condition(obj, "ReplicaFailure")
    if refused and refused.get("status") == "True" and status.get("availableReplicas", 0) < want:
        # The ReplicaSet cannot create pods (quota, pod security, an admission webhook): say why.
        return Health(State.PROGRESSING, f"pods not created: {refused.get('message', refused.get('reason', ''))}")
    if status.get("updatedReplicas", 0) < want:
        return Health(State.PROGRESSING, f"{status.get('updatedReplicas', 0)}/{want} replicas updated")
    if status.get("replicas", 0) > status.get("updatedReplicas", 0):
        return Health(State.PROGRESSING, f"{status['replicas'] - status['updatedReplicas']} old replicas terminating")
    if not _is_true(obj, "Available"):
        return Health(State.PROGRESSING, f"{status.get('availableReplicas', 0)}/{want} replicas available")
    return READY


def _counted(obj: JSON, ready: int, want: int, noun: str) -> Health:
    if not _generation_observed(obj):
        return Health(State.PROGRESSING, "rollout not observed yet")
    if ready < want:
        return Health(State.PROGRESSING, f"{ready}/{want} {noun} ready")
    return READY


def _replicas_ready(obj: JSON) -> Health:
    status = obj.get("status") or {}
    return _counted(obj, status.get("readyReplicas", 0), (obj.get("spec") or {}).get("replicas", 1), "replicas")


def _daemonset(obj: JSON) -> Health:
    status = obj.get("status") or {}
    return _counted(obj, status.get("numberReady", 0), status.get("desiredNumberScheduled", 0), "pods")


def _job(obj: JSON) -> Health:
    if _is_true(obj, "Failed"):
        return Health(State.FAILED, (_condition(obj, "Failed") or {}).get("message", "job failed"))
    if _is_true(obj, "Complete"):
        return READY
    return Health(State.PROGRESSING, "job not complete")


def _crd(obj: JSON) -> Health:
    names = _condition(obj, "NamesAccepted")
    if names and names.get("status") == "False":
        return Health(State.FAILED, f"names not accepted: {names.get('message', '')}")
    if _is_true(obj, "Established"):
        return READY
    return Health(State.PROGRESSING, "not Established yet")


def _apiservice(obj: JSON) -> Health:
    if _is_true(obj, "Available"):
        return READY
    cond = _condition(obj, "Available") or {}
    return Health(State.PROGRESSING, f"not Available: {cond.get('message', 'no status yet')}")


def _subscription(obj: JSON) -> Health:
    """An OLM Subscription is ready once its operator is installed at the latest version its channel knows."""
    state = (obj.get("status") or {}).get("state") or "no state yet"
    if state == "AtLatestKnown":
        return READY
    failed = next((c for c in (obj.get("status") or {}).get("conditions") or []
                   if c.get("type") in ("ResolutionFailed", "CatalogSourcesUnhealthy") and c.get("status") == "True"),
                  None)
    if failed is not None:
        return Health(State.FAILED, f"{failed.get('type')}: {failed.get('message', '')}")
    return Health(State.PROGRESSING, f"state {state} (ready at AtLatestKnown)")


def _cluster_service_version(obj: JSON) -> Health:
    """An OLM ClusterServiceVersion is ready when its install Succeeded."""
    status = obj.get("status") or {}
    phase = status.get("phase") or "no phase yet"
    if phase == "Succeeded":
        return READY
    if phase == "Failed":
        return Health(State.FAILED, f"install failed: {status.get('reason', '')} {status.get('message', '')}".strip())
    return Health(State.PROGRESSING, f"phase {phase} (ready at Succeeded)")


_ASSESSORS: dict[tuple[str, str], Callable[[JSON], Health]] = {
    ("apps", "Deployment"): _deployment,
    ("apps", "StatefulSet"): _replicas_ready,
    ("apps", "ReplicaSet"): _replicas_ready,
    ("apps", "DaemonSet"): _daemonset,
    ("batch", "Job"): _job,
    ("apiextensions.k8s.io", "CustomResourceDefinition"): _crd,
    ("apiregistration.k8s.io", "APIService"): _apiservice,
    ("operators.coreos.com", "Subscription"): _subscription,
    ("operators.coreos.com", "ClusterServiceVersion"): _cluster_service_version,
}


def has_health(group: str, kind: str) -> bool:
    """Whether readiness of this kind depends on its status (else: ready once it exists)."""
    return (group, kind) in _ASSESSORS


def _being_deleted(obj: JSON, group: str) -> Health:
    if (group, obj.get("kind")) == ("apiextensions.k8s.io", "CustomResourceDefinition"):
        terminating = _condition(obj, "Terminating") or {}
        if terminating.get("status") == "True" and terminating.get("reason") == CRD_CLEANUP_FAILED:
            return Health(State.PROGRESSING, f"being deleted; kube-apiserver could not delete its objects: "
                                             f"{terminating.get('message', '')}", CRD_CLEANUP_FAILED)
    return Health(State.PROGRESSING, "being deleted")


def assess(obj: JSON) -> Health:
    """Readiness of one live object."""
    group = obj.get("apiVersion", "").rpartition("/")[0]
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return _being_deleted(obj, group)
    assessor = _ASSESSORS.get((group, obj.get("kind", "")))
    return assessor(obj) if assessor else READY
