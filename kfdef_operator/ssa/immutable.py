"""Immutable-field refusals: how the API server words them, and what re-creating an object would cost (pure).

An apply that changes a field the API server allows to be set only once is refused with 422 Invalid. The answer
names the field in each of its ``details.causes``; the wording differs by kind. Recorded from kube-apiserver
v1.36 (tests/cluster/test_immutable_fields.py sends each change and checks that every answer is recognised):

=============================================  ===========================================================
change                                         a cause of the answer (its first line)
=============================================  ===========================================================
Deployment, ReplicaSet, DaemonSet selector      ``spec.selector``: ``Invalid value: {...}: field is immutable``
Job selector, template, completionMode          ``spec.template``: ``Invalid value: {...}: field is immutable``
StatefulSet serviceName, selector, claims,      ``spec``: ``Forbidden: updates to statefulset spec for fields
podManagementPolicy                             other than 'replicas', 'ordinals', 'template', ... are forbidden``
Service clusterIP (also to/from headless),      ``spec.clusterIPs[0]``: ``Invalid value: ["None"]: may not
loadBalancerClass                               change once set``
PersistentVolumeClaim spec                      ``spec``: ``Forbidden: spec is immutable after creation except
                                                resources.requests and volumeAttributesClassName ...``
PersistentVolume source                         ``spec.persistentvolumesource``: ``Forbidden: ... is immutable
                                                after creation``
ConfigMap, Secret with ``immutable: true``      ``data``: ``Forbidden: field is immutable when `immutable` is
                                                set``
Secret type                                     ``type``: ``Invalid value: "...": field is immutable``
RoleBinding, ClusterRoleBinding roleRef         ``roleRef``: ``Invalid value: {...}: cannot change roleRef``
StorageClass provisioner, parameters, ...       ``provisioner``: ``Invalid value: "...": field is immutable``
PriorityClass value                             ``value``: ``Forbidden: may not be changed in an update.``
VolumeAttributesClass driverName, parameters    ``parameters``: ``Forbidden: updates to parameters are
                                                forbidden.``
Pod spec (besides images, tolerations, ...)     ``spec``: ``Forbidden: pod updates may not change fields other
                                                than ...``
IngressClass, RuntimeClass, CSIDriver,          ``Invalid value: ...: field is immutable``
EndpointSlice, ResourceQuota scopes,
ServiceCIDR, ResourceClaim(Template)
=============================================  ===========================================================

A custom resource whose CRD declares a field immutable (a CEL rule ``self == oldSelf``) is refused in the rule's
own words; rules conventionally say "immutable" too. Changing a Service's type (to ExternalName and back) is no
longer refused: the API server clears what the new type does not use.

Only the server's own words are read: the detail after an ``Invalid value: <value>:`` (never the value, which is
the manifest's and may say anything) or after ``Forbidden:``. An answer is an immutable-field refusal only when
every cause is one: a re-create would be refused anyway for any other cause, after the old object was deleted.
"""

from __future__ import annotations

import re

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.client import KubeApiError

#: How the detail of a cause reads when the field may be set only once (see the table above).
_IMMUTABLE_DETAIL = re.compile(
    r"immutable|may not change|cannot change|may not be changed|updates to .+ are forbidden", re.IGNORECASE)

#: Kinds re-created, when an immutable field of theirs changes, without the owner's ``spec.force``: they hold no
#: data and their consumers recover (pods are rolled, bindings and classes are read again at their next use).
STATELESS_KINDS = frozenset({
    "Deployment", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Service", "RoleBinding", "ClusterRoleBinding",
    "PodDisruptionBudget", "Ingress", "NetworkPolicy", "StorageClass", "IngressClass", "RuntimeClass",
    "PriorityClass", "VolumeAttributesClass",
})


def _immutable_cause(message: str) -> bool:
    """Whether one cause's message (``Invalid value: <value>: <detail>`` or ``Forbidden: <detail>``, a diff may
    follow on further lines) says its field may not change."""
    line = message.splitlines()[0] if message else ""
    kind, _, rest = line.partition(": ")
    if kind == "Forbidden":
        detail = rest
    elif kind == "Invalid value":
        detail = rest.rpartition(": ")[2]  # after the value, which comes from the manifest
    else:
        return False
    return _IMMUTABLE_DETAIL.search(detail) is not None


def is_immutable_error(error: KubeApiError) -> bool:
    """Whether the API server refused a write only because it changes fields that may be set only once."""
    if error.status not in (409, 422):
        return False
    causes = [str(cause.get("message") or "") for cause in error.causes]
    if causes:
        return all(_immutable_cause(cause) for cause in causes)
    # An answer without causes: "[<Kind> "<name>" is invalid: ]<field>: <cause>".
    line = error.message.splitlines()[0] if error.message else ""
    return _immutable_cause((line.partition(" is invalid: ")[2] or line).partition(": ")[2])


def data_at_stake(kind: str, live: JSON | None) -> str | None:
    """What deleting and re-creating this live object would destroy, or None when nothing: why it is re-created
    only with the owner's ``spec.force``.

    A StatefulSet holds no data itself; its pods' claims do. With the default retention policy (``whenDeleted:
    Retain``) the claims have no owner reference: deleting the StatefulSet deletes its pods (they come back from
    the new one) and leaves the claims, which the new pods mount again, being named after the StatefulSet and its
    claim templates. With ``whenDeleted: Delete`` the claims carry an owner reference to it and the garbage collector
    deletes them with it.
    """
    if kind in STATELESS_KINDS:
        return None
    if kind == "StatefulSet" and live is not None:
        spec = live.get("spec") or {}
        policy = spec.get("persistentVolumeClaimRetentionPolicy") or {}
        if not spec.get("volumeClaimTemplates") or policy.get("whenDeleted", "Retain") != "Delete":
            return None
        return ("its pods' claims would be deleted with it (persistentVolumeClaimRetentionPolicy.whenDeleted: "
                "Delete)")
    return f"{kind} may hold data"
