"""Which kinds the API server serves, and under which resource paths.

Uses aggregated discovery (``apidiscovery.k8s.io/v2``): two requests
(``/api`` and ``/apis``) describe every group, version and resource. The
mapping is refreshed when a kind is missing (at most once per second), and
kinds of CRDs the operator just established are registered straight from the
CRD, without a refresh.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.inventory import ObjectRef

_AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
_MIN_REFRESH_INTERVAL_S = 1.0


#: Who usually serves an API group that distribution trees use and plain clusters lack (suffix match).
_PROVIDERS = {
    ".openshift.io": "OpenShift itself (its own API server serves it; this cluster is not OpenShift)",
    "operators.coreos.com": "the Operator Lifecycle Manager (OLM): install OLM on the cluster first",
    "monitoring.coreos.com": "the Prometheus Operator: install it (or kube-prometheus) first",
    "cert-manager.io": "cert-manager: install it first",
    "istio.io": "Istio: install it first",
    "knative.dev": "Knative: install it first",
}


def provider_of(group: str) -> str | None:
    """What usually serves ``group`` (``route.openshift.io``: OpenShift), or None when the operator does not know."""
    for suffix, provider in _PROVIDERS.items():
        if group == suffix.lstrip(".") or group.endswith(suffix if suffix.startswith(".") else "." + suffix):
            return provider
    return None


class UnknownKind(LookupError):
    """The API server serves no resource for this apiVersion and kind."""

    def __init__(self, api_version: str, kind: str) -> None:
        group = api_version.rpartition("/")[0]
        provider = provider_of(group)
        hint = (f"the API group {group} is usually provided by {provider}" if provider
                else "is its CRD installed?")
        super().__init__(f"the API server does not serve {kind} in {api_version} ({hint})")
        self.api_version = api_version
        self.kind = kind


@dataclass(frozen=True)
class Resource:
    """A served resource: enough to build request paths."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def collection_path(self, namespace: str | None = None) -> str:
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{prefix}/namespaces/{namespace}/{self.plural}"
        return f"{prefix}/{self.plural}"

    def object_path(self, name: str, namespace: str | None = None) -> str:
        return f"{self.collection_path(namespace)}/{name}"

    def path_of(self, ref: ObjectRef) -> str:
        return self.object_path(ref.name, ref.namespace or None)


