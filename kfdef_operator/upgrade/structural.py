"""Structural schemas for apiextensions.k8s.io/v1 CRDs: checked and repaired (pure).

The rules are those of https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/
#specifying-a-structural-schema and the apiextensions v1 validation.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kfdef_operator.upgrade.conversion import JsonObject

PRESERVE = "x-kubernetes-preserve-unknown-fields"
INT_OR_STRING = "x-kubernetes-int-or-string"
EMBEDDED = "x-kubernetes-embedded-resource"
LIST_TYPE = "x-kubernetes-list-type"
LIST_MAP_KEYS = "x-kubernetes-list-map-keys"
MAP_TYPE = "x-kubernetes-map-type"
_JUNCTORS = ("allOf", "anyOf", "oneOf", "not")
_OPENAPI_TYPES = frozenset({"array", "boolean", "integer", "number", "object", "string"})
_SCALAR_TYPES = frozenset({"boolean", "integer", "number", "string"})
_V1_SCHEMA_KEYWORDS = frozenset({
    "$schema", "description", "type", "format", "title", "default", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "multipleOf",
    "enum", "maxProperties", "minProperties", "required", "items", "properties", "additionalProperties",
    "externalDocs", "example", "nullable", "x-kubernetes-validations", PRESERVE, INT_OR_STRING, EMBEDDED, LIST_TYPE,
    LIST_MAP_KEYS, MAP_TYPE, *_JUNCTORS,
})
# With the status subresource enabled the root may hold only these (the strictest case, applied always).
_ROOT_KEYWORDS = frozenset({
    "description", "type", "format", "title", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "maxItems", "minItems", "multipleOf", "required", "items", "properties",
    "externalDocs", "example", "x-kubernetes-validations", PRESERVE,
})
# Inside allOf/anyOf/oneOf/not only value validations are structural.
_FORBIDDEN_IN_JUNCTORS = frozenset({
    "type", "description", "title", "default", "nullable", "additionalProperties", "externalDocs",
    PRESERVE, INT_OR_STRING, EMBEDDED, LIST_TYPE, LIST_MAP_KEYS, MAP_TYPE, "x-kubernetes-validations",
})
_INT_OR_STRING_ANY_OF = [{"type": "integer"}, {"type": "string"}]
_INT_OR_STRING_ALL_OF_HEAD = {"anyOf": _INT_OR_STRING_ANY_OF}
# Go's RE2 has no look-around and no back-references; Python accepts both.
_NOT_RE2 = re.compile(r"\(\?<?[=!]|\(\?P=|\\[1-9]")
_PRESERVE_ANY_VALUE: JsonObject = {PRESERVE: True}


class _Level(Enum):
    """Where a schema node sits: the rules for a missing ``type`` and for the root differ."""

    ROOT = "the root"
    FIELD = "object fields"
    ITEM = "array items"


def _pattern_problem(node: JsonObject) -> str | None:
    pattern = node.get("pattern")
    if pattern is None:
        return None
    if not isinstance(pattern, str) or _NOT_RE2.search(pattern):
        return "pattern must be an RE2 regular expression"
    try:
        re.compile(pattern)
    except re.error as error:
        return f"pattern does not compile: {error}"
    return None


def _list_type_problem(node: JsonObject) -> str | None:
    list_type = node.get(LIST_TYPE)
    if list_type is None:
        return None
    if node.get("type") != "array":
        return f"{LIST_TYPE} needs type: array"
    if list_type not in ("atomic", "set", "map"):
        return f"{LIST_TYPE} must be atomic, set or map"
    if list_type == "map":
        return _list_map_keys_problem(node)
    return None


def _list_map_keys_problem(node: JsonObject) -> str | None:
    keys = node.get(LIST_MAP_KEYS)
    items = node.get("items")
    if (not keys or not isinstance(keys, list) or not all(isinstance(key, str) for key in keys)
            or not isinstance(items, dict) or items.get("type") != "object"):
        return f"{LIST_TYPE}: map needs {LIST_MAP_KEYS} (names) and object items"
    properties = _properties(items)
    required: list[Any] = items["required"] if isinstance(items.get("required"), list) else []
    for key in keys:
        key_schema = properties.get(key)
        if not isinstance(key_schema, dict) or key_schema.get("type") not in _SCALAR_TYPES:
            return f"{LIST_MAP_KEYS} entry {key!r} must be a scalar property of the items"
        if key not in required and "default" not in key_schema:
            return f"{LIST_MAP_KEYS} entry {key!r} must be required or have a default"
    return None


@dataclass(frozen=True)
class _KeywordRule:
    """A rule whose violation is repaired by dropping ``drops`` (which only loosens validation)."""

    drops: tuple[str, ...]
    problem: Callable[[JsonObject], str | None]


def _when(condition: Callable[[JsonObject], bool], message: str) -> Callable[[JsonObject], str | None]:
    return lambda node: message if condition(node) else None


_KEYWORD_RULES: tuple[_KeywordRule, ...] = (
    _KeywordRule(("type",), _when(lambda n: "type" in n and n["type"] not in _OPENAPI_TYPES,
                                  "type must be one of " + ", ".join(sorted(_OPENAPI_TYPES)))),
    _KeywordRule(("uniqueItems",), _when(lambda n: n.get("uniqueItems") is True,
                                         "uniqueItems: true is not allowed")),
    _KeywordRule((PRESERVE,), _when(lambda n: PRESERVE in n and n[PRESERVE] is not True,
                                    f"{PRESERVE} must be true or absent")),
    _KeywordRule((PRESERVE,), _when(lambda n: n.get(INT_OR_STRING) is True and PRESERVE in n,
                                    f"{PRESERVE} must not be set with {INT_OR_STRING}")),
    _KeywordRule((EMBEDDED,), _when(lambda n: n.get(EMBEDDED) is True and n.get(INT_OR_STRING) is True,
                                    f"{EMBEDDED} must not be set with {INT_OR_STRING}")),
    _KeywordRule((EMBEDDED,), _when(lambda n: n.get(EMBEDDED) is True and n.get("type", "object") != "object",
                                    f"{EMBEDDED} needs type: object")),
    _KeywordRule(("additionalProperties",), _when(lambda n: "additionalProperties" in n and "properties" in n,
                                                  "additionalProperties and properties are mutually exclusive")),
    _KeywordRule(("additionalProperties",), _when(lambda n: "additionalProperties" in n and n.get(EMBEDDED) is True,
                                                  f"additionalProperties is not allowed with {EMBEDDED}")),
    _KeywordRule(("additionalProperties",), _when(lambda n: not isinstance(n.get("additionalProperties", True),
                                                                              (bool, dict)),
                                                  "additionalProperties must be a boolean or a schema")),
    _KeywordRule(("properties",), _when(lambda n: not isinstance(n.get("properties", {}), dict),
                                        "properties must be a mapping")),
    _KeywordRule(("items",), _when(lambda n: "items" in n and not isinstance(n["items"], dict),
                                   "items must be a single schema")),
    _KeywordRule((LIST_TYPE, LIST_MAP_KEYS), _list_type_problem),
    _KeywordRule((LIST_MAP_KEYS,), _when(lambda n: bool(n.get(LIST_MAP_KEYS)) and n.get(LIST_TYPE) != "map",
                                         f"{LIST_MAP_KEYS} needs {LIST_TYPE}: map")),
    _KeywordRule((MAP_TYPE,), _when(lambda n: MAP_TYPE in n and (n.get("type") != "object"
                                                                    or n[MAP_TYPE] not in ("atomic", "granular")),
                                    f"{MAP_TYPE} must be atomic or granular on type: object")),
    _KeywordRule(("pattern",), _pattern_problem),
)


def _unsupported_keywords(node: JsonObject, level: _Level) -> list[str]:
    allowed = _ROOT_KEYWORDS if level is _Level.ROOT else _V1_SCHEMA_KEYWORDS
    return sorted(key for key in node if key not in allowed)


def _is_int_or_string_pattern(node: JsonObject) -> bool:
    """The junctor shapes the int-or-string exception allows: ``anyOf: [integer, string]``, or that first in allOf."""
    return node.get("anyOf") == _INT_OR_STRING_ANY_OF or (
        isinstance(node.get("allOf"), list) and node["allOf"][:1] == [_INT_OR_STRING_ALL_OF_HEAD])


def _junctor_branches(junctor: str, value: object) -> list[object]:
    """The branches of a junctor; a value of the wrong shape is one non-schema branch (never structural)."""
    if junctor == "not":
        return [value]
    return value if isinstance(value, list) else [None]


def _junctor_problems(nested: object, outer: JsonObject) -> list[str]:
    """Why ``nested`` (inside a junctor of ``outer``) is not structural: generics, or fields not specified outside."""
    if not isinstance(nested, dict):
        return ["must be a schema object"]
    problems = [f"{key} is not allowed inside allOf/anyOf/oneOf/not" for key in sorted(nested)
                if key in _FORBIDDEN_IN_JUNCTORS or key not in _V1_SCHEMA_KEYWORDS]
    problems += [message for rule in _KEYWORD_RULES if (message := rule.problem(nested))]
    outer_properties = _properties(outer)
    for name, sub in _properties(nested).items():
        if name == "metadata":
            problems.append("metadata must not be specified inside allOf/anyOf/oneOf/not")
        elif not isinstance(outer_properties.get(name), dict):
            problems.append(f"property {name!r} is not specified outside allOf/anyOf/oneOf/not")
        else:
            problems += _junctor_problems(sub, outer_properties[name])
    if "items" in nested:
        if isinstance(outer.get("items"), dict):
            problems += _junctor_problems(nested["items"], outer["items"])
        else:
            problems.append("items are not specified outside allOf/anyOf/oneOf/not")
    for junctor in _JUNCTORS:
        for branch in _junctor_branches(junctor, nested[junctor]) if junctor in nested else []:
            problems += _junctor_problems(branch, outer)
    return problems


def _junctors_to_check(node: JsonObject) -> list[tuple[str, object]]:
    """The junctor branches subject to the structural rules (the int-or-string patterns are exempt)."""
    branches: list[tuple[str, object]] = []
    for junctor in _JUNCTORS:
        if junctor not in node or (junctor == "anyOf" and node["anyOf"] == _INT_OR_STRING_ANY_OF):
            continue
        for index, branch in enumerate(_junctor_branches(junctor, node[junctor])):
            if not (junctor == "allOf" and index == 0 and branch == _INT_OR_STRING_ALL_OF_HEAD):
                branches.append((f"{junctor}[{index}]", branch))
    return branches


def _type_is_optional(node: JsonObject) -> bool:
    return node.get(INT_OR_STRING) is True or node.get(PRESERVE) is True


def is_structural(schema: object) -> list[str]:
    """The violations (``path: message``) that make an ``openAPIV3Schema`` unacceptable to an apiextensions/v1 CRD.

    Checks the structural-schema rules (types everywhere, junctors without generics and only over fields specified
    outside, metadata restricted to name/generateName, x-kubernetes-* extensions used where they are valid) and the
    v1 keyword rules (no $ref, definitions, uniqueItems: true, ...). Empty list: structural.
    """
    violations: list[str] = []
    _check_node(schema, "", _Level.ROOT, violations)
    return violations


def _child(path: str, step: str) -> str:
    return f"{path}.{step}" if path else step


def _check_node(node: object, path: str, level: _Level, out: list[str]) -> None:
    where = path or "<root>"
    if not isinstance(node, dict):
        out.append(f"{where}: must be a schema object")
        return
    out += [f"{where}: {key} is not supported here" for key in _unsupported_keywords(node, level)]
    out += [f"{where}: {message}" for rule in _KEYWORD_RULES if (message := rule.problem(node))]
    if level is _Level.ROOT and node.get("type") != "object":
        out.append(f"{where}: type must be object at the root")
    elif "type" not in node and not _type_is_optional(node):
        out.append(f"{where}: type must be set for {level.value}")
    if node.get("type") == "array" and "items" not in node:
        out.append(f"{where}: type array needs items")
    if node.get(EMBEDDED) is True and not node.get("properties") and node.get(PRESERVE) is not True:
        out.append(f"{where}: {EMBEDDED} needs properties or {PRESERVE}")
    if level is _Level.ROOT or node.get(EMBEDDED) is True:
        out += [f"{where}: {message}" for message in _resource_meta_problems(node, level is _Level.ROOT)]
    for name, sub in _properties(node).items():
        _check_node(sub, _child(path, f"properties.{name}"), _Level.FIELD, out)
    if isinstance(node.get("additionalProperties"), dict):
        _check_node(node["additionalProperties"], _child(path, "additionalProperties"), _Level.FIELD, out)
    if isinstance(node.get("items"), dict):
        _check_node(node["items"], _child(path, "items"), _Level.ITEM, out)
    for step, branch in _junctors_to_check(node):
        out += [f"{_child(path, step)}: {message}" for message in _junctor_problems(branch, node)]


def _properties(node: JsonObject) -> JsonObject:
    properties = node.get("properties")
    return properties if isinstance(properties, dict) else {}


def _resource_meta_problems(node: JsonObject, is_root: bool) -> list[str]:
    """apiVersion/kind must be strings; metadata an object, restricted to name/generateName at the root."""
    properties = _properties(node)
    problems = [f"properties.{key} must be type: string" for key in ("apiVersion", "kind")
                if key in properties
                and (not isinstance(properties[key], dict) or properties[key].get("type") != "string")]
    metadata = properties.get("metadata")
    if metadata is None:
        return problems
    if not isinstance(metadata, dict) or metadata.get("type") != "object":
        problems.append("properties.metadata must be type: object")
    elif is_root and (set(metadata) - {"type", "properties"} or set(_properties(metadata)) - {"name", "generateName"}):
        problems.append("properties.metadata may only restrict name and generateName")
    return problems


def structural_schema(schema: object, preserve_unknown_fields: bool) -> tuple[JsonObject, list[str]]:
    """A structural ``openAPIV3Schema`` for a v1 CRD version, and notes on what was changed to get it.

    Keeps the original where it is structural; repairs what it can by adding inferable types (``object`` where
    properties are given, ``array`` where items are), dropping keywords v1 refuses and junctors that cannot be
    structural (which only loosens validation), restricting root metadata to name/generateName, and turning
    untyped nodes into ``x-kubernetes-preserve-unknown-fields: true`` (any value, as before). A missing schema, or
    one the repair still leaves non-structural, becomes ``{type: object, x-kubernetes-preserve-unknown-fields: true}``.
    ``preserve_unknown_fields`` (v1beta1's ``preserveUnknownFields``, default true) marks every object node as
    preserving unknown fields, so v1 pruning drops nothing the v1beta1 CRD kept.
    """
    if schema is None:
        return {"type": "object", PRESERVE: True}, []
    notes: list[str] = []
    repaired = _repair_node(schema, "", _Level.ROOT, notes)
    if preserve_unknown_fields:
        _mark_preserve_unknown(repaired, is_root=True)
    remaining = is_structural(repaired)
    if remaining:
        notes.append("schema replaced by one preserving unknown fields: " + "; ".join(remaining[:3]))
        return {"type": "object", PRESERVE: True}, notes
    return repaired, notes


def _repair_node(node: object, path: str, level: _Level, notes: list[str]) -> JsonObject:
    where = path or "<root>"
    if not isinstance(node, dict):
        notes.append(f"{where}: not a schema object; any value accepted")
        return dict(_PRESERVE_ANY_VALUE)
    unsupported = _unsupported_keywords(node, level)
    repaired = {key: value for key, value in node.items() if key not in unsupported}
    if unsupported:
        notes.append(f"{where}: dropped {', '.join(unsupported)}")
    for rule in _KEYWORD_RULES:
        if (message := rule.problem(repaired)) is not None:
            notes.append(f"{where}: {message}; dropped {', '.join(rule.drops)}")
            for key in rule.drops:
                repaired.pop(key, None)
    if "properties" in repaired:
        repaired["properties"] = {name: _repair_node(sub, _child(path, f"properties.{name}"), _Level.FIELD, notes)
                                  for name, sub in repaired["properties"].items()}
    for key, child_level in (("additionalProperties", _Level.FIELD), ("items", _Level.ITEM)):
        if isinstance(repaired.get(key), dict):
            repaired[key] = _repair_node(repaired[key], _child(path, key), child_level, notes)
    _complete_types(repaired, where, level, notes)
    if level is _Level.ROOT or repaired.get(EMBEDDED) is True:
        _repair_resource_meta(repaired, level is _Level.ROOT)
    for step, branch in _junctors_to_check(repaired):
        junctor = step.split("[")[0]
        if junctor in repaired and _junctor_problems(branch, repaired):
            notes.append(f"{_child(path, junctor)}: not structural; dropped")
            del repaired[junctor]
    return repaired


def _complete_types(node: JsonObject, where: str, level: _Level, notes: list[str]) -> None:
    """Adds the types that can be inferred; an untypeable node accepts any value, as it did."""
    if level is _Level.ROOT and node.get("type") != "object":
        notes.append(f"{where}: type set to object (required at the root)")
        node["type"] = "object"
    if "type" not in node and not _type_is_optional(node):
        if _is_int_or_string_pattern(node):
            node[INT_OR_STRING] = True
        elif "properties" in node or "additionalProperties" in node or node.get(EMBEDDED):
            node["type"] = "object"
        elif "items" in node:
            node["type"] = "array"
        else:
            node[PRESERVE] = True
            notes.append(f"{where}: no type; any value accepted")
    if node.get("type") == "array" and "items" not in node:
        node["items"] = dict(_PRESERVE_ANY_VALUE)
    if node.get(EMBEDDED) is True and not node.get("properties"):
        node[PRESERVE] = True


def _repair_resource_meta(node: JsonObject, is_root: bool) -> None:
    properties = _properties(node)
    for key in ("apiVersion", "kind"):
        if key in properties and properties[key].get("type") != "string":
            properties[key] = {"type": "string"}
    metadata = properties.get("metadata")
    if metadata is None:
        return
    restricted = {key: value for key, value in _properties(metadata).items() if key in ("name", "generateName")}
    if is_root:
        properties["metadata"] = {"type": "object", **({"properties": restricted} if restricted else {})}
    else:
        metadata["type"] = "object"


def _mark_preserve_unknown(node: JsonObject, is_root: bool) -> None:
    """Sets x-kubernetes-preserve-unknown-fields on every object node (not root metadata, not maps)."""
    if node.get("type") == "object" and "additionalProperties" not in node:
        node[PRESERVE] = True
    for name, sub in _properties(node).items():
        if not (is_root and name == "metadata"):
            _mark_preserve_unknown(sub, is_root=False)
    for key in ("additionalProperties", "items"):
        if isinstance(node.get(key), dict):
            _mark_preserve_unknown(node[key], is_root=False)
