"""Prune's data guard: what a Namespace or a CRD an owner no longer applies still holds that the owner did not create.

Deleting a Namespace deletes everything in it, and deleting a CRD every object of its kinds. When a new release of
a stack drops one of them while it holds a user's objects (a notebook in a team's namespace, an experiment of a
kind the release no longer defines), pruning it would delete what the stack never created. So before prune
deletes a Namespace or a CRD of the owner's, :class:`DataGuard` lists what it holds; objects that count as
someone else's data keep it (:meth:`Removal.prune <kfdef_operator.ssa.teardown.Removal.prune>` then releases it
instead, unless forced).

An object held counts as someone else's data when the owner did not create it (its claim is not
:attr:`~kfdef_operator.ssa.claims.Claim.OURS`) and nothing owns it (no ``ownerReferences``: a Pod of a ReplicaSet
goes with its owner, and the owner is what counts), unless the control plane makes it in every namespace or for
every Service by itself (:func:`user_objects`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.access import METADATA_ONLY, ApiAccess
from kfdef_operator.ssa.claims import Claim, Ownership
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.ssa.inventory import ObjectRef

#: Objects per listing request.
_PAGE = 500
#: How many held objects a note names.
_NAMED = 3
#: Kinds whose objects the control plane and controllers write all the time, never a user's data.
_CONTROL_PLANE_KINDS = frozenset({("", "Event"), ("events.k8s.io", "Event"), ("coordination.k8s.io", "Lease"),
                                  ("", "Endpoints"), ("discovery.k8s.io", "EndpointSlice")})
#: Objects kube-controller-manager puts in every namespace: (group, kind, name).
_NAMESPACE_DEFAULTS = frozenset({("", "ServiceAccount", "default"), ("", "ConfigMap", "kube-root-ca.crt")})


@dataclass(frozen=True)
class Holdings:
    """The objects a Namespace or CRD holds that are someone else's: how many, and the first few by name."""

    count: int
    first: tuple[str, ...]

    def __str__(self) -> str:
        more = " ..." if self.count > len(self.first) else ""
        noun = "object" if self.count == 1 else "objects"
        return f"{self.count} {noun} the stack did not create ({', '.join(self.first)}{more})"


def user_objects(items: Iterable[JSON], resource: Resource, ownership: Ownership) -> list[str]:
    """The names (``Kind namespace/name``) of the listed objects of ``resource`` that are someone else's data."""
    if (resource.group, resource.kind) in _CONTROL_PLANE_KINDS:
        return []
    found = []
    for item in items:
        meta = item.get("metadata") or {}
        if meta.get("ownerReferences") or (resource.group, resource.kind, meta.get("name")) in _NAMESPACE_DEFAULTS:
            continue
        if ownership.claim(meta) is not Claim.OURS:
            where = f"{meta['namespace']}/" if meta.get("namespace") else ""
            found.append(f"{resource.kind} {where}{meta.get('name')}")
    return found


#: How every note of :func:`held_note` begins.
HELD = "no longer rendered, but holds "


def held_note(holdings: Holdings) -> str:
    """Why prune kept a Namespace or CRD, and what a person can do."""
    return (f"{HELD}{holdings}: released from the stack and kept; delete those objects, or set spec.force: true, "
            "to let the stack delete it")


def is_held_note(text: str) -> bool:
    """Whether a status warning is the note of an object prune held (``<object>: <held_note>``)."""
    return f": {HELD}" in text


class DataGuard:
    """Lists what a Namespace or CRD holds, through ``access``."""

    def __init__(self, access: ApiAccess) -> None:
        self.access = access

    async def holdings(self, ownership: Ownership, ref: ObjectRef) -> Holdings | None:
        """What ``ref`` (a Namespace or a CRD) holds that is someone else's; None when nothing is, or when ``ref``
        is neither."""
        if ref.group == "" and ref.kind == "Namespace":
            resources = await self.access.discovery.namespaced_listable()
            namespace: str | None = ref.name
        elif ref.group == "apiextensions.k8s.io" and ref.kind == "CustomResourceDefinition":
            served = self.access.discovery.served_by_crd(ref.name)
            if served is None:
                await self.access.discovery.refresh()
                served = self.access.discovery.served_by_crd(ref.name)
            resources, namespace = ([served] if served is not None else []), None
        else:
            return None
        found: list[str] = []
        for names in await self.access.gather([self._user_objects(r, namespace, ownership) for r in resources]):
            if isinstance(names, BaseException):
                raise names
            found.extend(names)
        return Holdings(len(found), tuple(found[:_NAMED])) if found else None

    async def _user_objects(self, resource: Resource, namespace: str | None, ownership: Ownership) -> list[str]:
        found: list[str] = []
        params = {"limit": str(_PAGE)}
        while True:
            page = await self.access.kube.request("GET", resource.collection_path(namespace), params=params,
                                                  accept=METADATA_ONLY)
            found.extend(user_objects(page.get("items") or [], resource, ownership))
            next_page = (page.get("metadata") or {}).get("continue")
            if not next_page:
                return found
            params["continue"] = next_page
