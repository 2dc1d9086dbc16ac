"""Convert objects of API versions a Kubernetes server no longer serves to served versions (pure, no I/O).

KfDef-era manifests (Kubeflow v1.0 to v1.2) use API versions removed in Kubernetes 1.16 to 1.32. Between render and
apply, :func:`upgrade_objects` rewrites every object whose ``(apiVersion, kind)`` the target server does not serve
into the most preferred served successor of the same kind, keeping what the object meant under the old version.
Objects of served versions are returned as they are (the same dict). Input objects are never mutated.

Old behaviour is kept by writing out, explicitly, every default that the successor version changed:

* Webhook configurations (admissionregistration v1beta1 -> v1), per webhook when absent:
  ``admissionReviewVersions: [v1beta1]``, ``failurePolicy: Ignore``, ``matchPolicy: Exact``, ``timeoutSeconds: 30``.
  v1 accepts only ``sideEffects: None|NoneOnDryRun``; ``Unknown``, ``Some`` or absent (v1beta1 default ``Unknown``)
  become ``None``. That cannot keep the old behaviour exactly (dry-run requests used to be refused instead of
  reaching the webhook), so each such webhook is named in the upgraded object's notes. v1 requires unique webhook
  names within a configuration: a repeated name gets ``-2``, ``-3``, ... on its first label (every webhook is
  still called).
* Deployment from extensions/v1beta1: ``revisionHistoryLimit`` and ``progressDeadlineSeconds`` 2147483647 (keep
  every ReplicaSet, no progress deadline), RollingUpdate ``maxUnavailable: 1`` and ``maxSurge: 1``; from
  apps/v1beta1: ``revisionHistoryLimit: 2``. DaemonSet from extensions/v1beta1 and StatefulSet from apps/v1beta1:
  ``updateStrategy.type: OnDelete``. These are the values the server stored when it still served the old version,
  so objects created back then do not change. Workloads get ``spec.selector.matchLabels`` from the pod template
  labels when absent (the old versions defaulted it the same way, so the immutable selector stays equal);
  ``spec.rollbackTo`` and ``spec.templateGeneration`` are dropped.
* CustomResourceDefinition v1beta1 -> v1: top-level ``validation``, ``subresources`` and
  ``additionalPrinterColumns`` move into every ``versions[]`` entry (``JSONPath`` becomes ``jsonPath``), exactly
  one storage version, ``scope`` defaults to ``Namespaced``, webhook conversion moves under ``conversion.webhook``
  with ``conversionReviewVersions: [v1beta1]`` when absent. Every version gets a structural schema (see
  :func:`structural_schema`); as v1beta1 preserved unknown fields unless ``preserveUnknownFields: false``, such CRDs
  get ``x-kubernetes-preserve-unknown-fields: true`` on every object node, so nothing is pruned that was kept before.
  A CRD of a group reserved for Kubernetes (``*.k8s.io``, ``*.kubernetes.io``) without the
  ``api-approved.kubernetes.io`` annotation gets the value v1 accepts for an API that was never reviewed
  (``unapproved, ...``).
* Every object loses ``initializers`` from every ObjectMeta it carries (its own, its pod and job templates', its
  volume claim templates'), served or not, each noted: the field was removed in Kubernetes 1.14 and the server
  refuses it (Kubeflow v1.0.2's spark-operator Deployment has it in its pod template).
* PodDisruptionBudget policy/v1beta1 -> v1: an empty selector matched no pods in v1beta1 but matches every pod of
  the namespace in v1; it is removed, because an absent selector matches no pods in both versions.
* Ingress -> networking.k8s.io/v1: ``backend`` -> ``defaultBackend``, ``serviceName``/``servicePort`` ->
  ``service: {name, port: {number|name}}``, ``pathType: ImplementationSpecific`` (the v1beta1 behaviour) when absent.
* HorizontalPodAutoscaler autoscaling/v2beta1 -> v2: metric targets become ``target: {type, value|averageValue|
  averageUtilization}``, ``metricName``/``selector`` become ``metric: {name, selector}``.
* RBAC v1alpha1 subjects' ``apiVersion`` becomes ``apiGroup``; EndpointSlice v1beta1 ``topology`` becomes
  ``nodeName``/``zone``; RuntimeClass v1alpha1 ``spec`` fields move to the top level; PriorityLevelConfiguration
  ``assuredConcurrencyShares`` becomes ``nominalConcurrencyShares``. The other kinds keep their shape.

Refused (listed in :attr:`UpgradeResult.unserved` with a reason): PodSecurityPolicy (removed without successor),
CertificateSigningRequest v1beta1 (v1 requires a ``signerName`` the old object cannot supply), Events, and custom
resources of versions nothing serves (custom resources are never converted; those defined by a CRD among the
objects count as served).
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

JsonObject = dict[str, Any]
ServedPredicate = Callable[[str, str], bool]
#: What the caller knows the target server serves: a predicate on ``(apiVersion, kind)`` or a set of such pairs.
ServedApis = ServedPredicate | Set[tuple[str, str]]

#: Per-KfDef policy annotation (the reconciler reads it; the operator default comes from ``KFDEF_API_UPGRADE``).
POLICY_ANNOTATION = "kfdef.apps.kubeflow.org/api-upgrade"
POLICY_AUTO = "auto"
POLICY_OFF = "off"
POLICIES = (POLICY_AUTO, POLICY_OFF)


# ---------------------------------------------------------------------------------------------------------------------
# Results and errors


@dataclass(frozen=True)
class UpgradedObject:
    """One object converted to a served version; ``notes`` say where the old meaning could not be kept exactly."""

    kind: str
    name: str
    namespace: str | None
    from_version: str
    to_version: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class UnservedObject:
    """One object of a version the server does not serve and that was not converted, with the reason why."""

    kind: str
    name: str
    namespace: str | None
    api_version: str
    reason: str

    def describe(self) -> str:
        """``Kind namespace/name (apiVersion)``, or ``Kind name (apiVersion)`` for cluster-scoped objects."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where} ({self.api_version})"


