"""Drop the fields of a custom resource that its CRD's structural schema does not declare (pure).

A create or update through the API silently prunes such fields; a
server-side apply refuses the whole object instead ("field not declared in
schema"). KfDef-era manifests relied on the silent pruning of ``kubectl
apply``, so the apply engine prunes the same way before retrying, and
reports what it dropped.
"""

from __future__ import annotations

from typing import Any
from kfdef_operator.api.types import JSON


_ROOT_KEPT = ("apiVersion", "kind", "metadata")


def prune(value: Any, schema: JSON | None, path: str = "") -> tuple[Any, list[str]]:
    """``value`` without undeclared fields, and the paths of the fields dropped."""
    if not isinstance(schema, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return value, []
    dropped: list[str] = []
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if properties is None and additional is None:
            return value, []  # a map without declared keys (e.g. type: object only): nothing to prune
        out = {}
        for key, item in value.items():
            child_path = f"{path}.{key}"
            if properties is not None and key in properties:
                out[key], below = prune(item, properties[key], child_path)
            elif isinstance(additional, dict):
                out[key], below = prune(item, additional, child_path)
            elif additional is True:
                out[key], below = item, []
            elif schema.get("x-kubernetes-embedded-resource") and key in _ROOT_KEPT:
                out[key], below = item, []
            else:
                dropped.append(child_path)
                continue
            dropped.extend(below)
        return out, dropped
    if isinstance(value, list):
        out_list = []
        for index, item in enumerate(value):
            pruned, below = prune(item, schema.get("items"), f"{path}[{index}]")
            out_list.append(pruned)
            dropped.extend(below)
        return out_list, dropped
    return value, []


def prune_custom_resource(obj: JSON, schema: JSON | None) -> tuple[JSON, list[str]]:
    """A custom resource pruned against its version's ``openAPIV3Schema``; apiVersion, kind and metadata stay."""
    body = {k: v for k, v in obj.items() if k not in _ROOT_KEPT}
    pruned, dropped = prune(body, schema)
    return {**{k: obj[k] for k in _ROOT_KEPT if k in obj}, **pruned}, dropped


def version_schema(crd: JSON, version: str) -> JSON | None:
    """The ``openAPIV3Schema`` of one version of a v1 CRD."""
    for entry in (crd.get("spec") or {}).get("versions") or []:
        if entry.get("name") == version:
            return ((entry.get("schema") or {}).get("openAPIV3Schema"))
    return None
