"""From rendered applications to the objects a KfDef's stack must hold.

Each object's identity is settled here, once: normalised for server-side
apply, its namespace defaulted or dropped as its kind's scope says (the API
server's discovery, or the scope of a CRD in the same stack for custom
resources not served yet), and checked against the operator's scope. Later
steps (inventory, apply, prune, heal) only ever see these identities, so a
cluster-scoped custom resource that kustomize gave a namespace is the same
object on every reconcile.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Iterable

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.changeset import Action, Change
from kfdef_operator.ssa.discovery import Discovery, Resource
from kfdef_operator.ssa.inventory import ObjectRef, ref_of
from kfdef_operator.ssa.normalize import normalize


@dataclass
class DesiredState:
    """The stack's objects, keyed by identity, in render order."""

    objects: dict[ObjectRef, JSON] = field(default_factory=dict)
    application_of: dict[ObjectRef, str] = field(default_factory=dict)
    #: Served kinds; objects missing here are custom resources of CRDs this stack installs.
    resources: dict[ObjectRef, Resource] = field(default_factory=dict)
    rejected: list[Change] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)

    @property
    def served(self) -> list[tuple[JSON, Resource]]:
        return [(obj, self.resources[ref]) for ref, obj in self.objects.items() if ref in self.resources]

    @property
    def not_served_yet(self) -> list[JSON]:
        return [obj for ref, obj in self.objects.items() if ref not in self.resources]


def crd_scopes(objects: Iterable[JSON]) -> dict[tuple[str, str], bool]:
    """``{(apiVersion, kind): namespaced}`` for every version of every CRD among ``objects``."""
    scopes: dict[tuple[str, str], bool] = {}
    for obj in objects:
        if obj.get("kind") != "CustomResourceDefinition":
            continue
        spec = obj.get("spec") or {}
        kind = str((spec.get("names") or {}).get("kind", ""))
        for version in spec.get("versions") or [{"name": spec.get("version")}]:
            scopes[(f"{spec.get('group')}/{version.get('name')}", kind)] = spec.get("scope", "Namespaced") == "Namespaced"
    return scopes


def in_scope(ref: ObjectRef, namespaces: frozenset[str]) -> bool:
    """Whether a namespace-scoped operator (``namespaces`` non-empty, globs allowed) may hold ``ref``.

    Such an operator holds no cluster-scoped object at all.
    """
    if not namespaces:
        return True
    return bool(ref.namespace) and any(fnmatch.fnmatchcase(ref.namespace, pattern) for pattern in namespaces)


def build_desired(objects: Iterable[tuple[str, JSON]], discovery: Discovery, *, default_namespace: str,
                  namespaces: frozenset[str] = frozenset()) -> DesiredState:
    """The desired state of ``(application, object)`` pairs, in order (a later duplicate wins)."""
    objects = list(objects)
    scopes = crd_scopes(obj for _, obj in objects)
    state = DesiredState()
    for application, raw in objects:
        obj = normalize(raw)
        api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
        resource = discovery.cached(api_version, kind)
        namespaced = resource.namespaced if resource is not None else scopes.get((api_version, kind), True)
        meta = obj["metadata"]
        if not namespaced:
            meta.pop("namespace", None)
        elif not meta.get("namespace"):
            meta["namespace"] = default_namespace
        ref = ref_of(obj)
        if not in_scope(ref, namespaces):
            where = f"namespace {ref.namespace}" if ref.namespace else "a cluster-scoped object"
            state.rejected.append(Change(ref, Action.FAILED, f"{where} is outside this operator's scope "
                                                             f"({', '.join(sorted(namespaces))}); not applied"))
            continue
        if ref in state.objects:
            state.duplicates.append(str(ref))
            del state.objects[ref]  # re-inserted below: the later one wins and takes its place in the order
            state.resources.pop(ref, None)
        state.objects[ref] = obj
        state.application_of[ref] = application
        if resource is not None:
            state.resources[ref] = resource
    return state