@dataclass
class UpgradeResult:
    """The objects to apply (served versions only) and what was upgraded or left out.

    ``origin[i]`` is the index in the input of ``objects[i]``, so callers keep whatever they know of each
    object (its application) without matching objects again.
    """

    objects: list[JsonObject]
    origin: list[int] = field(default_factory=list)
    upgraded: list[UpgradedObject] = field(default_factory=list)
    unserved: list[UnservedObject] = field(default_factory=list)

    def notes(self) -> list[str]:
        """Every note of every upgraded object, prefixed with the object (for status and the CLI)."""
        return [f"{item.kind} {item.name}: {note}" for item in self.upgraded for note in item.notes]

    def summary(self) -> str:
        """One line for a status message or an Event, e.g. ``upgraded 3 objects (Deployment 2, Ingress 1)``."""
        kinds = Counter(item.kind for item in self.upgraded)
        text = f"upgraded {len(self.upgraded)} objects"
        if kinds:
            text += " (" + ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())) + ")"
        if self.unserved:
            text += f"; {len(self.unserved)} objects of unserved API versions not convertible"
        return text


class UnservedApiVersions(Exception):
    """Raised under policy ``off`` when objects use API versions the server does not serve."""

    def __init__(self, objects: list[UnservedObject]):
        self.objects = objects
        lines = [f"{len(objects)} objects use API versions the server does not serve (API upgrade policy is off):"]
        lines += [f"  - {item.describe()}" for item in objects]
        lines.append(f'Set the annotation {POLICY_ANNOTATION}: "auto" on the KfDef to convert them to served versions.')
        super().__init__("\n".join(lines))


class NotConvertible(Exception):
    """A conversion found the object cannot be expressed in the successor version; the message says why."""


# ---------------------------------------------------------------------------------------------------------------------
# What each Kubernetes minor serves (offline builds, e.g. ``kfdef-operator build --target-version 1.36``)

_WEBHOOKS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
_RBAC = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
_APPS_V1BETA1 = ("Deployment", "StatefulSet", "ControllerRevision")
_APPS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ControllerRevision")
_HPA = ("HorizontalPodAutoscaler",)
_FLOW_CONTROL = ("FlowSchema", "PriorityLevelConfiguration")
_NEVER = None  # alpha versions: never served by default

