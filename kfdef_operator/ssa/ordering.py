"""Apply stages and teardown order (pure).

Install follows kfctl's InstallOrder, split into stages the way GitOps
engines do it, so that nothing is applied before what it needs exists:

1. ``prerequisites``: Namespaces, CRDs and cluster-wide classes/quotas. The
   apply engine applies CRDs beside stage 2's other objects and waits for
   every CRD to be Established before stage 2's custom resources.
2. ``resources``: everything else, including custom resources, in kind order.
3. ``admission``: webhook configurations, admission policies and APIServices
   last, so that a webhook whose backend is not up yet cannot reject the
   stack's own objects.

Teardown: admission first (so webhooks cannot block deletes), then custom
resources (while their controllers still run), then the CRDs whose remaining
custom resources carry finalizers (while those controllers still run too:
deleting a CRD deletes the custom resources nobody listed, such as those its
controller made, and the CRD stays until each is gone, finalizers included),
then everything else at once, Namespaces first, with the CRDs that need no
controller any more.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

PREREQUISITES = "prerequisites"
RESOURCES = "resources"
ADMISSION = "admission"
STAGES = (PREREQUISITES, RESOURCES, ADMISSION)

# kfctl InstallOrder (pkg/utils/kindsorter.go), extended with kinds it did not know.
_INSTALL_ORDER = [
    "Namespace", "ResourceQuota", "LimitRange", "PodSecurityPolicy", "PriorityClass", "StorageClass",
    "IngressClass", "RuntimeClass", "CustomResourceDefinition",
    "Secret", "ConfigMap", "PersistentVolume", "PersistentVolumeClaim", "ServiceAccount",
    "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "NetworkPolicy", "Service",
    "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment", "HorizontalPodAutoscaler",
    "StatefulSet", "Job", "CronJob", "PodDisruptionBudget", "Ingress",
]
_ADMISSION_ORDER = [
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "APIService",
]
#: The built-in kinds the operator orders by name; any other kind is a custom resource (or unknown) to it.
KNOWN_KINDS = frozenset(_INSTALL_ORDER + _ADMISSION_ORDER)
_PREREQUISITE_KINDS = frozenset(_INSTALL_ORDER[: _INSTALL_ORDER.index("CustomResourceDefinition") + 1])
_ADMISSION_KINDS = frozenset(_ADMISSION_ORDER)
_RANK = {kind: i for i, kind in enumerate(_INSTALL_ORDER)}
_UNKNOWN_RANK = len(_INSTALL_ORDER)  # custom resources and unlisted kinds: after every known kind
_ADMISSION_RANK = {kind: _UNKNOWN_RANK + 1 + i for i, kind in enumerate(_ADMISSION_ORDER)}


T = TypeVar("T")


def stage_of(kind: str) -> str:
    """The apply stage of a kind."""
    if kind in _PREREQUISITE_KINDS:
        return PREREQUISITES
    if kind in _ADMISSION_KINDS:
        return ADMISSION
    return RESOURCES


def install_rank(kind: str) -> int:
    """Sort key of a kind within an install (lower first)."""
    if kind in _ADMISSION_RANK:
        return _ADMISSION_RANK[kind]
    return _RANK.get(kind, _UNKNOWN_RANK)


_BUILTIN_GROUPS = frozenset({
    "", "apps", "batch", "policy", "autoscaling", "extensions", "networking.k8s.io", "rbac.authorization.k8s.io",
    "storage.k8s.io", "admissionregistration.k8s.io", "apiextensions.k8s.io", "apiregistration.k8s.io",
    "scheduling.k8s.io", "coordination.k8s.io", "node.k8s.io", "discovery.k8s.io", "events.k8s.io",
    "flowcontrol.apiserver.k8s.io", "certificates.k8s.io", "resource.k8s.io", "storagemigration.k8s.io",
    "internal.apiserver.k8s.io",
})


def is_custom_group(group: str) -> bool:
    """Whether objects of this API group are custom resources (served through a CRD or an APIService)."""
    return group not in _BUILTIN_GROUPS


def group_by_stage(items: Sequence[T], kind_of: Callable[[T], str]) -> dict[str, list[T]]:
    """Items split into stages, each sorted by install rank (stable for equal kinds)."""
    stages: dict[str, list[T]] = {stage: [] for stage in STAGES}
    for item in sorted(items, key=lambda i: install_rank(kind_of(i))):
        stages[stage_of(kind_of(item))].append(item)
    return stages


def awaits_controllers(custom_resources: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a CRD must be deleted while the stack's controllers still run, given the metadata of its live custom
    resources: one of them carries a finalizer.

    Deleting a CRD deletes its custom resources, and kube-apiserver drops the
    CRD only once each is gone. A finalizer goes only when whoever put it there
    removes it, which may be a controller the stack runs; which one cannot be
    told, so any finalizer counts (kube's own garbage-collector finalizers
    included: rare on a custom resource, and a dependent they wait for may need
    a controller). Custom resources without finalizers go at once, so a CRD
    with none of them, or none at all, needs nobody.
    """
    return any((item.get("metadata") or {}).get("finalizers") for item in custom_resources)


def teardown_waves(items: Iterable[T], kind_of: Callable[[T], str], *, is_custom: Callable[[T], bool],
                   crd_waits: Callable[[T], bool] = lambda _: True) -> list[list[T]]:
    """Items in the waves a teardown deletes them in; each wave is waited on before the next.

    ``is_custom(item)`` tells custom resources apart. They go right after
    admission objects. ``crd_waits(item)`` tells the CRDs that must go before
    the stack's controllers (:func:`awaits_controllers`; by default all): they
    go right after the custom resources, while the controllers that may hold
    finalizers on their custom resources still run: kube-apiserver deletes a
    CRD only once every object of its kind is gone, re-checking every 5 s.
    Custom resources are not deleted together with their CRDs: kube-apiserver
    would then wait for one that a finalizer holds in steps of 5 s. The rest
    goes last, in one wave: Namespaces first, since kube-controller-manager
    waits 5 s before it empties a deleted namespace (its
    ``namespaceDeletionGracePeriod``), a wait that should pass while the other
    deletes are sent; then the CRDs that need no controller, whose cleanup by
    kube-apiserver (a few workers for all CRDs) then overlaps with that wait;
    then the other kinds in reverse install order.
    """
    admission, custom, rest, namespaces = [], [], [], []
    crds: list[T] = []  # before the controllers go
    crds_last: list[T] = []  # with the Namespaces
    for item in items:
        kind = kind_of(item)
        if kind in _ADMISSION_KINDS:
            admission.append(item)
        elif kind == "CustomResourceDefinition":
            (crds if crd_waits(item) else crds_last).append(item)
        elif kind == "Namespace":
            namespaces.append(item)
        elif is_custom(item):
            custom.append(item)
        else:
            rest.append(item)
    rest.sort(key=lambda i: install_rank(kind_of(i)), reverse=True)
    return [wave for wave in (admission, custom, crds, namespaces + crds_last + rest) if wave]