class Discovery:
    """A cached map of (apiVersion, kind) to :class:`Resource`."""

    def __init__(self, kube: KubeClient) -> None:
        self._kube = kube
        self._resources: dict[tuple[str, str], Resource] = {}
        self._preferred: dict[tuple[str, str], str] = {}  # (group, kind) -> preferred version
        self._namespaced_listable: list[Resource] = []  # at their preferred versions
        self._refreshed_at = 0.0
        self._checked_at = 0.0  # the last refresh_unless_served
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        resources: dict[tuple[str, str], Resource] = {}
        preferred: dict[tuple[str, str], str] = {}
        listable: list[Resource] = []
        seen: set[tuple[str, str]] = set()
        for path in ("/api", "/apis"):
            document = await self._kube.request("GET", path, accept=_AGGREGATED)
            for group_doc in document.get("items") or []:
                group = (group_doc.get("metadata") or {}).get("name", "")
                for index, version_doc in enumerate(group_doc.get("versions") or []):
                    version = version_doc["version"]
                    for res in version_doc.get("resources") or []:
                        kind = (res.get("responseKind") or {}).get("kind")
                        if not kind:
                            continue
                        api_version = f"{group}/{version}" if group else version
                        resource = Resource(group, version, kind, res["resource"], res.get("scope") == "Namespaced")
                        resources[(api_version, kind)] = resource
                        if index == 0:  # versions are listed in preference order
                            preferred.setdefault((group, kind), version)
                        if resource.namespaced and "list" in (res.get("verbs") or []) and (group, kind) not in seen:
                            seen.add((group, kind))  # its first version listed: the preferred one having it
                            listable.append(resource)
        self._resources, self._preferred, self._namespaced_listable = resources, preferred, listable
        self._refreshed_at = time.monotonic()

    async def namespaced_listable(self) -> list[Resource]:
        """Every namespaced kind that can be listed, at its preferred version, as the API server serves them now (a
        fresh discovery: what a namespace may hold)."""
        await self.refresh()
        return list(self._namespaced_listable)

    def cached(self, api_version: str, kind: str) -> Resource | None:
        return self._resources.get((api_version, kind))

    def served_by_crd(self, crd_name: str) -> Resource | None:
        """The resource a CRD named ``<plural>.<group>`` serves as far as the cache knows, in its preferred
        version."""
        plural, _, group = crd_name.partition(".")
        matches = [r for r in self._resources.values() if r.group == group and r.plural == plural]
        if not matches:
            return None
        preferred = self._preferred.get((group, matches[0].kind))
        return next((r for r in matches if r.version == preferred), matches[0])

    async def resource(self, api_version: str, kind: str) -> Resource:
        """The resource serving this kind, refreshing discovery once on a miss."""
        found = self._resources.get((api_version, kind))
        if found is not None:
            return found
        async with self._lock:
            found = self._resources.get((api_version, kind))
            if found is None:
                wait = _MIN_REFRESH_INTERVAL_S - (time.monotonic() - self._refreshed_at)
                if wait > 0:
                    await asyncio.sleep(wait)
                await self.refresh()
                found = self._resources.get((api_version, kind))
        if found is None:
            raise UnknownKind(api_version, kind)
        return found

    async def refresh_unless_served(self, kinds: Iterable[tuple[str, str]]) -> None:
        """Refresh when one of these (apiVersion, kind) pairs is not served as far as the cache knows: a CRD that
        someone else installed since may serve it now. At most once a second, and never waiting for that: a caller
        within the second uses the cache (its next retry refreshes), so reconciles of many KfDefs never queue here,
        and the lookups of an apply (:meth:`resource`) keep their own pace."""
        if all(pair in self._resources for pair in kinds) or self._lock.locked():
            return
        if time.monotonic() - self._checked_at < _MIN_REFRESH_INTERVAL_S:
            return
        async with self._lock:
            self._checked_at = time.monotonic()
            await self.refresh()

    async def resource_for_ref(self, ref: ObjectRef, version: str) -> Resource:
        """Resource of an inventory entry; falls back to the preferred version if that one is gone."""
        api_version = f"{ref.group}/{version}" if ref.group else version
        try:
            return await self.resource(api_version, ref.kind)
        except UnknownKind:
            preferred = self._preferred.get((ref.group, ref.kind))
            if preferred is None:
                raise
            return await self.resource(f"{ref.group}/{preferred}" if ref.group else preferred, ref.kind)

    def unknown_versions(self, crd: JSON) -> list[Resource]:
        """The kinds of the CRD's served versions that this cache does not know yet."""
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        kind = names.get("kind", "")
        return [Resource(spec.get("group", ""), version["name"], kind, names.get("plural", ""),
                         spec.get("scope") == "Namespaced")
                for version in spec.get("versions") or []
                if version.get("served") and (f"{spec.get('group')}/{version['name']}", kind) not in self._resources]

    def register_crd(self, crd: JSON) -> None:
        """Record the kinds an Established CRD serves (saves a discovery refresh)."""
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        for version in spec.get("versions") or []:
            if version.get("served"):
                key = (f"{spec['group']}/{version['name']}", names.get("kind", ""))
                self._resources[key] = Resource(spec["group"], version["name"], names.get("kind", ""),
                                                names.get("plural", ""), spec.get("scope") == "Namespaced")
                if version.get("storage"):
                    self._preferred[(spec["group"], names.get("kind", ""))] = version["name"]

    def serves(self, api_version: str, kind: str) -> bool:
        return (api_version, kind) in self._resources