# (apiVersion, kinds, first minor serving them by default or _NEVER, first minor no longer serving them or None)
_SERVING_TABLE: tuple[tuple[str, tuple[str, ...], int | None, int | None], ...] = (
    ("apiextensions.k8s.io/v1beta1", ("CustomResourceDefinition",), 7, 22),
    ("apiextensions.k8s.io/v1", ("CustomResourceDefinition",), 16, None),
    ("admissionregistration.k8s.io/v1beta1", _WEBHOOKS, 9, 22),
    ("admissionregistration.k8s.io/v1", _WEBHOOKS, 16, None),
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
    ("rbac.authorization.k8s.io/v1alpha1", _RBAC, _NEVER, 22),
    ("rbac.authorization.k8s.io/v1beta1", _RBAC, 6, 22),
    ("rbac.authorization.k8s.io/v1", _RBAC, 8, None),
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


# ---------------------------------------------------------------------------------------------------------------------
# Structural schemas (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/
# #specifying-a-structural-schema and the apiextensions v1 validation)

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


# ---------------------------------------------------------------------------------------------------------------------
# Conversions: each takes a deep copy of the object (still carrying its old apiVersion), rewrites it in place into the
# successor's shape and returns notes on meaning it could not keep exactly.

Conversion = Callable[[JsonObject], tuple[str, ...]]


def _fill_missing(target: JsonObject, defaults: Mapping[str, Any]) -> None:
    """Sets each default (recursively for nested mappings) where ``target`` has no value."""
    for key, default in defaults.items():
        if isinstance(default, Mapping) and isinstance(target.get(key), dict):
            _fill_missing(target[key], default)
        elif key not in target:
            target[key] = copy.deepcopy(default)


def _same_shape(obj: JsonObject) -> tuple[str, ...]:
    """The successor has the same fields: only the apiVersion changes."""
    return ()


def _convert_crd(obj: JsonObject) -> tuple[str, ...]:
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


# v1beta1 defaults that admissionregistration/v1 changed or removed.
_V1BETA1_WEBHOOK_DEFAULTS = {"admissionReviewVersions": ["v1beta1"], "failurePolicy": "Ignore",
                             "matchPolicy": "Exact", "timeoutSeconds": 30}
_V1_SIDE_EFFECTS = ("None", "NoneOnDryRun")


def _convert_webhook_configuration(obj: JsonObject) -> tuple[str, ...]:
    notes = _make_webhook_names_unique(obj.get("webhooks") or [])
    for webhook in obj.get("webhooks") or []:
        _fill_missing(webhook, _V1BETA1_WEBHOOK_DEFAULTS)
        side_effects = webhook.get("sideEffects", "Unknown")
        if side_effects not in _V1_SIDE_EFFECTS:
            webhook["sideEffects"] = "None"
            notes.append(f"webhook {webhook.get('name')}: sideEffects {side_effects} is not accepted by v1, set to "
                         "None: dry-run requests now reach this webhook instead of being refused")
    return tuple(notes)


_DNS_LABEL_MAX = 63


def _make_webhook_names_unique(webhooks: list[JsonObject]) -> list[str]:
    """Renames the second and later webhooks sharing a name (v1beta1 allowed that, v1 refuses it).

    Renaming keeps the behaviour: the server still calls every webhook. The first label gets ``-2``, ``-3``, ...
    (shortened to stay a DNS label), so the name remains the fully qualified name v1 requires and is the same on
    every render.
    """
    taken = {webhook.get("name") for webhook in webhooks}
    seen: set[object] = set()
    notes = []
    for webhook in webhooks:
        name = webhook.get("name")
        if name not in seen:
            seen.add(name)
            continue
        first, dot, rest = str(name).partition(".")
        number = 2
        while (candidate := f"{first[:_DNS_LABEL_MAX - len(str(number)) - 1]}-{number}{dot}{rest}") in taken:
            number += 1
        webhook["name"] = candidate
        taken.add(candidate)
        notes.append(f"webhook {name}: repeated name, this one renamed to {candidate} (v1 requires unique "
                     "names; every webhook is still called)")
    return notes


# Defaults of removed workload versions that differ from apps/v1, by (old apiVersion, kind).
_OLD_WORKLOAD_DEFAULTS: Mapping[tuple[str, str], Mapping[str, Any]] = {
    ("extensions/v1beta1", "Deployment"): {
        "revisionHistoryLimit": 2147483647, "progressDeadlineSeconds": 2147483647,
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 1}},
    },
    ("apps/v1beta1", "Deployment"): {"revisionHistoryLimit": 2},
    ("extensions/v1beta1", "DaemonSet"): {"updateStrategy": {"type": "OnDelete"}},
    ("apps/v1beta1", "StatefulSet"): {"updateStrategy": {"type": "OnDelete"}},
}


