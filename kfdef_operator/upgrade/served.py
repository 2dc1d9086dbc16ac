"""Which ``(apiVersion, kind)`` pairs a Kubernetes minor serves, from a static table (pure).

For offline builds (e.g. ``kfdef-operator build --target-version 1.36``); a live server answers through discovery.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Set

ServedPredicate = Callable[[str, str], bool]
#: What the caller knows the target server serves: a predicate on ``(apiVersion, kind)`` or a set of such pairs.
ServedApis = ServedPredicate | Set[tuple[str, str]]

#: Kinds that share their versions (the successor table names them too).
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
_APPS_V1BETA1 = ("Deployment", "StatefulSet", "ControllerRevision")
_APPS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ControllerRevision")
_HPA = ("HorizontalPodAutoscaler",)
_FLOW_CONTROL = ("FlowSchema", "PriorityLevelConfiguration")
_NEVER = None  # alpha versions: never served by default

# (apiVersion, kinds, first minor serving them by default or _NEVER, first minor no longer serving them or None)
_SERVING_TABLE: tuple[tuple[str, tuple[str, ...], int | None, int | None], ...] = (
    ("apiextensions.k8s.io/v1beta1", ("CustomResourceDefinition",), 7, 22),
    ("apiextensions.k8s.io/v1", ("CustomResourceDefinition",), 16, None),
    ("admissionregistration.k8s.io/v1beta1", WEBHOOK_KINDS, 9, 22),
    ("admissionregistration.k8s.io/v1", WEBHOOK_KINDS, 16, None),
    ("apiregistration.k8s.io/v1beta1", ("APIService",), 7, 22),
    ("apiregistration.k8s.io/v1", ("APIService",), 10, None),
    ("certificates.k8s.io/v1beta1", ("CertificateSigningRequest",), 4, 22),
    ("certificates.k8s.io/v1", ("CertificateSigningRequest",), 19, None),
    ("coordination.k8s.io/v1beta1", ("Lease",), 12, 22),
    ("coordination.k8s.io/v1", ("Lease",), 14, None),
    ("extensions/v1beta1", ("Deployment", "DaemonSet", "ReplicaSet", "NetworkPolicy", "PodSecurityPolicy"), 1, 16),
    ("extensions/v1beta1", ("Ingress",), 1, 22),
    ("networking.k8s.io/v1beta1", ("Ingress",), 14, 22),
    ("networking.k8s.io/v1beta1", ("IngressClass",), 18, 22),
    ("networking.k8s.io/v1", ("NetworkPolicy",), 7, None),
    ("networking.k8s.io/v1", ("Ingress", "IngressClass"), 19, None),
    ("rbac.authorization.k8s.io/v1alpha1", RBAC_KINDS, _NEVER, 22),
    ("rbac.authorization.k8s.io/v1beta1", RBAC_KINDS, 6, 22),
    ("rbac.authorization.k8s.io/v1", RBAC_KINDS, 8, None),
    ("scheduling.k8s.io/v1alpha1", ("PriorityClass",), _NEVER, 22),
    ("scheduling.k8s.io/v1beta1", ("PriorityClass",), 11, 22),
    ("scheduling.k8s.io/v1", ("PriorityClass",), 14, None),
    ("storage.k8s.io/v1beta1", ("StorageClass",), 4, 22),
    ("storage.k8s.io/v1beta1", ("VolumeAttachment",), 10, 22),
    ("storage.k8s.io/v1beta1", ("CSIDriver", "CSINode"), 14, 22),
    ("storage.k8s.io/v1beta1", ("CSIStorageCapacity",), 21, 27),
    ("storage.k8s.io/v1", ("StorageClass",), 6, None),
    ("storage.k8s.io/v1", ("VolumeAttachment",), 13, None),
    ("storage.k8s.io/v1", ("CSINode",), 17, None),
    ("storage.k8s.io/v1", ("CSIDriver",), 18, None),
    ("storage.k8s.io/v1", ("CSIStorageCapacity",), 24, None),
    ("apps/v1beta1", _APPS_V1BETA1, 6, 16),
    ("apps/v1beta2", _APPS, 8, 16),
    ("apps/v1", _APPS, 9, None),
    ("batch/v2alpha1", ("CronJob",), _NEVER, 21),
    ("batch/v1beta1", ("CronJob",), 8, 25),
    ("batch/v1", ("CronJob",), 21, None),
    ("discovery.k8s.io/v1beta1", ("EndpointSlice",), 17, 25),
    ("discovery.k8s.io/v1", ("EndpointSlice",), 21, None),
    ("events.k8s.io/v1beta1", ("Event",), 8, 25),
    ("events.k8s.io/v1", ("Event",), 19, None),
    ("autoscaling/v2beta1", _HPA, 8, 25),
    ("autoscaling/v2beta2", _HPA, 12, 26),
    ("autoscaling/v2", _HPA, 23, None),
    ("policy/v1beta1", ("PodDisruptionBudget",), 5, 25),
    ("policy/v1beta1", ("PodSecurityPolicy",), 10, 25),
    ("policy/v1", ("PodDisruptionBudget",), 21, None),
    ("node.k8s.io/v1alpha1", ("RuntimeClass",), _NEVER, 22),
    ("node.k8s.io/v1beta1", ("RuntimeClass",), 14, 25),
    ("node.k8s.io/v1", ("RuntimeClass",), 20, None),
    ("flowcontrol.apiserver.k8s.io/v1beta1", _FLOW_CONTROL, 20, 26),
    ("flowcontrol.apiserver.k8s.io/v1beta2", _FLOW_CONTROL, 23, 29),
    ("flowcontrol.apiserver.k8s.io/v1beta3", _FLOW_CONTROL, 26, 32),
    ("flowcontrol.apiserver.k8s.io/v1", _FLOW_CONTROL, 29, None),
)

_RELEASE = re.compile(r"^v?1\.(\d+)(?:\.\d+)?(?:[-+].*)?$")


def _minor_number(release: str) -> int:
    """36 for ``1.36``, ``v1.36`` or ``1.36.2``; ValueError for anything else."""
    match = _RELEASE.fullmatch(release.strip())
    if not match:
        raise ValueError(f"not a Kubernetes 1.x release: {release!r} (expected e.g. 1.36)")
    return int(match.group(1))


def _serves(first: int | None, removed: int | None, minor: int) -> bool:
    return first is not None and first <= minor and (removed is None or minor < removed)


def served_resources_for_release(minor: str) -> frozenset[tuple[str, str]]:
    """The ``(apiVersion, kind)`` pairs of the table (the kinds this module converts) that ``minor`` serves."""
    number = _minor_number(minor)
    return frozenset(
        (api_version, kind)
        for api_version, kinds, first, removed in _SERVING_TABLE
        if _serves(first, removed, number)
        for kind in kinds
    )


def served_versions_for_release(minor: str) -> frozenset[str]:
    """The ``group/version`` strings (core is ``v1``) serving at least one of the table's kinds in ``minor``."""
    return frozenset({"v1"} | {api_version for api_version, _ in served_resources_for_release(minor)})


_TABLE_PAIRS = frozenset((api_version, kind) for api_version, kinds, *_ in _SERVING_TABLE for kind in kinds)


def served_for_release(minor: str) -> ServedPredicate:
    """A served-predicate for ``minor`` from the static table; pairs the table does not know are assumed served."""
    served = served_resources_for_release(minor)
    return lambda api_version, kind: (api_version, kind) in served or (api_version, kind) not in _TABLE_PAIRS


def as_predicate(served: ServedApis) -> ServedPredicate:
    """``served`` as a predicate on ``(apiVersion, kind)``."""
    if callable(served):
        return served
    pairs = frozenset(served)
    return lambda api_version, kind: (api_version, kind) in pairs
