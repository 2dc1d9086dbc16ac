"""The operator's core: one KfDef in, its whole stack applied, healed and reported.

:class:`Operator` owns the shared parts (API client, discovery, tracker,
apply engine, healer) and the in-memory desired state of each KfDef. That
state is a cache: everything needed to rebuild it lives in the API server
(the KfDef, its status inventory, the stamps on objects) and the sources, so
a restart converges to the same result.

Pipeline per reconcile: parse -> sources -> render -> upgrade -> staged apply
-> prune -> status. Failures become conditions and events; transient ones
are retried with backoff by raising :class:`Retry`.
"""

from __future__ import annotations

import asyncio
import logging
from fnmatch import fnmatch
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfdef_operator.ssa import inventory

from kfdef_operator.runtime import metrics

from kfdef_operator.runtime import conditions as st
from kfdef_operator.ssa.manager import CONFLICT, FAILED, UNCHANGED, ApplyEngine, Outcome
from kfdef_operator.ssa.discovery import Discovery, Resource
from kfdef_operator.runtime.events import EventRecorder
from kfdef_operator.runtime.heal import Healer
from kfdef_operator.ssa.inventory import ObjectRef, ref_of
from kfdef_operator.ssa.client import KubeApiError, KubeClient
from kfdef_operator.api.kfdef import InvalidKfDef, KfDef, parse_kfdef
from kfdef_operator.runtime.ownership import Owner, normalize, stamp
from kfdef_operator.build.render import RenderError, render
from kfdef_operator.build.cache import RenderCache
from kfdef_operator.build.kustomize import KustomizeError
from kfdef_operator.source.resolve import FetchOptions, SourceCache, SourceError, resolve_sources
from kfdef_operator.runtime.tracker import LiveObject, Tracker
from kfdef_operator.upgrade.convert import UnservedApiVersions, upgrade_objects

log = logging.getLogger(__name__)

JSON = dict[str, Any]
KFDEF_PATH = "/apis/kfdef.apps.kubeflow.org/v1/namespaces/{namespace}/kfdefs/{name}"
API_UPGRADE_ANNOTATION = "kfdef.apps.kubeflow.org/api-upgrade"


class Retry(Exception):
    """Reconcile again after ``delay`` seconds (transient failure or unfinished work)."""

    def __init__(self, message: str, delay: float) -> None:
        super().__init__(message)
        self.delay = delay


@dataclass
class Stack:
    """What one KfDef wants, as last rendered."""

    owner: Owner
    generation: int
    desired: dict[ObjectRef, JSON] = field(default_factory=dict)        # normalised, namespace defaulted
    resources: dict[ObjectRef, Resource] = field(default_factory=dict)
    application_of: dict[ObjectRef, str] = field(default_factory=dict)
    applications: list[str] = field(default_factory=list)
    outcomes: dict[ObjectRef, Outcome] = field(default_factory=dict)
    rejected: list[Outcome] = field(default_factory=list)                # not convertible to a served version
    problems: dict[str, str] = field(default_factory=dict)               # heal fights etc., by object
    status: JSON = field(default_factory=dict)                          # last status known to be in the API server
    applied_at: float = 0.0
    deleting: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.owner.namespace, self.owner.name


def _kfdef_path(owner: Owner) -> str:
    return KFDEF_PATH.format(namespace=owner.namespace, name=owner.name)


def _identity(obj: JSON) -> tuple[str, str, str]:
    """What an API-version upgrade keeps: kind, namespace and name."""
    meta = obj.get("metadata") or {}
    return obj.get("kind", ""), meta.get("namespace") or "", meta.get("name", "")


def _backoff(attempt: int, base: float = 5.0, cap: float = 600.0) -> float:
    return min(base * 2 ** max(attempt, 0), cap)