def _convert_workload(obj: JsonObject) -> tuple[str, ...]:
    spec = obj.setdefault("spec", {})
    if "selector" not in spec:
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
        if not labels:
            raise NotConvertible("apps/v1 requires spec.selector and the pod template has no labels to derive it from")
        spec["selector"] = {"matchLabels": dict(labels)}
    spec.pop("rollbackTo", None)
    spec.pop("templateGeneration", None)
    defaults = _OLD_WORKLOAD_DEFAULTS.get((obj["apiVersion"], obj["kind"]), {})
    if (spec.get("strategy") or {}).get("type") == "Recreate":  # rollingUpdate is invalid with Recreate
        defaults = {key: value for key, value in defaults.items() if key != "strategy"}
    _fill_missing(spec, defaults)
    return ()


def _service_port(port: int | str) -> JsonObject:
    if isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
        return {"number": int(port)}
    return {"name": port}


def _ingress_backend_v1(backend: JsonObject) -> JsonObject:
    if "serviceName" not in backend:
        return backend  # a resource backend keeps its shape
    converted = {key: value for key, value in backend.items() if key not in ("serviceName", "servicePort")}
    converted["service"] = {"name": backend["serviceName"], "port": _service_port(backend.get("servicePort", 80))}
    return converted


def _convert_ingress(obj: JsonObject) -> tuple[str, ...]:
    spec = obj.get("spec") or {}
    if "backend" in spec:
        spec["defaultBackend"] = _ingress_backend_v1(spec.pop("backend"))
    for rule in spec.get("rules") or []:
        for path in (rule.get("http") or {}).get("paths") or []:
            path.setdefault("pathType", "ImplementationSpecific")
            if "backend" in path:
                path["backend"] = _ingress_backend_v1(path["backend"])
    return ()


_RBAC_GROUP_SUBJECTS = ("User", "Group")


def _convert_rbac(obj: JsonObject) -> tuple[str, ...]:
    for subject in obj.get("subjects") or []:
        subject.pop("apiVersion", None)  # v1alpha1 only; v1 identifies the subject's group by apiGroup
        if subject.get("kind") in _RBAC_GROUP_SUBJECTS:
            subject.setdefault("apiGroup", "rbac.authorization.k8s.io")
    return ()


def _convert_pod_disruption_budget(obj: JsonObject) -> tuple[str, ...]:
    spec = obj.get("spec") or {}
    if "selector" not in spec:
        return ()
    selector = spec["selector"] or {}
    if selector.get("matchLabels") or selector.get("matchExpressions"):
        return ()
    del spec["selector"]
    return ("empty selector removed: it matched no pods in policy/v1beta1 but would match every pod in policy/v1",)


# autoscaling/v2beta1 target fields in precedence order -> (v2 target type, v2 target field)
_HPA_V2BETA1_TARGETS = (("targetAverageUtilization", "Utilization", "averageUtilization"),
                        ("averageValue", "AverageValue", "averageValue"),
                        ("targetAverageValue", "AverageValue", "averageValue"),
                        ("targetValue", "Value", "value"))
_HPA_METRIC_SOURCES = ("resource", "containerResource", "pods", "object", "external")


def _hpa_metric_source_v2(source: JsonObject) -> JsonObject:
    converted: JsonObject = {key: source[key] for key in ("name", "container") if key in source}
    if "target" in source:  # object metrics: v2beta1's target is the described object
        converted["describedObject"] = source["target"]
    if "metricName" in source:
        converted["metric"] = {"name": source["metricName"]}
        selector = source.get("selector", source.get("metricSelector"))
        if selector is not None:
            converted["metric"]["selector"] = selector
    for old_field, target_type, new_field in _HPA_V2BETA1_TARGETS:
        if old_field in source:
            converted["target"] = {"type": target_type, new_field: source[old_field]}
            break
    return converted


