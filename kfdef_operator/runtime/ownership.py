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

import copy
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from kfdef_operator.api.names import (
    ADOPTED_ANNOTATION,
    API_VERSION,
    DIGEST_ANNOTATION,
    FIELD_MANAGER,
    INSTANCE_ANNOTATION,
    INSTANCE_LABEL,
    KIND,
    RECONCILE_ANNOTATION,
    RECONCILE_DISABLED,
    TOUCHED_ANNOTATION,
    kfdef_path,
)
from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.claims import Claim

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: The stamps and markers the watch cache keeps of every object (see runtime.tracker).
KEPT_LABELS = (INSTANCE_LABEL,)
KEPT_ANNOTATIONS = (INSTANCE_ANNOTATION, DIGEST_ANNOTATION, ADOPTED_ANNOTATION, RECONCILE_ANNOTATION)


def digest(obj: JSON) -> str:
    """A short stable digest of an object's desired content."""
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def parse_instance(value: str) -> tuple[str, str]:
    """The kfctl annotation value split into (name, namespace) on the last dot."""
    name, _, namespace = value.rpartition(".")
    return name, namespace


def opted_out(meta: JSON | None) -> bool:
    """A person annotated the object ``reconcile: disabled``: no apply, heal or delete."""
    return ((meta or {}).get("annotations") or {}).get(RECONCILE_ANNOTATION) == RECONCILE_DISABLED


@dataclass(frozen=True)
class Owner:
    """The KfDef that applies a stack, and its stamps (implements :class:`kfdef_operator.ssa.claims.Ownership`)."""

    name: str
    namespace: str
    uid: str

    field_manager = FIELD_MANAGER

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def instance(self) -> str:
        """The kfctl-compatible annotation value."""
        return f"{self.name}.{self.namespace}"

    @property
    def label(self) -> str:
        """The label value used by server-side selectors."""
        value = f"{self.namespace}.{self.name}"
        if _LABEL_VALUE.fullmatch(value):
            return value
        hashed = hashlib.sha256(value.encode()).hexdigest()[:12]
        return f"{value[:40].strip('.-_')}-{hashed}"

    @property
    def selector(self) -> str:
        return f"{INSTANCE_LABEL}={self.label}"

    def __str__(self) -> str:
        return f"KfDef {self.namespace}/{self.name}"

    def claim(self, live_meta: JSON | None) -> Claim:
        """Classify a live object's metadata (None when absent)."""
        if live_meta is None:
            return Claim.ABSENT
        annotations = live_meta.get("annotations") or {}
        labels = live_meta.get("labels") or {}
        instance = annotations.get(INSTANCE_ANNOTATION)
        label = labels.get(INSTANCE_LABEL)
        if instance is None and label is None:
            return Claim.UNCLAIMED
        if instance not in (None, self.instance) or label not in (None, self.label):
            return Claim.FOREIGN
        return Claim.ADOPTED if annotations.get(ADOPTED_ANNOTATION) == "true" else Claim.OURS

    def holder(self, live_meta: JSON) -> str:
        instance = (live_meta.get("annotations") or {}).get(INSTANCE_ANNOTATION)
        if instance:
            name, namespace = parse_instance(instance)
            return f"KfDef {namespace}/{name}"
        return f"the KfDef labelled {(live_meta.get('labels') or {}).get(INSTANCE_LABEL)}"

    def holder_path(self, live_meta: JSON) -> str | None:
        """The KfDef the kfctl annotation names (a label alone may be a hash, which names nobody)."""
        instance = (live_meta.get("annotations") or {}).get(INSTANCE_ANNOTATION)
        if not instance:
            return None
        name, namespace = parse_instance(instance)
        if not (_NAMESPACE.fullmatch(namespace) and name and "/" not in name):
            return None
        return kfdef_path(namespace, name)

    def stamp(self, obj: JSON, *, namespaced: bool, adopted: bool) -> JSON:
        """The object as this KfDef applies it: ownership label, annotations, ownerReference, digest.

        ``obj`` must already be normalised (``ssa.normalize``); it is not modified. Only the metadata is copied:
        the rest (a CRD's schema of hundreds of KiB) is shared with ``obj``, so the result is read-only, as every
        caller treats it (serialised, digested, compared). A deep copy per apply and per watch event cost more
        than a second of the event loop on a release's first apply.
        """
        out = {**obj, "metadata": copy.deepcopy(obj.get("metadata") or {})}
        meta = out["metadata"]
        meta.setdefault("labels", {})[INSTANCE_LABEL] = self.label
        annotations = meta.setdefault("annotations", {})
        annotations[INSTANCE_ANNOTATION] = self.instance
        if adopted:
            annotations[ADOPTED_ANNOTATION] = "true"
        elif namespaced and meta.get("namespace") == self.namespace and self.uid:
            refs = [r for r in meta.get("ownerReferences") or [] if r.get("uid") != self.uid]
            refs.append({"apiVersion": API_VERSION, "kind": KIND, "name": self.name, "uid": self.uid,
                         "blockOwnerDeletion": False, "controller": False})
            meta["ownerReferences"] = refs
        annotations.pop(DIGEST_ANNOTATION, None)
        annotations[DIGEST_ANNOTATION] = digest(out)
        return out

    def unchanged(self, live_meta: JSON, stamped: JSON) -> bool:
        live_digest = (live_meta.get("annotations") or {}).get(DIGEST_ANNOTATION)
        return live_digest is not None and live_digest == stamped["metadata"]["annotations"][DIGEST_ANNOTATION]

    def opted_out(self, live_meta: JSON | None) -> bool:
        return opted_out(live_meta)

    def touch_patch(self) -> JSON:
        """The time, in an annotation of the operator's."""
        return {"metadata": {"annotations": {TOUCHED_ANNOTATION: datetime.now(UTC).isoformat(timespec="seconds")}}}

    def release_patch(self) -> JSON:
        """A JSON merge patch removing this operator's stamps (the object itself is kept)."""
        return {"metadata": {
            "labels": {INSTANCE_LABEL: None},
            "annotations": {INSTANCE_ANNOTATION: None, DIGEST_ANNOTATION: None, ADOPTED_ANNOTATION: None},
        }}
