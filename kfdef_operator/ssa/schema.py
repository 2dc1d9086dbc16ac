"""Custom resources against their CRD's structural schema (pure): pruning and validation.

Pruning drops the fields of a custom resource that its CRD's structural schema does not declare.

A create or update through the API silently prunes such fields; a
server-side apply refuses the whole object instead ("field not declared in
schema"). KfDef-era manifests relied on the silent pruning of ``kubectl
apply``, so the apply engine prunes the same way before retrying, and
reports what it dropped.

Validation reports what the API server would refuse in a custom resource, before it is sent (the
command line checks a KfDef file this way).
"""

from __future__ import annotations

import difflib
import re
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


# -- validation ------------------------------------------------------------------------------------------------

#: Fields of ObjectMeta a client may send; strict decoding refuses any other key under ``metadata``.
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations", "ownerReferences", "finalizers",
    "managedFields",
})


def type_name(value: Any) -> str:
    """The JSON schema type of a decoded value, as the API server names it in messages."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string" if isinstance(value, str) else type(value).__name__


def _has_type(value: Any, wanted: str) -> bool:
    actual = type_name(value)
    return actual == wanted or (wanted == "number" and actual == "integer")


def validate(obj: JSON, schema: JSON) -> list[tuple[str, str]]:
    """What the API server would refuse in a custom resource, as ``(field path, message)`` pairs.

    The checks of strict field validation (unknown fields, also under ``metadata``) and of a structural
    ``openAPIV3Schema`` (``type``, ``required``, ``enum``, ``pattern``, lengths and item counts), worded as
    the server words them, all at once. ``null`` values are pruned by the server, so they count as absent.
    """
    problems: list[tuple[str, str]] = []
    body = {key: value for key, value in obj.items() if key != "metadata"}
    _check(body, schema, "", problems)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for key in meta:
            if key not in OBJECT_META_FIELDS:
                problems.append((f"metadata.{key}", f'unknown field "metadata.{key}"'
                                 + _did_you_mean(key, OBJECT_META_FIELDS)))
        for key in ("name", "namespace", "generateName"):
            if meta.get(key) is not None and not isinstance(meta[key], str):
                problems.append((f"metadata.{key}", _wrong_type(meta[key], "string")))
        for key in ("labels", "annotations"):
            _check(meta.get(key), {"type": "object", "additionalProperties": {"type": "string"}},
                   f"metadata.{key}", problems)
    elif meta is not None:
        problems.append(("metadata", _wrong_type(meta, "object")))
    return problems


def _wrong_type(value: Any, wanted: str) -> str:
    return f'Invalid value: "{type_name(value)}": must be of type {wanted}'


def _did_you_mean(key: str, known: Any) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _check(value: Any, schema: Any, path: str, problems: list[tuple[str, str]]) -> None:
    if value is None or not isinstance(schema, dict):
        return
    wanted = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if type_name(value) not in ("integer", "string"):
            problems.append((path, _wrong_type(value, "integer or string")))
        return
    if wanted and not _has_type(value, wanted):
        problems.append((path, _wrong_type(value, wanted)))
        return
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(f'"{item}"' for item in schema["enum"])
        problems.append((path, f'Unsupported value: "{value}": supported values: {supported}'))
    if isinstance(value, dict):
        _check_object(value, schema, path, problems)
    elif isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append((path, f"Too many: {len(value)}: must have at most {schema['maxItems']} items"))
        if "minItems" in schema and len(value) < schema["minItems"]:
            problems.append((path, f"Invalid value: {len(value)}: must have at least {schema['minItems']} items"))
        for index, item in enumerate(value):
            _check(item, schema.get("items"), f"{path}[{index}]", problems)
    elif isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append((path, f"Too long: may not be longer than {schema['maxLength']}"))
        if "minLength" in schema and len(value) < schema["minLength"]:
            problems.append((path, f"Invalid value: \"{value}\": should be at least {schema['minLength']} chars long"))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append((path, f"Invalid value: \"{value}\": should match '{schema['pattern']}'"))


def _check_object(value: JSON, schema: JSON, path: str, problems: list[tuple[str, str]]) -> None:
    for key in schema.get("required") or []:
        if value.get(key) is None:
            problems.append((_join(path, key), "Required value"))
    properties = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    open_ended = (schema.get("x-kubernetes-preserve-unknown-fields") or additional is True
                  or ("properties" not in schema and additional is None))
    for key, item in value.items():
        child = _join(path, key)
        if key in properties:
            _check(item, properties[key], child, problems)
        elif isinstance(additional, dict):
            _check(item, additional, child, problems)
        elif not open_ended:
            problems.append((child, f'unknown field "{child}"' + _did_you_mean(key, properties)))