def _convert_hpa(obj: JsonObject) -> tuple[str, ...]:
    spec = obj.get("spec") or {}
    if obj["apiVersion"] == "autoscaling/v2beta1":
        for metric in spec.get("metrics") or []:
            for key in _HPA_METRIC_SOURCES:
                if key in metric:
                    metric[key] = _hpa_metric_source_v2(metric[key])
    return ()


_TOPOLOGY_FIELDS = {"kubernetes.io/hostname": "nodeName", "topology.kubernetes.io/zone": "zone"}


def _convert_endpoint_slice(obj: JsonObject) -> tuple[str, ...]:
    dropped: set[str] = set()
    for endpoint in obj.get("endpoints") or []:
        for key, value in (endpoint.pop("topology", None) or {}).items():
            if key in _TOPOLOGY_FIELDS:
                endpoint.setdefault(_TOPOLOGY_FIELDS[key], value)
            else:
                dropped.add(key)
    return (f"topology keys without a v1 field dropped: {', '.join(sorted(dropped))}",) if dropped else ()


def _convert_runtime_class(obj: JsonObject) -> tuple[str, ...]:
    spec = obj.pop("spec", None)
    if spec is not None:  # node.k8s.io/v1alpha1 nested the fields under spec
        if "runtimeHandler" in spec:
            obj["handler"] = spec["runtimeHandler"]
        for key in ("overhead", "scheduling"):
            if key in spec:
                obj[key] = spec[key]
    return ()


def _convert_priority_level(obj: JsonObject) -> tuple[str, ...]:
    limited = (obj.get("spec") or {}).get("limited")
    if limited:
        shares = limited.pop("assuredConcurrencyShares", None) or limited.pop("nominalConcurrencyShares", None)
        # The betas defaulted 0 or absent to 30; v1 takes an explicit 0 literally, so only a real value is written.
        if shares:
            limited["nominalConcurrencyShares"] = shares
    return ()


@dataclass(frozen=True)
class _Successor:
    """Target apiVersions, most preferred first, and the conversion into their (common) shape."""

    targets: tuple[str, ...]
    convert: Conversion


_APPS_V1 = _Successor(("apps/v1",), _convert_workload)
_INGRESS_V1 = _Successor(("networking.k8s.io/v1",), _convert_ingress)
_FLOW_CONTROL_V1 = ("flowcontrol.apiserver.k8s.io/v1", "flowcontrol.apiserver.k8s.io/v1beta3")


def _same_shape_as(*targets: str) -> _Successor:
    return _Successor(targets, _same_shape)


# (old group, kind) -> successor. Old versions of a group share one entry; served versions never reach it.
_SUCCESSORS: Mapping[tuple[str, str], _Successor] = {
    ("apiextensions.k8s.io", "CustomResourceDefinition"): _Successor(("apiextensions.k8s.io/v1",), _convert_crd),
    **{("admissionregistration.k8s.io", kind): _Successor(("admissionregistration.k8s.io/v1",),
                                                          _convert_webhook_configuration) for kind in _WEBHOOKS},
    **{("extensions", kind): _APPS_V1 for kind in ("Deployment", "DaemonSet", "ReplicaSet")},
    **{("apps", kind): _APPS_V1 for kind in ("Deployment", "DaemonSet", "ReplicaSet", "StatefulSet")},
    ("apps", "ControllerRevision"): _same_shape_as("apps/v1"),
    ("extensions", "Ingress"): _INGRESS_V1,
    ("networking.k8s.io", "Ingress"): _INGRESS_V1,
    ("networking.k8s.io", "IngressClass"): _same_shape_as("networking.k8s.io/v1"),
    ("extensions", "NetworkPolicy"): _same_shape_as("networking.k8s.io/v1"),
    **{("rbac.authorization.k8s.io", kind): _Successor(("rbac.authorization.k8s.io/v1",), _convert_rbac)
       for kind in _RBAC},
    ("policy", "PodDisruptionBudget"): _Successor(("policy/v1",), _convert_pod_disruption_budget),
    ("scheduling.k8s.io", "PriorityClass"): _same_shape_as("scheduling.k8s.io/v1"),
    ("batch", "CronJob"): _same_shape_as("batch/v1"),
    **{("storage.k8s.io", kind): _same_shape_as("storage.k8s.io/v1")
       for kind in ("StorageClass", "VolumeAttachment", "CSIDriver", "CSINode", "CSIStorageCapacity")},
    ("apiregistration.k8s.io", "APIService"): _same_shape_as("apiregistration.k8s.io/v1"),
    ("coordination.k8s.io", "Lease"): _same_shape_as("coordination.k8s.io/v1"),
    ("node.k8s.io", "RuntimeClass"): _Successor(("node.k8s.io/v1",), _convert_runtime_class),
    ("autoscaling", "HorizontalPodAutoscaler"): _Successor(("autoscaling/v2", "autoscaling/v2beta2"), _convert_hpa),
    ("discovery.k8s.io", "EndpointSlice"): _Successor(("discovery.k8s.io/v1",), _convert_endpoint_slice),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"): _same_shape_as(*_FLOW_CONTROL_V1),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"): _Successor(_FLOW_CONTROL_V1,
                                                                               _convert_priority_level),
}

