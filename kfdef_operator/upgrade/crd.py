"""CustomResourceDefinition apiextensions.k8s.io/v1beta1 -> v1, and the approval v1 requires of protected groups (pure).

Top-level ``validation``, ``subresources`` and ``additionalPrinterColumns`` move into every ``versions[]`` entry
(``JSONPath`` becomes ``jsonPath``), exactly one storage version, ``scope`` defaults to ``Namespaced``, webhook
conversion moves under ``conversion.webhook`` with ``conversionReviewVersions: [v1beta1]`` when absent. Every version
gets a structural schema (:func:`~kfdef_operator.upgrade.structural.structural_schema`); as v1beta1 preserved unknown
fields unless ``preserveUnknownFields: false``, such CRDs get ``x-kubernetes-preserve-unknown-fields: true`` on every
object node, so nothing is pruned that was kept before. A CRD of a group reserved for Kubernetes (``*.k8s.io``,
``*.kubernetes.io``) without the ``api-approved.kubernetes.io`` annotation gets the value v1 accepts for an API that
was never reviewed (``unapproved, ...``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kfdef_operator.upgrade.conversion import JsonObject, NotConvertible
from kfdef_operator.upgrade.structural import structural_schema


def convert_crd(obj: JsonObject) -> tuple[str, ...]:
    """apiextensions.k8s.io/v1beta1 into v1: per-version settings, one storage version, structural schemas."""
    spec = obj.setdefault("spec", {})
    notes: list[str] = []
    preserve_unknown_fields = spec.pop("preserveUnknownFields", True) is not False
    # v1beta1 top-level settings apply to every version that does not set its own.
    shared = {"schema": spec.pop("validation", None), "subresources": spec.pop("subresources", None),
              "additionalPrinterColumns": spec.pop("additionalPrinterColumns", None)}
    single_version = spec.pop("version", None)
    if not spec.get("versions") and not single_version:
        raise NotConvertible("the CRD names no version (spec.version or spec.versions)")
    versions = spec.get("versions") or [{"name": single_version, "served": True, "storage": True}]
    spec["versions"] = [_crd_version_v1(version, shared, preserve_unknown_fields, notes) for version in versions]
    _keep_one_storage_version(spec["versions"], single_version, notes)
    spec.setdefault("scope", "Namespaced")
    if "conversion" in spec:
        spec["conversion"] = _crd_conversion_v1(spec["conversion"])
    notes += _mark_unapproved_if_protected(obj)
    return tuple(notes)


#: v1 refuses a CRD in a protected group without this annotation (KEP 2337, k8s.io group protection).
API_APPROVAL_ANNOTATION = "api-approved.kubernetes.io"
#: The server accepts any value starting with "unapproved" and marks the CRD KubernetesAPIApprovalPolicyConformant
#: False; a URL would claim an API review that never happened.
UNAPPROVED = "unapproved, a v1beta1 CRD converted to apiextensions.k8s.io/v1 by kfdef-operator"


def is_protected_group(group: str) -> bool:
    """Whether CRDs of ``group`` need the approval annotation: ``k8s.io``, ``kubernetes.io`` and their subgroups."""
    return any(group == suffix or group.endswith("." + suffix) for suffix in ("k8s.io", "kubernetes.io"))


def _mark_unapproved_if_protected(crd: JsonObject) -> list[str]:
    group = crd["spec"].get("group")
    metadata = crd.setdefault("metadata", {})
    annotations = metadata.get("annotations") or {}
    if not isinstance(group, str) or not is_protected_group(group) or annotations.get(API_APPROVAL_ANNOTATION):
        return []
    metadata["annotations"] = {**annotations, API_APPROVAL_ANNOTATION: UNAPPROVED}
    return [f"group {group} is reserved for Kubernetes APIs: annotation {API_APPROVAL_ANNOTATION}: {UNAPPROVED!r} "
            "added, which v1 requires (this API was never approved; the server marks the CRD "
            "KubernetesAPIApprovalPolicyConformant=False)"]


def _crd_version_v1(version: JsonObject, shared: Mapping[str, Any], preserve_unknown_fields: bool,
                    notes: list[str]) -> JsonObject:
    converted = dict(version)
    for key, value in shared.items():
        if value is not None and not converted.get(key):
            converted[key] = copy.deepcopy(value)
    schema, schema_notes = structural_schema((converted.get("schema") or {}).get("openAPIV3Schema"),
                                             preserve_unknown_fields)
    converted["schema"] = {"openAPIV3Schema": schema}
    notes += [f"version {version.get('name')}: {note}" for note in schema_notes]
    if converted.get("additionalPrinterColumns"):
        converted["additionalPrinterColumns"] = [_printer_column_v1(column)
                                                 for column in converted["additionalPrinterColumns"]]
    return converted


def _printer_column_v1(column: JsonObject) -> JsonObject:
    converted = {key: value for key, value in column.items() if key != "JSONPath"}
    path = str(column.get("JSONPath", column.get("jsonPath")) or "")
    converted["jsonPath"] = path if path.startswith(".") else f".{path}"
    return converted


def _keep_one_storage_version(versions: list[JsonObject], preferred: str | None, notes: list[str]) -> None:
    storage = [version["name"] for version in versions if version.get("storage")]
    if len(storage) == 1:
        return
    names = [version["name"] for version in versions]
    chosen = preferred if preferred in names else (storage or names)[0]
    for version in versions:
        version["storage"] = version["name"] == chosen
    notes.append(f"storage version set to {chosen} (v1 needs exactly one)")


def _crd_conversion_v1(conversion: JsonObject) -> JsonObject:
    strategy = conversion.get("strategy", "None")
    if strategy != "Webhook":
        return {"strategy": strategy}
    return {"strategy": "Webhook", "webhook": {
        "clientConfig": conversion.get("webhookClientConfig", {}),
        # v1beta1 defaulted the review versions to v1beta1: the webhook may speak nothing else.
        "conversionReviewVersions": conversion.get("conversionReviewVersions", ["v1beta1"]),
    }}
