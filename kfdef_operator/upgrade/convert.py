"""Convert objects of API versions a Kubernetes server no longer serves to served versions (pure, no I/O).

KfDef-era manifests (Kubeflow v1.0 to v1.2) use API versions removed in Kubernetes 1.16 to 1.32. Between render and
apply, :func:`upgrade_objects` rewrites every object whose ``(apiVersion, kind)`` the target server does not serve
into the most preferred served successor of the same kind, keeping what the object meant under the old version.
Objects of served versions are returned as they are (the same dict). Input objects are never mutated.

This module is the upgrade step and its results; the pieces it combines are beside it:

* :mod:`.served`: what each Kubernetes minor serves (offline builds);
* :mod:`.successors`: which served version succeeds each removed one, and the kinds refused;
* :mod:`.crd` (with :mod:`.structural`), :mod:`.webhooks`, :mod:`.kinds`: the conversions, each writing out every
  default the successor version changed, so the old behaviour is kept;
* :mod:`.metadata`: ``initializers`` dropped from every ObjectMeta of every object, served or not.

Refused (listed in :attr:`UpgradeResult.unserved` with a reason): the kinds :mod:`.successors` refuses, and custom
resources of versions nothing serves (custom resources are never converted; those defined by a CRD among the
objects count as served).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from kfdef_operator.upgrade.conversion import Conversion, JsonObject, NotConvertible
from kfdef_operator.upgrade.metadata import carries_initializers, drop_initializers
from kfdef_operator.upgrade.served import ServedApis, ServedPredicate, as_predicate, served_for_release
from kfdef_operator.upgrade.successors import REFUSED, SUCCESSORS

__all__ = [
    "POLICIES", "POLICY_ANNOTATION", "POLICY_AUTO", "POLICY_OFF", "ServedApis", "ServedPredicate",
    "UnservedApiVersions", "UnservedObject", "UpgradeResult", "UpgradedObject", "served_for_release",
    "upgrade_objects",
]

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



# ---------------------------------------------------------------------------------------------------------------------
# The upgrade step


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]



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
    notes += drop_initializers(converted)
    metadata = obj.get("metadata") or {}
    return _Converted(converted, UpgradedObject(kind=obj["kind"], name=metadata.get("name", ""),
                                                namespace=metadata.get("namespace"), from_version=obj["apiVersion"],
                                                to_version=target, notes=notes))



def _without_initializers(obj: JsonObject) -> _Converted | None:
    """A served object that still carries ``initializers`` somewhere, as a copy without them (same API version);
    None when it carries none."""
    if not carries_initializers(obj):
        return None
    cleaned = copy.deepcopy(obj)
    notes = drop_initializers(cleaned)
    metadata = obj.get("metadata") or {}
    return _Converted(cleaned, UpgradedObject(kind=obj.get("kind", ""), name=metadata.get("name", ""),
                                              namespace=metadata.get("namespace"), from_version=obj["apiVersion"],
                                              to_version=obj["apiVersion"], notes=notes))


def _upgrade_one(obj: JsonObject, served: ServedPredicate) -> _Converted | UnservedObject:
    """Converts one unserved object into its most preferred served successor, or says why it cannot."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    key = (_group(api_version), kind)
    if key in REFUSED:
        return _unserved(obj, REFUSED[key])
    successor = SUCCESSORS.get(key)
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
    server_serves = as_predicate(served)
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