_NO_POD_SECURITY_POLICY = ("PodSecurityPolicy was removed in 1.25 without a successor "
                           "(use Pod Security Admission namespace labels)")
# (old group, kind) -> why there is no conversion.
_REFUSED: Mapping[tuple[str, str], str] = {
    ("extensions", "PodSecurityPolicy"): _NO_POD_SECURITY_POLICY,
    ("policy", "PodSecurityPolicy"): _NO_POD_SECURITY_POLICY,
    ("certificates.k8s.io", "CertificateSigningRequest"): "certificates.k8s.io/v1 requires a signerName that a "
                                                          "v1beta1 request cannot supply; create a v1 request",
    ("events.k8s.io", "Event"): "Events are records written by controllers, not desired state",
}


# ---------------------------------------------------------------------------------------------------------------------
# The upgrade step


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _as_predicate(served: ServedApis) -> ServedPredicate:
    if callable(served):
        return served
    pairs = frozenset(served)
    return lambda api_version, kind: (api_version, kind) in pairs


def _custom_resources_defined(objects: Iterable[JsonObject]) -> frozenset[tuple[str, str]]:
    """``(apiVersion, kind)`` of custom resources that CRDs among ``objects`` will serve once applied."""
    defined: set[tuple[str, str]] = set()
    for obj in objects:
        if obj.get("kind") != "CustomResourceDefinition" or _group(obj.get("apiVersion", "")) != "apiextensions.k8s.io":
            continue
        spec = obj.get("spec") or {}
        kind = str((spec.get("names") or {}).get("kind", ""))
        names = [version.get("name") for version in spec.get("versions") or [] if version.get("served", True)]
        names += [spec["version"]] if spec.get("version") else []
        defined.update((f"{spec.get('group')}/{name}", kind) for name in names)
    return frozenset(defined)


def _unserved(obj: JsonObject, reason: str) -> UnservedObject:
    metadata = obj.get("metadata") or {}
    return UnservedObject(kind=obj.get("kind", ""), name=metadata.get("name", ""),
                          namespace=metadata.get("namespace"), api_version=obj.get("apiVersion", ""), reason=reason)


@dataclass(frozen=True)
class _Converted:
    """A converted copy of an object and its record."""

    obj: JsonObject
    record: UpgradedObject


def _convert(obj: JsonObject, target: str, convert: Conversion) -> _Converted | UnservedObject:
    converted = copy.deepcopy(obj)
    try:
        notes = convert(converted)
    except NotConvertible as error:
        return _unserved(obj, str(error))
    converted["apiVersion"] = target
    notes += _drop_initializers(converted)
    metadata = obj.get("metadata") or {}
    return _Converted(converted, UpgradedObject(kind=obj["kind"], name=metadata.get("name", ""),
                                                namespace=metadata.get("namespace"), from_version=obj["apiVersion"],
                                                to_version=target, notes=notes))


