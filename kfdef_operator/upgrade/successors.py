"""Which served version succeeds each removed one, by the conversion into its shape, and which have none (pure).

Refused: PodSecurityPolicy (removed without successor), CertificateSigningRequest v1beta1 (v1 requires a
``signerName`` the old object cannot supply) and Events. The kinds not listed with a conversion keep their shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kfdef_operator.upgrade import crd, kinds, webhooks
from kfdef_operator.upgrade.conversion import Conversion, same_shape
from kfdef_operator.upgrade.served import RBAC_KINDS, WEBHOOK_KINDS


@dataclass(frozen=True)
class Successor:
    """Target apiVersions, most preferred first, and the conversion into their (common) shape."""

    targets: tuple[str, ...]
    convert: Conversion


_APPS_V1 = Successor(("apps/v1",), kinds.convert_workload)
_INGRESS_V1 = Successor(("networking.k8s.io/v1",), kinds.convert_ingress)
_FLOW_CONTROL_V1 = ("flowcontrol.apiserver.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1beta3")


def _same_shape_as(*targets: str) -> Successor:
    return Successor(targets, same_shape)


# (old group, kind) -> successor. Old versions of a group share one entry; served versions never reach it.
SUCCESSORS: Mapping[tuple[str, str], Successor] = {
    ("apiextensions.k8s.io", "CustomResourceDefinition"): Successor(("apiextensions.k8s.io/v1",), crd.convert_crd),
    **{("admissionregistration.k8s.io", kind): Successor(("admissionregistration.k8s.io/v1",),
                                                         webhooks.convert_webhook_configuration)
       for kind in WEBHOOK_KINDS},
    **{("extensions", kind): _APPS_V1 for kind in ("Deployment", "DaemonSet", "ReplicaSet")},
    **{("apps", kind): _APPS_V1 for kind in ("Deployment", "DaemonSet", "ReplicaSet", "StatefulSet")},
    ("apps", "ControllerRevision"): _same_shape_as("apps/v1"),
    ("extensions", "Ingress"): _INGRESS_V1,
    ("networking.k8s.io", "Ingress"): _INGRESS_V1,
    ("networking.k8s.io", "IngressClass"): _same_shape_as("networking.k8s.io/v1"),
    ("extensions", "NetworkPolicy"): _same_shape_as("networking.k8s.io/v1"),
    **{("rbac.authorization.k8s.io", kind): Successor(("rbac.authorization.k8s.io/v1",), kinds.convert_rbac)
       for kind in RBAC_KINDS},
    ("policy", "PodDisruptionBudget"): Successor(("policy/v1",), kinds.convert_pod_disruption_budget),
    ("scheduling.k8s.io", "PriorityClass"): _same_shape_as("scheduling.k8s.io/v1"),
    ("batch", "CronJob"): _same_shape_as("batch/v1"),
    **{("storage.k8s.io", kind): _same_shape_as("storage.k8s.io/v1")
       for kind in ("StorageClass", "VolumeAttachment", "CSIDriver", "CSINode", "CSIStorageCapacity")},
    ("apiregistration.k8s.io", "APIService"): _same_shape_as("apiregistration.k8s.io/v1"),
    ("coordination.k8s.io", "Lease"): _same_shape_as("coordination.k8s.io/v1"),
    ("node.k8s.io", "RuntimeClass"): Successor(("node.k8s.io/v1",), kinds.convert_runtime_class),
    ("autoscaling", "HorizontalPodAutoscaler"): Successor(("autoscaling/v2", "autoscaling/v2beta2"), kinds.convert_hpa),
    ("discovery.k8s.io", "EndpointSlice"): Successor(("discovery.k8s.io/v1",), kinds.convert_endpoint_slice),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"): _same_shape_as(*_FLOW_CONTROL_V1),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"): Successor(_FLOW_CONTROL_V1,
                                                                              kinds.convert_priority_level),
}

_NO_POD_SECURITY_POLICY = ("PodSecurityPolicy was removed in 1.25 without a successor "
                           "(use Pod Security Admission namespace labels)")
# (old group, kind) -> why there is no conversion.
REFUSED: Mapping[tuple[str, str], str] = {
    ("extensions", "PodSecurityPolicy"): _NO_POD_SECURITY_POLICY,
    ("policy", "PodSecurityPolicy"): _NO_POD_SECURITY_POLICY,
    ("certificates.k8s.io", "CertificateSigningRequest"): "certificates.k8s.io/v1 requires a signerName that a "
                                                          "v1beta1 request cannot supply; create a v1 request",
    ("events.k8s.io", "Event"): "Events are records written by controllers, not desired state",
}
