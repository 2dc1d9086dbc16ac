"""Staged server-side apply, prune and teardown of one KfDef's objects.

Apply, per stage (see :mod:`ordering`), with bounded concurrency:

- an object whose live copy carries this KfDef's stamps and the digest of the
  desired object is left alone: re-reconciling an unchanged KfDef writes
  nothing;
- an object held by another KfDef is a conflict: reported, never touched;
- an object that exists without any KfDef's stamp is adopted: applied, and
  released rather than deleted later;
- everything else is server-side applied with ``force`` (this operator is a
  controller: the fields it declares are its own; fields it does not declare
  stay with whoever set them);
- an apply refused because an immutable field changed is retried as delete and
  re-create when that is safe for the kind (or the object is annotated
  ``kfdef.apps.kubeflow.org/recreate: "true"``), else reported;
- after the prerequisites stage, every CRD must be Established before custom
  resources are applied (no "run it twice").

An object that fails is reported in its :class:`Outcome`; the rest still land.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from kfdef_operator.ssa import ordering
from kfdef_operator.ssa.discovery import Discovery, Resource, UnknownKind
from kfdef_operator.ssa.health import State
from kfdef_operator.ssa.inventory import ObjectRef, ref_of
from kfdef_operator.ssa.client import KubeApiError, KubeClient
from kfdef_operator.runtime.ownership import (DIGEST_ANNOTATION, FIELD_MANAGER, INSTANCE_ANNOTATION, RECREATE_ANNOTATION, Claim, Owner, claim_of, release_patch, stamp)
from kfdef_operator.ssa.schema import prune_custom_resource, version_schema
from kfdef_operator.runtime.tracker import Tracker

log = logging.getLogger(__name__)

JSON = dict[str, Any]
Progress = Callable[[str, int, int], Awaitable[None]]

CREATED, CONFIGURED, UNCHANGED, ADOPTED = "created", "configured", "unchanged", "adopted"
CONFLICT, FAILED = "conflict", "failed"
APPLIED_ACTIONS = frozenset({CREATED, CONFIGURED, UNCHANGED, ADOPTED})

# Kinds that may be deleted and re-created when an immutable field changes:
# they hold no data and their consumers recover (pods are rolled, bindings re-read).
RECREATE_SAFE_KINDS = frozenset({
    "Deployment", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Service", "ConfigMap", "Secret",
    "RoleBinding", "ClusterRoleBinding", "PodDisruptionBudget", "Ingress", "NetworkPolicy",
})
_METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


@dataclass
class Outcome:
    """What happened to one object."""

    ref: ObjectRef
    action: str
    message: str = ""
    live: JSON | None = None

    @property
    def ok(self) -> bool:
        return self.action in APPLIED_ACTIONS


@dataclass
class TeardownResult:
    deleted: int = 0
    released: int = 0
    remaining: list[tuple[ObjectRef, str]] = field(default_factory=list)  # (object, why it is still there)

    @property
    def done(self) -> bool:
        return not self.remaining


def describe_api_error(error: KubeApiError) -> str:
    """One line a person on call can act on."""
    causes = "; ".join(f"{c.get('field', '')}: {c.get('message', '')}".strip(": ") for c in error.causes[:3])
    return f"{error.status} {error.reason or ''}: {error.message}{f' ({causes})' if causes and causes not in error.message else ''}".strip()


def _is_immutable_error(error: KubeApiError) -> bool:
    text = error.message.lower()
    return error.status in (409, 422) and ("immutable" in text or "cannot change" in text or "may not change" in text)


class ApplyEngine:
    """Applies, prunes and tears down objects for KfDefs through one client."""

    def __init__(self, kube: KubeClient, discovery: Discovery, tracker: Tracker | None = None, *,
                 concurrency: int = 24, crd_timeout: float = 120.0) -> None:
        self.kube = kube
        self.discovery = discovery
        self.tracker = tracker
        self.concurrency = concurrency
        self.crd_timeout = crd_timeout

    # -- lookups -------------------------------------------------------------------

    async def _prefetch(self, items: list[tuple[ObjectRef, Resource]]) -> dict[ObjectRef, JSON | None]:
        """Live metadata of objects the tracker cannot answer for: one metadata-only LIST per kind and namespace."""
        wanted: dict[tuple[Resource, str], set[str]] = {}
        for ref, resource in items:
            if self.tracker is not None and self.tracker.get(ref) is not None:
                continue
            wanted.setdefault((resource, ref.namespace), set()).add(ref.name)

        async def list_group(resource: Resource, namespace: str) -> list[tuple[ObjectRef, JSON]]:
            try:
                listing = await self.kube.request("GET", resource.collection_path(namespace or None),
                                                  accept=_METADATA_ONLY)
            except KubeApiError as error:
                if error.status == 404:  # a namespace or CRD that does not exist yet: nothing lives there
                    return []
                raise
            found = []
            for item in listing.get("items") or []:
                meta = item.get("metadata") or {}
                found.append((ObjectRef(resource.group, resource.kind, meta.get("namespace") or "",
                                        meta.get("name", "")), meta))
            return found

        results = await self.kube.gather_limited([list_group(r, ns) for (r, ns) in wanted], self.concurrency)
        live: dict[ObjectRef, JSON | None] = {}
        for result in results:
            if isinstance(result, BaseException):
                raise result
            live.update(result)
        for ref, _ in items:  # looked up and not found: absent (None), which callers tell from "not looked up"
            if self.tracker is None or self.tracker.get(ref) is None:
                live.setdefault(ref, None)
        return live

    def _live_meta(self, ref: ObjectRef, prefetched: dict[ObjectRef, JSON | None]) -> JSON | None:
        if self.tracker is not None:
            tracked = self.tracker.get(ref)
            if tracked is not None:
                return tracked.meta
        return prefetched.get(ref)

    # -- apply ---------------------------------------------------------------------

    async def resolve(self, obj: JSON, default_namespace: str) -> tuple[JSON, Resource]:
        """The served resource of an object, with its namespace defaulted or dropped as the scope requires."""
        resource = await self.discovery.resource(obj["apiVersion"], obj["kind"])
        meta = obj.setdefault("metadata", {})
        if resource.namespaced and not meta.get("namespace"):
            meta["namespace"] = default_namespace
        elif not resource.namespaced:
            meta.pop("namespace", None)
        return obj, resource

    async def apply_one(self, owner: Owner, obj: JSON, resource: Resource, live_meta: JSON | None,
                        *, force_write: bool = False) -> Outcome:
        """Apply one normalised object for ``owner`` given what is known of its live copy."""
        ref = ref_of(obj)
        claim = claim_of(live_meta, owner)
        if claim is Claim.FOREIGN:
            holder = (live_meta.get("annotations") or {}).get(INSTANCE_ANNOTATION, "another KfDef")
            return Outcome(ref, CONFLICT, f"already managed by KfDef {holder}; not applied")
        desired = stamp(obj, owner, namespaced=resource.namespaced, adopted=claim in (Claim.UNCLAIMED, Claim.ADOPTED))
        if (not force_write and claim in (Claim.OURS, Claim.ADOPTED)
                and (live_meta.get("annotations") or {}).get(DIGEST_ANNOTATION)
                == desired["metadata"]["annotations"][DIGEST_ANNOTATION]
                and not live_meta.get("deletionTimestamp")):
            return Outcome(ref, UNCHANGED)
        try:
            live, created, dropped = await self.server_side_apply(ref, desired, resource)
        except KubeApiError as error:
            if _is_immutable_error(error):
                return await self._recreate(ref, desired, resource, error)
            return Outcome(ref, FAILED, describe_api_error(error))
        action = CREATED if created else (ADOPTED if claim is Claim.UNCLAIMED else CONFIGURED)
        note = f"fields not in the CRD's schema were dropped: {', '.join(dropped[:5])}" if dropped else ""
        return Outcome(ref, action, note, live=live)

    async def server_side_apply(self, ref: ObjectRef, desired: JSON, resource: Resource, *,
                                dry_run: bool = False) -> tuple[JSON, bool, list[str]]:
        """Apply ``desired``; returns (live object, created, fields dropped).

        A custom resource with fields its CRD's structural schema does not
        declare is refused by server-side apply, while ``kubectl create`` or a
        client-side apply would have had them silently pruned. Such an object
        is pruned against the schema the way the server prunes, and applied
        again.
        """
        path = resource.path_of(ref)
        try:
            live, created = await self.kube.apply(path, desired, field_manager=FIELD_MANAGER, dry_run=dry_run)
            return live, created, []
        except KubeApiError as error:
            if "not declared in schema" not in error.message or not ordering.is_custom_group(ref.group):
                raise
            crd = await self.kube.get(
                f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{resource.plural}.{resource.group}")
            pruned, dropped = prune_custom_resource(desired, version_schema(crd or {}, resource.version))
            if not dropped:
                raise
            log.info("%s: dropping fields its CRD does not declare: %s", ref, ", ".join(dropped))
            live, created = await self.kube.apply(path, pruned, field_manager=FIELD_MANAGER, dry_run=dry_run)
            return live, created, dropped

    async def _recreate(self, ref: ObjectRef, desired: JSON, resource: Resource, error: KubeApiError) -> Outcome:
        allowed = (desired["metadata"].get("annotations") or {}).get(RECREATE_ANNOTATION)
        if allowed != "true" and (allowed == "false" or ref.kind not in RECREATE_SAFE_KINDS):
            return Outcome(ref, FAILED, f"{describe_api_error(error)}; an immutable field changed and {ref.kind} is "
                           f"not re-created automatically: delete it, or annotate it {RECREATE_ANNOTATION}=\"true\"")
        path = resource.path_of(ref)
        log.info("re-creating %s: an immutable field changed", ref)
        try:
            await self.kube.request("DELETE", path, body={"propagationPolicy": "Background"})
        except KubeApiError as delete_error:
            if delete_error.status != 404:
                return Outcome(ref, FAILED, f"re-create: delete failed: {describe_api_error(delete_error)}")
        gone = await self._wait_gone(ref, resource.version, timeout=60)
        if gone is not True:
            return Outcome(ref, FAILED, f"re-create: the old object is {gone}; it will be applied once it is gone")
        try:
            live, _ = await self.kube.apply(path, desired, field_manager=FIELD_MANAGER)
        except KubeApiError as apply_error:
            return Outcome(ref, FAILED, f"re-create: apply failed: {describe_api_error(apply_error)}")
        return Outcome(ref, CREATED, "re-created: an immutable field changed", live=live)

    async def apply_stage(self, owner: Owner, items: list[tuple[JSON, Resource]],
                          prefetched: dict[ObjectRef, JSON | None] | None = None) -> list[Outcome]:
        """Apply objects of one stage concurrently; they are started in kind order.

        ``prefetched`` holds live metadata looked up earlier; objects it does not
        cover are looked up now.
        """
        prefetched = dict(prefetched or {})
        missing = [(ref_of(obj), resource) for obj, resource in items if ref_of(obj) not in prefetched]
        prefetched.update(await self._prefetch(missing))
        coroutines = [self.apply_one(owner, obj, resource, self._live_meta(ref_of(obj), prefetched))
                      for obj, resource in items]
        results = await self.kube.gather_limited(coroutines, self.concurrency)
        outcomes = []
        for (obj, _), result in zip(items, results):
            if isinstance(result, BaseException):
                outcomes.append(Outcome(ref_of(obj), FAILED, f"{type(result).__name__}: {result}"))
            else:
                outcomes.append(result)
        return outcomes

    async def apply_all(self, owner: Owner, objects: list[tuple[JSON, Resource]],
                        resolve_later: list[JSON], default_namespace: str,
                        progress: Progress | None = None) -> list[Outcome]:
        """Apply a whole stack in stages.

        ``objects`` are resolved already; ``resolve_later`` are objects whose
        kind is not served yet (custom resources of CRDs in this stack): they
        are resolved once the stack's CRDs are Established.
        """
        stages = ordering.group_by_stage(objects, lambda item: item[0]["kind"])
        total = len(objects) + len(resolve_later)
        outcomes: list[Outcome] = []
        # The later stages' live objects are looked up while the CRDs get Established, not after.
        later_items = [(ref_of(obj), resource) for stage in ordering.STAGES[1:] for obj, resource in stages[stage]]
        lookup = asyncio.create_task(self._prefetch(later_items))
        try:
            for stage in ordering.STAGES:
                items = stages[stage]
                if stage == ordering.RESOURCES and resolve_later:
                    for obj in resolve_later:
                        try:
                            items.append(await self.resolve(obj, default_namespace))
                        except UnknownKind as error:
                            outcomes.append(Outcome(ref_of(obj), FAILED, str(error)))
                    items.sort(key=lambda item: ordering.install_rank(item[0]["kind"]))
                if not items:
                    continue
                prefetched = None if stage == ordering.PREREQUISITES else await lookup
                outcomes.extend(await self.apply_stage(owner, items, prefetched))
                if stage == ordering.PREREQUISITES:
                    outcomes = await self._settle_crds(outcomes)
                if progress is not None:
                    await progress(stage, sum(1 for o in outcomes if o.ok), total)
        finally:
            if not lookup.done():
                lookup.cancel()
            await asyncio.gather(lookup, return_exceptions=True)
        return outcomes

    # -- CRDs ----------------------------------------------------------------------

    async def _settle_crds(self, outcomes: list[Outcome]) -> list[Outcome]:
        """Wait until every applied CRD is Established; mark those that never are as failed."""
        crds = [o for o in outcomes if o.ok and o.ref.kind == "CustomResourceDefinition"]
        results = await self.kube.gather_limited([self.wait_established(o) for o in crds], self.concurrency)
        for outcome, result in zip(crds, results):
            if isinstance(result, BaseException):
                outcome.action, outcome.message = FAILED, f"not Established: {result}"
        return outcomes

    async def wait_established(self, outcome: Outcome) -> None:
        """Wait for one CRD's Established condition, then register its kinds with discovery.

        When the tracker watches CRDs (the operator does), the wait reads its
        cache, which the watch keeps current: no request at all. Otherwise the
        CRD is polled.
        """
        deadline = time.monotonic() + self.crd_timeout
        if self.tracker is not None and self.tracker.is_watched("apiextensions.k8s.io", "CustomResourceDefinition"):
            while True:
                live = self.tracker.get(outcome.ref)
                if live is not None and live.health.state is State.FAILED:
                    raise RuntimeError(live.health.message)
                if live is not None and live.health.ready:
                    if outcome.live is not None:  # an unchanged CRD's kinds are in discovery already
                        self.discovery.register_crd(outcome.live)
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"still not Established after {self.crd_timeout:.0f}s")
                await asyncio.sleep(0.01)
        crd = outcome.live
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{outcome.ref.name}"
        delay = 0.02
        while True:
            conditions = {c.get("type"): c for c in ((crd or {}).get("status") or {}).get("conditions") or []}
            if conditions.get("Established", {}).get("status") == "True":
                self.discovery.register_crd(crd)
                return
            names = conditions.get("NamesAccepted")
            if names and names.get("status") == "False":
                raise RuntimeError(f"names not accepted: {names.get('message')}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"still not Established after {self.crd_timeout:.0f}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)
            crd = await self.kube.get(path)

    # -- deletion ------------------------------------------------------------------

    async def _remove(self, owner: Owner, ref: ObjectRef, version: str) -> tuple[str, str]:
        """Delete one object this KfDef created, or release one it adopted.

        Returns (``deleted``|``released``|``gone``|``skipped``|``failed``, detail).
        """
        try:
            resource = await self.discovery.resource_for_ref(ref, version)
        except UnknownKind:
            return "gone", "kind no longer served"
        path = resource.path_of(ref)
        live = await self.kube.get(path)
        if live is None:
            return "gone", ""
        claim = claim_of(live.get("metadata"), owner)
        if claim is Claim.ADOPTED:
            await self.kube.request("PATCH", path, body=release_patch(), content_type="application/merge-patch+json")
            return "released", "existed before this KfDef; kept"
        if claim is not Claim.OURS:
            return "skipped", f"not owned by this KfDef ({claim.value}); kept"
        if live["metadata"].get("deletionTimestamp"):
            return "deleted", ""
        await self.kube.request("DELETE", path, body={"propagationPolicy": "Background"})
        return "deleted", ""

    async def prune(self, owner: Owner, stale: dict[ObjectRef, str]) -> list[tuple[ObjectRef, str, str]]:
        """Remove objects the KfDef no longer renders; returns (object, result, detail) per object."""
        refs = list(stale.items())
        waves = ordering.teardown_waves(refs, lambda item: item[0].kind,
                                        is_custom=lambda item: ordering.is_custom_group(item[0].group))
        results: list[tuple[ObjectRef, str, str]] = []
        for wave in waves:
            answers = await self.kube.gather_limited([self._remove(owner, r, v) for r, v in wave], self.concurrency)
            for (ref, _), answer in zip(wave, answers):
                if isinstance(answer, BaseException):
                    detail = describe_api_error(answer) if isinstance(answer, KubeApiError) else str(answer)
                    results.append((ref, "failed", detail))
                else:
                    results.append((ref, *answer))
        return results

    async def teardown(self, owner: Owner, inventory: dict[ObjectRef, str], *, wave_timeout: float = 60.0,
                       progress: Progress | None = None) -> TeardownResult:
        """Delete (or release) everything in the inventory, wave by wave, waiting until each wave is gone."""
        result = TeardownResult()
        waves = ordering.teardown_waves(list(inventory.items()), lambda item: item[0].kind,
                                        is_custom=lambda item: ordering.is_custom_group(item[0].group))
        done = 0
        for wave in waves:
            answers = await self.kube.gather_limited([self._remove(owner, r, v) for r, v in wave], self.concurrency)
            pending: list[tuple[ObjectRef, str]] = []
            for (ref, version), answer in zip(wave, answers):
                if isinstance(answer, BaseException):
                    message = describe_api_error(answer) if isinstance(answer, KubeApiError) else str(answer)
                    result.remaining.append((ref, f"delete failed: {message}"))
                elif answer[0] == "deleted":
                    pending.append((ref, version))
                elif answer[0] == "released":
                    result.released += 1
            gone = await self.kube.gather_limited(
                [self._wait_gone(ref, version, wave_timeout) for ref, version in pending], self.concurrency)
            for (ref, _), answer in zip(pending, gone):
                if answer is True:
                    result.deleted += 1
                else:
                    result.remaining.append((ref, answer if isinstance(answer, str) else f"still there: {answer}"))
            done += len(wave)
            if progress is not None:
                await progress("teardown", done, len(inventory))
        return result

    async def _wait_gone(self, ref: ObjectRef, version: str, timeout: float) -> bool | str:
        """True once the object is gone; else why it is still there (finalizers) after ``timeout``.

        Objects of watched kinds are awaited on the tracker's cache (no requests);
        others are polled.
        """
        resource = await self.discovery.resource_for_ref(ref, version)
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            if self.tracker is not None and self.tracker.is_watched(ref.group, ref.kind):
                if self.tracker.get(ref) is None:
                    return True
            elif await self.kube.get(resource.path_of(ref)) is None:
                return True
            if time.monotonic() > deadline:
                live = await self.kube.get(resource.path_of(ref))
                if live is None:
                    return True
                finalizers = (live.get("metadata") or {}).get("finalizers") or []
                blocked = f"; finalizers: {', '.join(finalizers)}" if finalizers else ""
                if ref.kind == "Namespace":  # what keeps a namespace Terminating is in its conditions
                    blocked += "".join(f"; {c.get('message')}" for c in (live.get("status") or {}).get("conditions") or []
                                       if c.get("status") == "True" and c.get("message"))
                return f"still terminating after {timeout:.0f}s{blocked}"
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