def _embedded_metadata(obj: JsonObject, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every ObjectMeta an object carries, with its path: its own, and those of the templates under its spec (pod
    and job templates, nested as a CronJob nests them, and each of a StatefulSet's volume claim templates)."""
    yield (*path, "metadata"), obj.get("metadata")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    for key in ("template", "jobTemplate"):
        if isinstance(spec.get(key), dict):
            yield from _embedded_metadata(spec[key], (*path, "spec", key))
    claims = spec.get("volumeClaimTemplates")
    for index, claim in enumerate(claims if isinstance(claims, list) else []):
        if isinstance(claim, dict):
            yield from _embedded_metadata(claim, (*path, "spec", f"volumeClaimTemplates[{index}]"))


def _drop_initializers(obj: JsonObject) -> tuple[str, ...]:
    """Removes ``initializers`` (an ObjectMeta field removed in Kubernetes 1.14) from every ObjectMeta of ``obj``."""
    notes = []
    for path, metadata in list(_embedded_metadata(obj)):
        if isinstance(metadata, dict) and "initializers" in metadata:
            del metadata["initializers"]
            notes.append(f"{'.'.join(path)}.initializers dropped: the field was removed in Kubernetes 1.14")
    return tuple(notes)


def _without_initializers(obj: JsonObject) -> _Converted | None:
    """A served object that still carries ``initializers`` somewhere, as a copy without them (same API version);
    None when it carries none."""
    if not any(isinstance(meta, dict) and "initializers" in meta for _, meta in _embedded_metadata(obj)):
        return None
    cleaned = copy.deepcopy(obj)
    notes = _drop_initializers(cleaned)
    metadata = obj.get("metadata") or {}
    return _Converted(cleaned, UpgradedObject(kind=obj.get("kind", ""), name=metadata.get("name", ""),
                                              namespace=metadata.get("namespace"), from_version=obj["apiVersion"],
                                              to_version=obj["apiVersion"], notes=notes))


def _upgrade_one(obj: JsonObject, served: ServedPredicate) -> _Converted | UnservedObject:
    """Converts one unserved object into its most preferred served successor, or says why it cannot."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    key = (_group(api_version), kind)
    if key in _REFUSED:
        return _unserved(obj, _REFUSED[key])
    successor = _SUCCESSORS.get(key)
    if successor is None:
        return _unserved(obj, "no conversion is known for this kind and no CRD among the objects serves it "
                              "(custom resources are never converted)")
    target = next((candidate for candidate in successor.targets
                   if candidate != api_version and served(candidate, kind)), None)
    if target is None:
        return _unserved(obj, f"none of the successors {', '.join(successor.targets)} is served")
    return _convert(obj, target, successor.convert)


def upgrade_objects(objects: list[JsonObject], served: ServedApis, policy: str = POLICY_AUTO) -> UpgradeResult:
    """Converts the objects whose ``(apiVersion, kind)`` ``served`` does not serve to served successors.

    ``served`` answers per ``(apiVersion, kind)``: the live server's discovery as a set of pairs, or a predicate
    such as :func:`served_for_release`. Custom resources defined by CRDs among ``objects`` count as served, so pass
    all objects of a KfDef at once. Policy ``auto`` converts; objects that cannot be converted are left out of
    ``objects`` and listed in ``unserved``. Policy ``off`` converts nothing and raises :class:`UnservedApiVersions`
    listing every object of an unserved version. Served objects are returned as the same dicts; inputs are never
    mutated.
    """
    if policy not in POLICIES:
        raise ValueError(f"API upgrade policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    server_serves = _as_predicate(served)
    defined = _custom_resources_defined(objects)

    def is_served(api_version: str, kind: str) -> bool:
        return (api_version, kind) in defined or server_serves(api_version, kind)

    unserved = [obj for obj in objects if not is_served(obj.get("apiVersion", ""), obj.get("kind", ""))]
    if policy == POLICY_OFF:
        if unserved:
            raise UnservedApiVersions([_unserved(obj, f"API upgrade policy is {POLICY_OFF}") for obj in unserved])
        return UpgradeResult(objects=list(objects), origin=list(range(len(objects))))
    outcomes = {id(obj): _upgrade_one(obj, is_served) for obj in unserved}
    result = UpgradeResult(objects=[])
    for index, obj in enumerate(objects):
        outcome = outcomes.get(id(obj)) or _without_initializers(obj) or obj
        if isinstance(outcome, UnservedObject):
            result.unserved.append(outcome)
            continue
        if isinstance(outcome, _Converted):
            result.upgraded.append(outcome.record)
            outcome = outcome.obj
        result.objects.append(outcome)
        result.origin.append(index)
    return result
