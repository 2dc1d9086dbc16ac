"""From rendered applications to the objects a KfDef's stack must hold.

:func:`desire` is the whole way, shared by the reconciler and ``kfdef-operator diff`` (so a diff shows what
the operator would apply): API versions the cluster no longer serves upgraded, then :func:`build_desired`.

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kfdef_operator.api.kfdef import KfDef
from kfdef_operator.api.names import DIGEST_ANNOTATION
from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.changeset import Action, Change
from kfdef_operator.ssa.claims import Ownership
from kfdef_operator.ssa.discovery import Discovery, Resource, provider_of
from kfdef_operator.ssa.inventory import ObjectRef, ref_of, split_api_version
from kfdef_operator.ssa.normalize import normalize
from kfdef_operator.upgrade.convert import UpgradeResult, upgrade_objects

#: Why a run-once object that completed and was removed is not created again.
RUN_ONCE_GONE = ("ran before with this content and was removed (ttlSecondsAfterFinished); created again only when "
                 "its spec changes")


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
            scopes[(f"{spec.get('group')}/{version.get('name')}", kind)] = spec.get("scope",
                                                                                    "Namespaced") == "Namespaced"
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


def desire(kfdef: KfDef, objects: list[tuple[str, JSON]], discovery: Discovery, *, policy: str,
           namespaces: frozenset[str] = frozenset()) -> tuple[DesiredState, UpgradeResult]:
    """The desired state of a KfDef's rendered ``(application, object)`` pairs, and the API-version upgrades made.

    One upgrade call for the whole KfDef: custom resources count as served when their CRD is in the stack.
    Objects of unserved versions that cannot be converted are rejected. Raises ``UnservedApiVersions`` when
    ``policy`` is ``off`` and some are unserved, ValueError for an unknown policy.
    """
    upgraded = upgrade_objects([obj for _, obj in objects], discovery.serves, policy=policy)
    desired = build_desired(((objects[index][0], obj) for index, obj in zip(upgraded.origin, upgraded.objects,
                                                                             strict=True)),
                            discovery, default_namespace=kfdef.namespace, namespaces=namespaces)
    desired.rejected.extend(
        Change(ObjectRef(split_api_version(u.api_version)[0], u.kind, u.namespace or "", u.name), Action.FAILED,
               _unserved_message(u.api_version, u.reason)) for u in upgraded.unserved)
    return desired, upgraded


def _unserved_message(api_version: str, reason: str) -> str:
    """Why an object of an unserved version is not applied: what usually serves its group when the operator knows
    (a distribution's OpenShift or OLM kinds), else why it was not converted."""
    group = split_api_version(api_version)[0]
    provider = provider_of(group)
    if provider is not None:
        return f"{api_version} is not served by this cluster: the API group {group} is usually provided by {provider}"
    return f"{api_version} is not served by this cluster and cannot be converted: {reason}"


def is_run_once(obj: JSON) -> bool:
    """Objects meant to go away once done, never to be re-created: Jobs with ``ttlSecondsAfterFinished``."""
    return (obj.get("kind") == "Job" and split_api_version(obj.get("apiVersion", ""))[0] == "batch"
            and (obj.get("spec") or {}).get("ttlSecondsAfterFinished") is not None)


def applied_digest(owner: Ownership, desired: DesiredState, ref: ObjectRef) -> str:
    """The digest the owner stamps on ``ref`` when it creates it (what a run-once object is remembered by)."""
    resource = desired.resources.get(ref)
    stamped = owner.stamp(desired.objects[ref], namespaced=resource.namespaced if resource else True, adopted=False)
    return str(stamped["metadata"]["annotations"][DIGEST_ANNOTATION])


def kept_absent(owner: Ownership, desired: DesiredState, ran: Mapping[ObjectRef, str | None]) -> dict[ObjectRef, str]:
    """Run-once objects not to create again, with the reason: those that ``ran`` (digest applied, from the
    inventory) with this very content."""
    return {ref: RUN_ONCE_GONE for ref, obj in desired.objects.items()
            if is_run_once(obj) and ran.get(ref) is not None and ran[ref] == applied_digest(owner, desired, ref)}
