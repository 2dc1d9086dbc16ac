"""What is known of objects before they are applied: their live metadata, from the watch cache or the API server.

:class:`LiveLookup` answers for many objects at once with one metadata-only LIST per kind and namespace, asking
for objects one by one only when the identity may not list their kind.
"""

from __future__ import annotations

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.access import METADATA_ONLY, ONE_METADATA_ONLY, ApiAccess
from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.ssa.inventory import ObjectRef

#: What a lookup knows of one object: its live metadata, None when absent, or why it could not be read.
Known = JSON | None | KubeApiError


class LiveLookup:
    """Live metadata of objects: the watch cache first, then the API server."""

    def __init__(self, access: ApiAccess) -> None:
        self.access = access

    def _cached_meta(self, ref: ObjectRef) -> JSON | None:
        if self.access.live is None:
            return None
        tracked = self.access.live.get(ref)
        return tracked.meta if tracked is not None else None

    async def lookup(self, refs: list[tuple[ObjectRef, Resource]]) -> dict[ObjectRef, Known]:
        """Live metadata of objects the cache cannot answer for: one metadata-only LIST per kind and namespace.

        Every ref looked up is in the result: its metadata, None when absent,
        or the refusal when the client's identity may neither list nor get it.
        An identity that may not list a kind is asked for each object alone
        (it may hold ``get`` on named objects only).
        """
        wanted: dict[tuple[Resource, str], set[str]] = {}
        for ref, resource in refs:
            if self._cached_meta(ref) is None:
                wanted.setdefault((resource, ref.namespace), set()).add(ref.name)

        async def list_group(resource: Resource, namespace: str, names: set[str]) -> list[tuple[ObjectRef, Known]]:
            try:
                listing = await self.access.kube.request("GET", resource.collection_path(namespace or None),
                                                         accept=METADATA_ONLY)
            except KubeApiError as error:
                if error.status == 404:  # a namespace or CRD that does not exist yet: nothing lives there
                    return []
                if error.status != 403:
                    raise
                return [(ref, await self._read_meta(ref, resource)) for ref in
                        (ObjectRef(resource.group, resource.kind, namespace, name) for name in sorted(names))]
            found: list[tuple[ObjectRef, Known]] = []
            for item in listing.get("items") or []:
                meta = item.get("metadata") or {}
                found.append((ObjectRef(resource.group, resource.kind, meta.get("namespace") or "",
                                        meta.get("name", "")), meta))
            return found

        live: dict[ObjectRef, Known] = {}
        for result in await self.access.gather([list_group(r, ns, names) for (r, ns), names in wanted.items()]):
            if isinstance(result, BaseException):
                raise result
            live.update(result)
        for ref, _ in refs:
            live.setdefault(ref, self._cached_meta(ref))
        return live

    async def _read_meta(self, ref: ObjectRef, resource: Resource) -> Known:
        try:
            found = await self.access.kube.get(resource.path_of(ref), accept=ONE_METADATA_ONLY)
        except KubeApiError as error:
            if error.status == 403:
                return error
            raise
        return (found or {}).get("metadata") if found is not None else None