class Operator:
    """Shared state of a running operator; kopf handlers call into it."""

    def __init__(self, kube: KubeClient, *, work_dir: Path, fetch_options: FetchOptions | None = None,
                 api_upgrade_default: str = "auto", concurrency: int = 24, health_timeout: float = 300.0,
                 namespaces: tuple[str, ...] = ()) -> None:
        self.kube = kube
        self.work_dir = work_dir
        self.fetch_options = fetch_options or FetchOptions.from_env()
        self.source_cache = SourceCache(work_dir / "sources")
        self.render_cache = RenderCache(work_dir / "rendered", render)
        self.api_upgrade_default = api_upgrade_default
        self.health_timeout = health_timeout
        self.namespaces = frozenset(namespaces)  # a namespace-scoped operator touches only these (and cluster scope)
        self.discovery = Discovery(kube)
        self.tracker = Tracker(kube, self._on_event)
        self.engine = ApplyEngine(kube, self.discovery, self.tracker, concurrency=concurrency)
        self.events = EventRecorder(kube)
        self.healer = Healer(self)
        self.stacks: dict[tuple[str, str], Stack] = {}
        self._by_label: dict[str, tuple[str, str]] = {}
        self._readiness_pending: set[tuple[str, str]] = set()
        self._readiness_task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.discovery.refresh()

    async def stop(self) -> None:
        await self.healer.stop()
        if self._readiness_task:
            self._readiness_task.cancel()
        await self.tracker.close()

    # -- status ----------------------------------------------------------------------

    async def write_status(self, stack: Stack, changes: JSON) -> None:
        """Merge-patch the status subresource with the fields that differ from the last known status."""
        diff = {}
        for key, value in changes.items():
            old = stack.status.get(key)
            same = st.conditions_equal(old or [], value) if key == "conditions" else old == value
            if not same:
                diff[key] = value
        if not diff:
            return
        try:
            await self.kube.request("PATCH", _kfdef_path(stack.owner) + "/status", body={"status": diff},
                                    content_type="application/merge-patch+json")
        except KubeApiError as error:
            if error.status == 404:  # the KfDef is gone
                return
            raise
        stack.status.update(diff)
        for condition in stack.status.get("conditions") or []:
            metrics.CONDITION.set(stack.owner.namespace, stack.owner.name, condition["type"],
                                  value=1.0 if condition["status"] == "True" else 0.0)

    async def set_verdict(self, stack: Stack, verdict: st.Verdict, **fields: Any) -> None:
        conditions = verdict.apply_to(list(stack.status.get("conditions") or []), stack.generation)
        await self.write_status(stack, {"conditions": conditions, "observedGeneration": stack.generation, **fields})

    # -- reconcile -------------------------------------------------------------------

    def _stack_for(self, body: JSON) -> Stack:
        meta = body["metadata"]
        owner = Owner(meta["name"], meta["namespace"], meta.get("uid", ""))
        stack = self.stacks.get((owner.namespace, owner.name))
        if stack is None or stack.owner.uid != owner.uid:
            stack = Stack(owner=owner, generation=meta.get("generation", 0))
            self.stacks[(owner.namespace, owner.name)] = stack
            self._by_label[owner.label] = stack.key
        stack.generation = meta.get("generation", 0)
        stack.status = dict(body.get("status") or {})
        return stack

    async def reconcile(self, body: JSON, *, attempt: int = 0) -> None:
        """Bring the cluster to what the KfDef says. Raises :class:`Retry` for transient trouble."""
        started = time.monotonic()
        stack = self._stack_for(body)
        result = "error"
        try:
            await self._reconcile(stack, body, attempt)
            result = "success"
        finally:
            metrics.RECONCILE_SECONDS.observe(time.monotonic() - started, result)

    async def _reconcile(self, stack: Stack, body: JSON, attempt: int) -> None:
        owner = stack.owner
        new_generation = stack.status.get("observedGeneration") != stack.generation

        async def progress(step: str, message: str) -> None:
            # Progress is shown while a new generation is worked on; re-reconciling an unchanged KfDef
            # (an operator restart, a retry) writes nothing but what ends up different.
            if new_generation:
                await self.set_verdict(stack, st.progressing(step, message))

        try:
            kfdef = parse_kfdef(body)
        except InvalidKfDef as error:
            await self._fail(stack, "InvalidSpec", str(error), retry=False)
            return
        await progress("FetchingSources", f"fetching {len(kfdef.repos)} source(s)")
        try:
            sources = await asyncio.to_thread(resolve_sources, kfdef.repos, self.source_cache, self.fetch_options)
        except SourceError as error:
            await self._fail(stack, "SourceFailed", str(error), retry=True, attempt=attempt)
            return
        await progress("Rendering", f"rendering {len(kfdef.applications)} application(s)")
        workdir = self.work_dir / "render" / owner.namespace / owner.name
        try:
            rendered = await asyncio.to_thread(self.render_cache.render, body, kfdef, sources, workdir)
        except (RenderError, KustomizeError) as error:
            await self._fail(stack, "RenderFailed", str(error), retry=True, attempt=attempt, base=30.0)
            return
        objects = [(app.name, obj) for app in rendered for obj in app.objects]
        policy = (body["metadata"].get("annotations") or {}).get(API_UPGRADE_ANNOTATION, self.api_upgrade_default)
        try:
            # One call for the whole KfDef: custom resources count as served when their CRD is in the stack.
            upgraded = upgrade_objects([obj for _, obj in objects], self.discovery.serves, policy=policy)
        except UnservedApiVersions as error:
            await self._fail(stack, "UnservedApiVersions", str(error), retry=False)
            return
        except ValueError as error:
            await self._fail(stack, "InvalidSpec", f"{API_UPGRADE_ANNOTATION}: {error}", retry=False)
            return
        application_of = {_identity(obj): app for app, obj in objects}
        objects = [(application_of.get(_identity(obj), ""), obj) for obj in upgraded.objects]
        stack.rejected = [
            Outcome(ObjectRef(inventory.split_api_version(u.api_version)[0], u.kind, u.namespace or "", u.name),
                    FAILED, f"{u.api_version} is not served by this cluster and cannot be converted: {u.reason}")
            for u in upgraded.unserved]
        resolved, later, duplicates = await self._desired(stack, kfdef, objects)
        stack.problems.pop("render", None)
        if duplicates:
            stack.problems["render"] = f"rendered twice (last wins): {st.list_objects(duplicates)}"

        await self._record_intent(stack)
        await self.tracker.watch({r for _, r in resolved})

        async def apply_progress(stage: str, applied: int, total: int) -> None:
            await progress("Applying", f"applied {applied}/{total} objects (stage {stage})")

        outcomes = await self.engine.apply_all(owner, resolved, later, owner.namespace, progress=apply_progress)
        stack.applied_at = time.monotonic()
        # Past the health deadline, unhealthy objects turn into Degraded: one timer, no polling.
        asyncio.get_running_loop().call_later(self.health_timeout + 1, self._schedule_readiness, stack.key)
        stack.outcomes = {o.ref: o for o in outcomes}
        for outcome in outcomes:
            if outcome.action not in (UNCHANGED,):
                metrics.OBJECTS_APPLIED.inc(outcome.action)
            if outcome.action == FAILED:
                metrics.APPLY_ERRORS.inc(outcome.ref.kind)
        for outcome in outcomes:  # custom resources resolved during the apply
            if outcome.ref not in stack.resources and outcome.live is not None:
                stack.resources[outcome.ref] = await self.discovery.resource(outcome.live["apiVersion"], outcome.ref.kind)
        await self.tracker.watch(set(stack.resources.values()))
        self.healer.applied(stack)

        previous = inventory.decode((stack.status.get("inventory") or {}).get("entries"))
        stale = inventory.stale(previous, stack.desired)
        pruned = await self.engine.prune(owner, stale) if stale else []
        if pruned:
            await self.tracker.retain({r for s in self.stacks.values() for r in s.resources.values()})
        await self._finish(stack, kfdef, sources, upgraded, pruned)
        failures = [o for o in [*stack.rejected, *outcomes] if o.action in (FAILED, CONFLICT)]
        changed = [o for o in outcomes if o.action not in (UNCHANGED, FAILED, CONFLICT)]
        if changed or pruned:
            await self.events.record(body, "Normal", "Applied",
                                     f"applied {len(changed)} changed object(s), {len(outcomes) - len(changed) - len(failures)} "
                                     f"unchanged, pruned {sum(1 for p in pruned if p[1] == 'deleted')}")
        if upgraded.upgraded and (changed or new_generation):
            await self.events.record(body, "Normal", "ApiVersionsUpgraded", upgraded.summary())
        if failures:
            await self.events.record(body, "Warning", "ApplyFailed", self._failure_message(failures))
            raise Retry(f"{len(failures)} object(s) not applied", _backoff(attempt, base=10.0))

    async def _record_intent(self, stack: Stack) -> None:
        """Add the objects about to be applied for the first time to the inventory, before applying them.

        If the operator dies mid-apply and the KfDef is deleted before it comes back, the teardown still
        knows every object that may exist. Entries that were never created read as gone; objects held by
        someone else are skipped by prune and teardown (they check the claim), so a wider inventory is safe.
        """
        previous = inventory.decode((stack.status.get("inventory") or {}).get("entries"))
        new = [ref for ref in stack.desired if ref not in previous]
        if not new:
            return
        entries = [{"id": ref.id, "v": version} for ref, version in previous.items()]
        entries += [{"id": ref.id, "v": inventory.version_of(stack.desired[ref])} for ref in new]
        await self.write_status(stack, {"inventory": {"entries": entries}})

    @staticmethod
    def _failure_message(failures: list[Outcome]) -> str:
        return st.truncate(f"{len(failures)} object(s) not applied: " + "; ".join(
            f"{o.ref}: {o.message}" for o in failures[:5]))

    async def _fail(self, stack: Stack, reason: str, message: str, *, retry: bool, attempt: int = 0,
                    base: float = 5.0) -> None:
        log.warning("KfDef %s/%s: %s: %s", stack.owner.namespace, stack.owner.name, reason, message)
        await self.set_verdict(stack, st.failed(reason, message, retrying=retry))
        await self.events.record_for(stack.owner, "Warning", reason, message)
        if retry:
            raise Retry(message, _backoff(attempt, base=base))

    async def _desired(self, stack: Stack, kfdef: KfDef, objects: list[tuple[str, JSON]]
                       ) -> tuple[list[tuple[JSON, Resource]], list[JSON], list[str]]:
        """Normalise rendered objects, default namespaces and resolve kinds.

        Returns (resolved objects, custom resources whose CRD is applied by
        this stack and not served yet, duplicated objects).
        """
        stack.desired, stack.resources, stack.application_of = {}, {}, {}
        stack.applications = [app.name for app in kfdef.applications]
        crd_scopes = {}
        for _, obj in objects:
            if obj.get("kind") == "CustomResourceDefinition":
                spec = obj.get("spec") or {}
                for version in spec.get("versions") or [{"name": spec.get("version")}]:
                    crd_scopes[(f"{spec.get('group')}/{version.get('name')}", (spec.get("names") or {}).get("kind"))] = \
                        spec.get("scope", "Namespaced") == "Namespaced"
        resolved: dict[ObjectRef, tuple[JSON, Resource]] = {}
        later: dict[ObjectRef, JSON] = {}
        duplicates = []
        for app, raw in objects:
            obj = normalize(raw)
            resource = self.discovery.cached(obj.get("apiVersion", ""), obj.get("kind", ""))
            meta = obj["metadata"]
            if resource is not None:
                if resource.namespaced and not meta.get("namespace"):
                    meta["namespace"] = kfdef.namespace
                elif not resource.namespaced:
                    meta.pop("namespace", None)
            else:
                namespaced = crd_scopes.get((obj.get("apiVersion"), obj.get("kind")), True)
                if namespaced and not meta.get("namespace"):
                    meta["namespace"] = kfdef.namespace
            ref = ref_of(obj)
            if self.namespaces and ref.namespace and not any(fnmatch(ref.namespace, p) for p in self.namespaces):
                stack.rejected.append(Outcome(ref, FAILED, f"namespace {ref.namespace} is outside this operator's "
                                              f"scope ({', '.join(sorted(self.namespaces))}); not applied"))
                continue
            if ref in stack.desired:
                duplicates.append(str(ref))
                resolved.pop(ref, None)
                later.pop(ref, None)
            stack.desired[ref] = obj
            stack.application_of[ref] = app
            if resource is not None:
                stack.resources[ref] = resource
                resolved[ref] = (obj, resource)
            else:
                later[ref] = obj
        return list(resolved.values()), list(later.values()), duplicates

    # -- final status ----------------------------------------------------------------

    def readiness(self, stack: Stack) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """(failures, unhealthy) of a stack, from apply outcomes and the tracker's live health."""
        failures = [(str(o.ref), o.message) for o in stack.rejected]
        unhealthy = []
        for ref in stack.desired:
            outcome = stack.outcomes.get(ref)
            if outcome is not None and not outcome.ok:
                failures.append((str(ref), outcome.message))
                continue
            live = self.tracker.get(ref)
            if live is None:
                if self.tracker.is_watched(ref.group, ref.kind):
                    unhealthy.append((str(ref), "missing"))
            elif not live.health.ready:
                unhealthy.append((str(ref), live.health.message))
        return failures, unhealthy

    def _summary(self, stack: Stack) -> tuple[JSON, list[JSON]]:
        per_app = {name: {"name": name, "total": 0, "applied": 0, "ready": 0, "failed": 0} for name in stack.applications}
        for ref, app in stack.application_of.items():
            row = per_app.setdefault(app, {"name": app, "total": 0, "applied": 0, "ready": 0, "failed": 0})
            row["total"] += 1
            outcome = stack.outcomes.get(ref)
            if outcome is not None and outcome.ok:
                row["applied"] += 1
                live = self.tracker.get(ref)
                if live is not None and live.health.ready:
                    row["ready"] += 1
            elif outcome is not None:
                row["failed"] += 1
        rows = list(per_app.values())
        summary = {key: sum(r[key] for r in rows) for key in ("total", "applied", "ready", "failed")}
        summary["total"] += len(stack.rejected)
        summary["failed"] += len(stack.rejected)
        return summary, rows

    def verdict(self, stack: Stack) -> st.Verdict:
        failures, unhealthy = self.readiness(stack)
        overdue = bool(stack.applied_at) and time.monotonic() - stack.applied_at > self.health_timeout
        return st.applied(len(stack.desired) + len(stack.rejected), failures, unhealthy,
                          list(stack.problems.values()), health_overdue=overdue)

    async def _finish(self, stack: Stack, kfdef: KfDef, sources: dict, upgraded, pruned: list) -> None:
        kept = [ref for ref in stack.desired if stack.outcomes.get(ref) is None or stack.outcomes[ref].action != CONFLICT]
        # Objects whose prune failed stay in the inventory, so a later reconcile or the teardown retries them.
        kept += [ref for ref, result, _ in pruned if result == "failed"]
        previous = inventory.decode((stack.status.get("inventory") or {}).get("entries"))
        entries = [{"id": ref.id, "v": inventory.version_of(stack.desired[ref]) if ref in stack.desired
                    else previous.get(ref, "v1")} for ref in kept]
        summary, rows = self._summary(stack)
        summary["upgraded"] = len(upgraded.upgraded)
        failures = [{"object": str(o.ref), "message": st.truncate(o.message, 512)}
                    for o in [*stack.rejected, *stack.outcomes.values()] if not o.ok][: st.MAX_FAILURES_LISTED]
        fields = {
            "summary": summary, "applications": rows, "failures": failures,
            "inventory": {"entries": entries},
            "sources": [{"name": s.name, "uri": s.uri, "revision": s.revision} for s in sources.values()],
            "reposCache": [{"name": s.name, "localPath": str(s.local_path)} for s in sources.values()],
            "upgrades": {"count": len(upgraded.upgraded), "kinds": sorted({u.kind for u in upgraded.upgraded})},
        }
        await self.set_verdict(stack, self.verdict(stack), **fields)

    async def refresh_readiness(self, key: tuple[str, str]) -> None:
        """Re-evaluate a stack's conditions from live health (debounced by the caller)."""
        stack = self.stacks.get(key)
        if stack is None or stack.deleting or not stack.outcomes:
            return
        summary, rows = self._summary(stack)
        summary["upgraded"] = (stack.status.get("summary") or {}).get("upgraded", 0)
        before = next((c for c in stack.status.get("conditions") or [] if c["type"] == st.READY), {})
        await self.set_verdict(stack, self.verdict(stack), summary=summary, applications=rows)
        after = next((c for c in stack.status.get("conditions") or [] if c["type"] == st.READY), {})
        if after.get("status") == "True" and before.get("status") != "True":
            await self.events.record_for(stack.owner, "Normal", "Ready", after.get("message", "ready"))

    def _schedule_readiness(self, key: tuple[str, str]) -> None:
        self._readiness_pending.add(key)
        if self._readiness_task is None or self._readiness_task.done():
            self._readiness_task = asyncio.create_task(self._readiness_loop())

    async def _readiness_loop(self) -> None:
        while self._readiness_pending:
            await asyncio.sleep(0.2)  # coalesce bursts of status events into one status write
            pending, self._readiness_pending = self._readiness_pending, set()
            for key in pending:
                try:
                    await self.refresh_readiness(key)
                except Exception:
                    log.exception("status refresh of KfDef %s/%s failed", *key)

    # -- events from the tracker -------------------------------------------------------

    def stack_of_label(self, label: str | None) -> Stack | None:
        key = self._by_label.get(label or "")
        return self.stacks.get(key) if key else None

    def _on_event(self, event_type: str, ref: ObjectRef, live: LiveObject, obj: JSON | None) -> None:
        stack = self.stack_of_label(live.instance_label)
        if stack is None or stack.deleting or ref not in stack.desired:
            return
        self.healer.observe(stack, event_type, ref, live, obj)
        if stack.outcomes:
            self._schedule_readiness(stack.key)

    def desired_stamped(self, stack: Stack, ref: ObjectRef, *, adopted: bool) -> JSON:
        resource = stack.resources.get(ref)
        return stamp(stack.desired[ref], stack.owner, namespaced=resource.namespaced if resource else True,
                     adopted=adopted)

    # -- teardown --------------------------------------------------------------------

    async def teardown(self, body: JSON, *, attempt: int = 0) -> None:
        """Delete everything the KfDef created (in reverse dependency order), keep what it adopted.

        Raises :class:`Retry` while objects remain; the finalizer stays until the
        inventory is empty, so nothing is ever orphaned.
        """
        stack = self._stack_for(body)
        stack.deleting = True
        await self.healer.forget(stack)
        entries = inventory.decode((stack.status.get("inventory") or {}).get("entries"))
        if not entries:
            await self._forget(stack)
            return
        await self.set_verdict(stack, st.terminating(f"deleting {len(entries)} objects", stuck=False))

        async def teardown_progress(_: str, done: int, total: int) -> None:
            if done < total:
                await self.set_verdict(stack, st.terminating(f"deleted {done}/{total} objects", stuck=False))

        result = await self.engine.teardown(stack.owner, entries, progress=teardown_progress,
                                            wave_timeout=float(os.environ.get("KFDEF_TEARDOWN_WAVE_TIMEOUT") or 60.0))
        if result.done:
            await self.events.record(body, "Normal", "Deleted",
                                     f"deleted {result.deleted} objects, released {result.released} that existed before")
            await self._forget(stack)
            return
        remaining = {ref for ref, _ in result.remaining}
        message = f"{len(remaining)} object(s) not deleted yet: " + st.list_objects(
            f"{ref} ({why})" for ref, why in result.remaining)
        await self.set_verdict(stack, st.terminating(message, stuck=True),
                               inventory={"entries": [{"id": r.id, "v": v} for r, v in entries.items() if r in remaining]})
        await self.events.record(body, "Warning", "TeardownStuck", message)
        raise Retry(message, _backoff(attempt, base=5.0, cap=120.0))

    async def _forget(self, stack: Stack) -> None:
        self.stacks.pop(stack.key, None)
        self._by_label.pop(stack.owner.label, None)
        # Watches of kinds no remaining KfDef holds are closed: at rest, only needed watches stay open.
        await self.tracker.retain({r for s in self.stacks.values() for r in s.resources.values()})
        for condition_type in (st.READY, st.RECONCILING, st.DEGRADED):
            metrics.CONDITION.remove(stack.owner.namespace, stack.owner.name, condition_type)
