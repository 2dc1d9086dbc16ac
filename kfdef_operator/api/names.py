"""Every name this operator puts on the wire, in one place.

Compatibility names come from kfctl (the KfDef API, its finalizer and its
instance annotation): existing KfDefs and stacks carry them. Names of our own
live under the API group ``kfdef.apps.kubeflow.org``.
"""

from __future__ import annotations

# -- the KfDef API ----------------------------------------------------------------------------------
GROUP = "kfdef.apps.kubeflow.org"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
SUPPORTED_API_VERSIONS = (API_VERSION, f"{GROUP}/v1beta1")
KIND = "KfDef"
PLURAL = "kfdefs"
CRD_NAME = f"{PLURAL}.{GROUP}"

#: kfctl's finalizer: KfDefs created by kfctl's operator already carry it.
FINALIZER = "kfdef-finalizer.kfdef.apps.kubeflow.org"

# -- stamps on applied objects ----------------------------------------------------------------------
#: kfctl v1.2's owner record, ``<kfdef-name>.<kfdef-namespace>`` (split on the last dot).
INSTANCE_ANNOTATION = "kfctl.kubeflow.io/kfdef-instance"
#: ``<namespace>.<name>`` of the owning KfDef (hashed past 63 characters), for server-side label selectors.
INSTANCE_LABEL = f"{GROUP}/instance"
#: Digest of the object as last applied: an unchanged object is not written again.
DIGEST_ANNOTATION = f"{GROUP}/digest"
#: The object existed before the KfDef: released, never deleted.
ADOPTED_ANNOTATION = f"{GROUP}/adopted"
#: The time the operator changed an object only to make a controller act on it again (``Owner.touch_patch``).
TOUCHED_ANNOTATION = f"{GROUP}/touched-at"
FIELD_MANAGER = "kfdef-operator"

# -- annotations people set -------------------------------------------------------------------------
#: On an applied object: ``disabled`` takes it out of the operator's hands (no apply, heal or prune).
RECONCILE_ANNOTATION = f"{GROUP}/reconcile"
RECONCILE_DISABLED = "disabled"
#: On an applied object, in the manifest: whether an immutable-field change may delete and re-create it.
RECREATE_ANNOTATION = f"{GROUP}/recreate"
#: On a KfDef: ``auto`` (default) or ``off``, the policy for API versions the cluster no longer serves.
API_UPGRADE_ANNOTATION = f"{GROUP}/api-upgrade"
#: On a KfDef: ``"true"`` stops every write for its stack (Flux's ``spec.suspend``).
SUSPEND_ANNOTATION = f"{GROUP}/suspend"
#: On a KfDef: any new value asks for a reconcile now (Flux's ``reconcile.fluxcd.io/requestedAt``).
REQUESTED_AT_ANNOTATION = f"{GROUP}/requestedAt"
#: Label on a KfDef: the shard (operator instance) that serves it; unlabelled KfDefs go to the default shard.
SHARD_LABEL = f"{GROUP}/shard"

# -- who we are -------------------------------------------------------------------------------------
COMPONENT = "kfdef-operator"
#: The ``coordination.k8s.io`` Lease replicas elect their leader on (suffixed per shard).
LEASE_NAME = "kfdef-operator-leader-election"


def kfdef_path(namespace: str, name: str) -> str:
    """The API path of one KfDef."""
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}"
