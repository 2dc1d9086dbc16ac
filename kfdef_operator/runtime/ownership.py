"""Ownership stamps on applied objects, and who owns a live object (pure).

Every applied object carries:

- annotation ``kfctl.kubeflow.io/kfdef-instance: <name>.<namespace>`` (kfctl
  v1.2 compatible; split on the last dot because names may contain dots);
- label ``kfdef.apps.kubeflow.org/instance`` (a label value, so server-side
  selectors work: ``<namespace>.<name>``, or a hash when that exceeds 63
  characters);
- annotation ``kfdef.apps.kubeflow.org/digest``: a digest of the desired
  object, so an unchanged object is recognised without a request;
- an ownerReference to the KfDef only when Kubernetes garbage collection
  honours it: a namespaced object in the KfDef's own namespace that this
  KfDef created. Never across namespaces, never on cluster-scoped objects
  (the GC deletes the former and ignores the latter, kfctl#393).

Objects that existed before the KfDef applied them are *adopted*: they get
``kfdef.apps.kubeflow.org/adopted: "true"`` and are released, never deleted,
at prune and teardown.
"""

from __future__ import annotations

import base64
import copy
import enum
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

INSTANCE_ANNOTATION = "kfctl.kubeflow.io/kfdef-instance"
INSTANCE_LABEL = "kfdef.apps.kubeflow.org/instance"
DIGEST_ANNOTATION = "kfdef.apps.kubeflow.org/digest"
ADOPTED_ANNOTATION = "kfdef.apps.kubeflow.org/adopted"
RECONCILE_ANNOTATION = "kfdef.apps.kubeflow.org/reconcile"
RECONCILE_DISABLED = "disabled"
RECREATE_ANNOTATION = "kfdef.apps.kubeflow.org/recreate"
FIELD_MANAGER = "kfdef-operator"
KFDEF_API_VERSION = "kfdef.apps.kubeflow.org/v1"

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Owner:
    """The KfDef that applies a stack."""

    name: str
    namespace: str
    uid: str

    @property
    def instance(self) -> str:
        """The kfctl-compatible annotation value."""
        return f"{self.name}.{self.namespace}"

    @property
    def label(self) -> str:
        """The label value used by server-side selectors."""
        value = f"{self.namespace}.{self.name}"
        if _LABEL_VALUE.match(value):
            return value
        digest = hashlib.sha256(value.encode()).hexdigest()[:12]
        return f"{value[:40].strip('.-_')}-{digest}"

    @property
    def selector(self) -> str:
        return f"{INSTANCE_LABEL}={self.label}"


def parse_instance(value: str) -> tuple[str, str]:
    """The kfctl annotation value split into (name, namespace) on the last dot."""
    name, _, namespace = value.rpartition(".")
    return name, namespace


class Claim(enum.Enum):
    """Who holds a live object, from the point of view of one KfDef."""

    ABSENT = "absent"
    OURS = "ours"          # created by this KfDef
    ADOPTED = "adopted"    # existed before; applied by this KfDef, never deleted by it
    UNCLAIMED = "unclaimed"  # exists, no KfDef's stamp: adopt on apply
    FOREIGN = "foreign"    # another KfDef's: a conflict, left alone


def claim_of(meta: JSON | None, owner: Owner) -> Claim:
    """Classify a live object's metadata (None when absent)."""
    if meta is None:
        return Claim.ABSENT
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    instance = annotations.get(INSTANCE_ANNOTATION)
    label = labels.get(INSTANCE_LABEL)
    if instance is None and label is None:
        return Claim.UNCLAIMED
    if instance not in (None, owner.instance) or label not in (None, owner.label):
        return Claim.FOREIGN
    return Claim.ADOPTED if annotations.get(ADOPTED_ANNOTATION) == "true" else Claim.OURS


def normalize(obj: JSON) -> JSON:
    """A rendered object made fit for server-side apply (a copy).

    Drops ``status`` and server-populated metadata, and turns Secret
    ``stringData`` into ``data`` so that the live object compares equal.
    """
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.setdefault("metadata", {})
    for key in ("creationTimestamp", "resourceVersion", "uid", "generation", "managedFields", "selfLink"):
        meta.pop(key, None)
    if out.get("kind") == "Secret" and out.get("apiVersion") == "v1" and out.get("stringData"):
        data = out.setdefault("data", {}) or {}
        for key, value in out.pop("stringData").items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        out["data"] = data
    return out


def digest(obj: JSON) -> str:
    """A short stable digest of an object's desired content."""
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def stamp(obj: JSON, owner: Owner, *, namespaced: bool, adopted: bool) -> JSON:
    """The object as this KfDef applies it: ownership label, annotations, ownerReference, digest.

    ``obj`` must already be :func:`normalize`-d; it is not modified.
    """
    out = copy.deepcopy(obj)
    meta = out.setdefault("metadata", {})
    meta.setdefault("labels", {})[INSTANCE_LABEL] = owner.label
    annotations = meta.setdefault("annotations", {})
    annotations[INSTANCE_ANNOTATION] = owner.instance
    if adopted:
        annotations[ADOPTED_ANNOTATION] = "true"
    elif namespaced and meta.get("namespace") == owner.namespace and owner.uid:
        refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != owner.uid]
        refs.append({"apiVersion": KFDEF_API_VERSION, "kind": "KfDef", "name": owner.name, "uid": owner.uid,
                     "blockOwnerDeletion": False, "controller": False})
        meta["ownerReferences"] = refs
    annotations.pop(DIGEST_ANNOTATION, None)
    annotations[DIGEST_ANNOTATION] = digest(out)
    return out


def release_patch() -> JSON:
    """A JSON merge patch removing this operator's stamps from an adopted object."""
    return {"metadata": {
        "labels": {INSTANCE_LABEL: None},
        "annotations": {INSTANCE_ANNOTATION: None, DIGEST_ANNOTATION: None, ADOPTED_ANNOTATION: None},
    }}


def reconcile_disabled(meta: JSON | None) -> bool:
    """The object opts out of healing and drift correction."""
    return ((meta or {}).get("annotations") or {}).get(RECONCILE_ANNOTATION) == RECONCILE_DISABLED
