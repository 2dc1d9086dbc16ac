"""The operator's core: one KfDef in, its whole stack applied, healed, reported and torn down.

:class:`Reconciler` owns the shared parts (API client, discovery, tracker,
resource manager, healer) and one :class:`~kfdef_operator.runtime.stack.Stack`
and :class:`~kfdef_operator.runtime.status.StatusWriter` per KfDef. KfDef
watch events only *request* work (:meth:`observe`); a :class:`WorkQueue` runs
it, one run at a time per KfDef, so a new generation preempts a pending retry
and nothing waits behind kopf's handler progress.

Pipeline per run: parse -> fetch -> render -> upgrade -> desired state ->
staged apply -> prune -> status, then the next run is due after a retry
backoff (failures) or the resync interval (success). Every step reports into
the stack; every exception becomes a condition and an Event.

With a ``gate`` (leader election), only the leader works; a standby runs
:meth:`Reconciler._prepare` instead, the pipeline up to the desired state and
the watches of its kinds, writing nothing, so that it takes over warm.
:meth:`Reconciler.take_over` and :meth:`Reconciler.step_down` switch between
the two.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kfdef_operator.api.kfdef import InvalidKfDef, KfDef, parse_kfdef, service_account_name
from kfdef_operator.api.names import (
    API_UPGRADE_ANNOTATION,
    FINALIZER,
    REQUESTED_AT_ANNOTATION,
    SUSPEND_ANNOTATION,
    kfdef_path,
)
from kfdef_operator.api.types import JSON
from kfdef_operator.build.cache import RenderCache
from kfdef_operator.build.isolated import IsolatedRender
from kfdef_operator.build.kustomize import KustomizeError
from kfdef_operator.build.render import RenderedApplication, RenderError
from kfdef_operator.build.workspace import render_dir
from kfdef_operator.controller.desired import DesiredState, applied_digest, desire, is_run_once, kept_absent
from kfdef_operator.controller.heartbeat import Liveness
from kfdef_operator.controller.housekeeping import Housekeeper, source_user
from kfdef_operator.controller.queue import WorkQueue
from kfdef_operator.controller.workpool import WorkPool
from kfdef_operator.runtime import conditions as cond
from kfdef_operator.runtime import metrics
from kfdef_operator.runtime.events import EventRecorder
from kfdef_operator.runtime.heal import Healer
from kfdef_operator.runtime.identity import Identities, StackIdentity
from kfdef_operator.runtime.memory import release_free_memory
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import Failure, InventoryEntry, Stack, decode_inventory
from kfdef_operator.runtime.status import StatusWriter
from kfdef_operator.runtime.tracker import Tracker, WatchTarget, instance_label
from kfdef_operator.source.cache import SourceCache
from kfdef_operator.source.errors import SourceError
from kfdef_operator.source.options import CacheLimits, FetchOptions
from kfdef_operator.source.resolve import resolve_sources
from kfdef_operator.ssa.changeset import Action, ChangeSet
from kfdef_operator.ssa.client import KubeApiError, KubeClient, describe_api_error
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.inventory import ObjectRef, version_of
from kfdef_operator.ssa.live import LiveObject
from kfdef_operator.ssa.manager import FORGED_STAMP_NOTE, ApplyOptions, ResourceManager
from kfdef_operator.ssa.webhooks import webhooks_of
from kfdef_operator.upgrade.convert import UnservedApiVersions

log = logging.getLogger(__name__)

#: Added by the API server when a KfDef is deleted with propagationPolicy Orphan (kubectl --cascade=orphan).
ORPHAN_FINALIZER = "orphan"

Key = tuple[str, str]


@dataclass(frozen=True)
class Settings:
    """Operator-wide settings (``kfdef-operator run`` flags)."""

    work_dir: Path
    fetch_options: FetchOptions = field(default_factory=FetchOptions.from_env)
    api_upgrade_default: str = "auto"
    concurrency: int = 24                 # objects applied in parallel per KfDef
    health_timeout: float = 300.0         # unhealthy this long after an apply: Degraded
    interval: float = 600.0               # default resync interval (spec.interval overrides)
    namespaces: frozenset[str] = frozenset()  # a namespace-scoped operator holds objects only there
    work_threads: int = 4                 # fetches and renders in parallel, across KfDefs
    renderer: IsolatedRender = field(default_factory=IsolatedRender)  # each render in a limited child process
    teardown_wave_timeout: float = 60.0
    #: The ServiceAccount (in its own namespace) a KfDef without spec.serviceAccountName acts as; "" for the
    #: operator's own identity (Flux's --default-service-account).
    default_service_account: str = ""


class Fail(Exception):
    """A step's failure as it should appear in status: reason, message, and whether a retry can help."""

    def __init__(self, reason: str, message: str, *, retry: bool, base: float = 5.0) -> None:
        super().__init__(message)
        self.failure = Failure(reason, message, retry)
        self.base = base


def backoff(attempt: int, base: float = 5.0, cap: float = 600.0) -> float:
    """Seconds before retry ``attempt`` (0-based): ``base`` doubling up to ``cap``."""
    return min(base * 2.0 ** min(max(attempt, 0), 32), cap)


def _kinds_served_elsewhere(rendered: Iterable[RenderedApplication]) -> set[tuple[str, str]]:
    """The (apiVersion, kind) pairs of the rendered objects that no CRD among them defines: if the cluster serves
    them, something else installed their API (the stack's own custom resources wait for their CRDs instead)."""
    objects = [obj for app in rendered for obj in app.objects]
    own = {(crd.get("spec", {}).get("group"), (crd.get("spec", {}).get("names") or {}).get("kind"))
           for crd in objects if crd.get("kind") == "CustomResourceDefinition" and isinstance(crd.get("spec"), dict)}
    return {(str(obj.get("apiVersion", "")), str(obj.get("kind", ""))) for obj in objects
            if (str(obj.get("apiVersion", "")).rpartition("/")[0], obj.get("kind")) not in own}


def jittered(seconds: float, fraction: float = 0.1) -> float:
    """``seconds`` ± ``fraction``, so resyncs of many KfDefs spread out."""
    return seconds * (1.0 + random.uniform(-fraction, fraction))


def explain(error: BaseException) -> Failure:
    """An unexpected exception as a condition a person can act on."""
    if isinstance(error, KubeApiError):
        if error.status == 403:
            return Failure("Forbidden", f"the API server refused {error.method} {error.path}: {error.message}; the "
                                        "operator's identity lacks this permission (see docs/deployment.md, RBAC)",
                           retrying=True)
        return Failure("ApiError", f"{error.method} {error.path}: {describe_api_error(error)}", retrying=True)
    if isinstance(error, asyncio.TimeoutError):
        return Failure("Timeout", "timed out waiting for the API server (a watch did not sync, or a request hung); "
                                  "retrying", retrying=True)
    return Failure("ReconcileError", f"{type(error).__name__}: {error}", retrying=True)


class Reconciler:
    """Shared state of a running operator; kopf handlers call :meth:`observe`."""

    def __init__(self, kube: KubeClient, settings: Settings, *, gate: asyncio.Event | None = None) -> None:
        """``gate``: set while this replica leads (None: always leads, no leader election)."""
        self.kube = kube
        self.settings = settings
        self.source_cache = SourceCache(settings.work_dir / "sources", CacheLimits.from_env())
        # A KfDef never reads the operator's work directory (other KfDefs' sources and renders) as a source.
        self.fetch_options = replace(settings.fetch_options, private_dirs=(settings.work_dir,))
        self.render_cache = RenderCache(settings.work_dir / "rendered", settings.renderer, settings.renderer.settings)
        self.discovery = Discovery(kube)
        self.tracker = Tracker(kube, self._on_object_event)
        self.identities = Identities(kube, self.discovery, self.tracker, concurrency=settings.concurrency,
                                     default_service_account=settings.default_service_account)
        self.events = EventRecorder(kube)
        self.stacks: dict[Key, Stack] = {}
        self.writers: dict[Key, StatusWriter] = {}
        self.healer = Healer(self.manager_for, self.tracker, self.events, self.stacks, self.refresh)
        self._gate = gate
        self.queue = WorkQueue(self._work, gate=gate, standby=self._prepare if gate is not None else None)
        self._verified: set[Key] = set()  # KfDefs read afresh since this replica began leading
        self.work_pool = WorkPool(settings.work_threads)  # fetch and render, off the event loop's default executor
        metrics.watch_work_pool(lambda: self.work_pool.running, lambda: self.work_pool.waiting)
        self.liveness = Liveness(self.work_pool)
        self.housekeeper = Housekeeper(settings.work_dir, self.source_cache, self.render_cache, self.work_pool,
                                       live=lambda: set(self.stacks))
        self._bodies: dict[Key, JSON] = {}
        self._triggers: dict[Key, tuple[Any, ...]] = {}
        self._attempts: dict[Key, int] = {}
        self._by_label: dict[str, Key] = {}
        self._refresh_pending: set[Key] = set()
        self._refresh_task: asyncio.Task[None] | None = None
        self._timers: set[asyncio.TimerHandle] = set()

    async def start(self) -> None:
        await self.discovery.refresh()
        self.liveness.start()
        self.housekeeper.start()

    def ready(self) -> bool:
        """Readiness: discovery is loaded, so KfDefs can be worked on."""
        return self.discovery.cached("v1", "Namespace") is not None

    def alive(self) -> bool:
        """Liveness: the event loop and its threads make progress (controller/heartbeat.py)."""
        return self.liveness.alive()

    def leading(self) -> bool:
        return self._gate is None or self._gate.is_set()

    # -- leadership ----------------------------------------------------------------------

    def take_over(self) -> None:
        """This replica leads now: run every KfDef at once, each first read afresh (the last leader wrote last)."""
        assert self._gate is not None
        self._verified.clear()
        self._gate.set()
        for key in list(self._bodies):
            self.queue.request(key)

    def step_down(self) -> None:
        """This replica no longer leads: stop every write at once (synchronously), then keep caches warm.

        Stacks built while leading hold results another leader will change; they are dropped and built again
        as standby stacks.
        """
        assert self._gate is not None
        self._gate.clear()
        self.queue.interrupt()
        self.healer.halt()
        if self._refresh_task is not None:
            self._refresh_task.cancel()
        self._refresh_pending.clear()
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        for writer in self.writers.values():
            writer.forget()
        self.stacks.clear()
        self.writers.clear()
        self._by_label.clear()
        self._attempts.clear()
        for key in list(self._bodies):
            self.queue.request(key)

    async def stop(self) -> None:
        await self.queue.stop()
        await self.healer.stop()
        if self._refresh_task is not None:
            self._refresh_task.cancel()
        for timer in self._timers:
            timer.cancel()
        await self.tracker.close()
        await self.housekeeper.stop()
        await self.liveness.stop()
        self.work_pool.shutdown()

    # -- KfDef events ------------------------------------------------------------------

    def observe(self, event_type: str | None, body: JSON) -> None:
        """A KfDef watch event: keep its latest body; request a run when something that matters changed.

        Status writes (our own) and other metadata churn change nothing that matters, so they cause no run.
        """
        meta = body.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if event_type == "DELETED":  # deleted, or no longer selected (moved to another shard): stop at once
            log.info("KfDef %s/%s is no longer served here (deleted, or no longer selected by this instance)", *key)
            self._release(key)
            self._bodies.pop(key, None)
            self._triggers.pop(key, None)
            self.queue.interrupt(key)
            self.queue.request(key)
            return
        self._bodies[key] = body
        annotations = meta.get("annotations") or {}
        trigger = (meta.get("uid"), meta.get("generation"), bool(meta.get("deletionTimestamp")),
                   annotations.get(SUSPEND_ANNOTATION), annotations.get(API_UPGRADE_ANNOTATION),
                   annotations.get(REQUESTED_AT_ANNOTATION))
        if self._triggers.get(key) != trigger:
            self._triggers[key] = trigger
            self.queue.request(key)

    async def _work(self, key: Hashable) -> float | None:
        assert isinstance(key, tuple)
        if self._gate is not None and key not in self._verified:
            await self._read_afresh(key)
        body = self._bodies.get(key)
        if body is None:
            await self._forget(key)
            return None
        started = time.monotonic()
        deleting = bool(body["metadata"].get("deletionTimestamp"))
        stack = self._stack_for(body)
        try:
            delay = await (self._teardown(stack, body) if deleting else self._reconcile(stack, body))
        except Exception as error:  # every error becomes a condition and an Event, then a retry
            delay = await self._failed(stack, error)
        failed = stack.failure or stack.failed_changes() or (stack.teardown and stack.teardown[1])
        result = "error" if failed else "success"
        metrics.RECONCILE_SECONDS.labels(result).observe(time.monotonic() - started)
        release_free_memory()  # what the run decoded is freed: hand its pages back
        return delay

    def manager_for(self, stack: Stack) -> ResourceManager | None:
        """The resource manager acting as the stack's identity (None before its first reconcile or teardown)."""
        return self.identities.manager(stack.identity) if stack.identity is not None else None

    async def _settle_identity(self, stack: Stack, service_account: str) -> StackIdentity:
        """Who the stack acts as from now on; :class:`Fail` when that ServiceAccount does not exist."""
        stack.identity = self.identities.of(stack.owner.namespace, service_account)
        missing = await self.identities.unavailable(stack.identity)
        if missing is not None:
            raise Fail("ServiceAccountNotFound", f"{missing}: create it, or set spec.serviceAccountName to an "
                                                 "existing ServiceAccount of this namespace; nothing is applied "
                                                 "meanwhile", retry=True, base=10.0)
        return stack.identity

    async def _read_afresh(self, key: Key) -> None:
        """The first run since this replica began leading reads its KfDef, status included, from the API server.

        The previous leader may have written after the last watch event arrived here; its inventory and status
        are the base of everything this replica writes.
        """
        try:
            body = await self.kube.get(kfdef_path(*key))
        except (KubeApiError, OSError, TimeoutError) as error:
            log.warning("KfDef %s/%s: could not read it afresh (using the watched copy): %s", *key, error)
            return
        self._verified.add(key)
        if key not in self._bodies:
            return  # deleted, or no longer selected by this replica, meanwhile
        if body is None:
            self._bodies.pop(key)
            return
        self._bodies[key] = body
        stack = self.stacks.get(key)
        if stack is not None and stack.owner.uid == body["metadata"].get("uid"):
            stack.reload(body.get("status") or {})

    async def _prepare(self, key: Hashable) -> None:
        """A standby's run: what a reconcile reads and builds, nothing it writes (no status, event, finalizer).

        Sources are fetched, applications rendered (into the render cache), the desired state is built and the
        watches of its kinds are started, so that heals can be decided the moment this replica leads and its
        first reconcile only confirms the live state. Drift seen meanwhile is noted by the healer and checked
        after that reconcile. Problems are the leader's to report: they are only logged here.
        """
        assert isinstance(key, tuple)
        body = self._bodies.get(key)
        if body is None:
            await self._forget(key)
            return
        if body["metadata"].get("deletionTimestamp"):
            return
        stack = self._stack_for(body)
        try:
            kfdef = parse_kfdef(body)
            stack.suspended = kfdef.annotations.get(SUSPEND_ANNOTATION, "").lower() == "true"
            await self._build(stack, kfdef, body, _quietly)
            await self.tracker.watch(self._targets([stack]))
            log.info("%s: prepared as a standby: %d objects desired, their kinds watched", stack.owner,
                     len(stack.desired))
        except (Fail, InvalidKfDef) as error:
            log.debug("%s: standby preparation stopped: %s", stack.owner, error)
        except Exception as error:  # noqa: BLE001 (the leader reports it; a standby only logs)
            log.info("%s: standby preparation failed: %s", stack.owner, error or type(error).__name__)

    def _stack_for(self, body: JSON) -> Stack:
        meta = body["metadata"]
        owner = Owner(meta["name"], meta["namespace"], meta.get("uid", ""))
        stack = self.stacks.get(owner.key)
        if stack is None or stack.owner.uid != owner.uid:
            status = dict(body.get("status") or {})
            stack = Stack(owner=owner, generation=meta.get("generation", 0), status=status,
                          inventory=decode_inventory(status))
            self.stacks[owner.key] = stack
            self.writers[owner.key] = StatusWriter(self.kube, stack, self.tracker, self.events,
                                                   health_timeout=self.settings.health_timeout)
            self._by_label[owner.label] = owner.key
            self._attempts.pop(owner.key, None)
        return stack

    async def _failed(self, stack: Stack, error: BaseException) -> float | None:
        failure = error.failure if isinstance(error, Fail) else explain(error)
        base = error.base if isinstance(error, Fail) else 5.0
        if isinstance(error, Fail):
            log.warning("%s: %s: %s", stack.owner, failure.reason, failure.message)
        else:
            log.error("%s: reconcile failed: %s", stack.owner, failure.message, exc_info=error)
        if stack.deleting:
            stack.teardown = (failure.message, True)
        else:
            stack.failure = failure
            stack.step = None
        await self.writers[stack.key].update()
        await self.events.record(stack.owner, "Warning", failure.reason, failure.message)
        if not failure.retrying:
            return None  # only a change of the KfDef can help; its event requests the next run
        attempt = self._attempts.get(stack.key, 0)
        self._attempts[stack.key] = attempt + 1
        return backoff(attempt, base=base, cap=120.0 if stack.deleting else 600.0)

    # -- reconcile ----------------------------------------------------------------------

    async def _reconcile(self, stack: Stack, body: JSON) -> float | None:
        writer = self.writers[stack.key]
        try:
            kfdef = parse_kfdef(body)
        except InvalidKfDef as error:
            stack.begin(body["metadata"].get("generation", 0), announce=False)
            raise Fail("InvalidSpec", str(error), retry=False) from None
        if kfdef.generation != stack.generation:
            self._attempts.pop(stack.key, None)  # a new generation starts its backoff afresh
        await self._ensure_finalizer(stack)
        stack.suspended = kfdef.annotations.get(SUSPEND_ANNOTATION, "").lower() == "true"
        if stack.suspended:
            stack.generation = kfdef.generation
            await writer.update()
            return None
        manager = self.identities.manager(await self._settle_identity(stack, kfdef.service_account_name))
        announce = stack.status.get("observedGeneration") != kfdef.generation or stack.failure is not None
        stack.begin(kfdef.generation, announce=announce)

        async def step(reason: str, message: str) -> None:
            if announce:
                stack.step = (reason, message)
                await writer.update()

        desired, upgraded = await self._build(stack, kfdef, body, step)
        if announce:  # written with the inventory of the objects about to be created: one write
            stack.step = ("Applying", f"applying {cond.counted(len(stack.desired), 'object')}")
        first_time = await self._record_intent(stack, desired)
        if announce and not first_time:
            await writer.update()
        changes = await self._apply(stack, kfdef, desired, manager, first_time)
        await self._prune(stack, manager)
        stack.record_apply(changes)
        if not announce:  # a resync: also catch drift that no watch event showed
            await self.tracker.resync(stack.owner.label, self._targets([stack]))
        self.healer.applied(stack)
        self._schedule_refresh_after(self.settings.health_timeout + 1, stack.key)
        if not await writer.update():
            raise Fail("StatusNotWritten", "the status could not be written (see the operator log); retrying",
                       retry=True)
        failures = stack.failed_changes()
        if announce and stack.reported.get("warnings"):  # the generation in the message: one Event per generation
            await self.events.record(stack.owner, "Normal", "RenderWarnings",
                                     f"generation {stack.generation}: " + "; ".join(stack.reported["warnings"]))
        if upgraded and (changes.written or announce):
            await self.events.record(stack.owner, "Normal", "ApiVersionsUpgraded", upgraded)
        for change in changes:
            if change.action is Action.ADOPTED and change.message.startswith(FORGED_STAMP_NOTE):
                await self.events.record(stack.owner, "Warning", "AdoptedUnclaimed", f"{change.ref}: {change.message}")
        if changes.written or failures:
            level = "Warning" if failures else "Normal"
            await self.events.record(stack.owner, level, "ApplyFailed" if failures else "Applied",
                                     f"{changes.summary()}"
                                     + (f"; {cond.failure_summary(failures)}" if failures else ""))
        if failures:
            attempt = self._attempts.get(stack.key, 0)
            self._attempts[stack.key] = attempt + 1
            return backoff(attempt, base=10.0)
        self._attempts.pop(stack.key, None)
        return jittered(kfdef.interval or self.settings.interval)

    async def _build(self, stack: Stack, kfdef: KfDef, body: JSON,
                     step: Callable[[str, str], Awaitable[None]]) -> tuple[DesiredState, str]:
        """Fetch, render and upgrade: the stack's desired state and what was upgraded (``step`` announces steps)."""
        try:
            await step("FetchingSources", f"fetching {cond.counted(len(kfdef.repos), 'source')}")
            sources = await self.work_pool.run(resolve_sources, kfdef.repos, self.source_cache, self.fetch_options,
                                               user=source_user(*stack.key))
        except SourceError as error:
            raise Fail("SourceFailed", str(error), retry=True) from None
        try:
            await step("Rendering", f"rendering {cond.counted(len(kfdef.applications), 'application')}")
            with metrics.RENDER_SECONDS.time():
                rendered = await self.work_pool.run(self.render_cache.render, body, kfdef, sources,
                                                    render_dir(self.settings.work_dir, *stack.key))
        except (RenderError, KustomizeError) as error:
            raise Fail("RenderFailed", str(error), retry=True, base=30.0) from None
        await self.discovery.refresh_unless_served(_kinds_served_elsewhere(rendered))
        desired, upgraded = self._desire(stack, kfdef, [(app.name, obj) for app in rendered for obj in app.objects])
        # Duplicates resolve as kfctl resolved them: a note, not a problem (Degraded means a person must act).
        duplicates = ([f"rendered twice (last wins): {cond.list_objects(desired.duplicates)}"]
                      if desired.duplicates else [])
        stack.reported.update(
            sources=[{"name": s.name, "uri": s.uri, "revision": s.revision} for s in sources.values()],
            reposCache=[{"name": s.name, "localPath": str(s.local_path)} for s in sources.values()],
            warnings=[*duplicates, *(cond.truncate(f"application {app.name!r}: {warning}", 512)
                                     for app in rendered for warning in app.warnings)][:cond.MAX_FAILURES_LISTED])
        return desired, upgraded

    def _targets(self, stacks: Iterable[Stack]) -> set[WatchTarget]:
        """The watches the stacks' objects need: per kind, or per kind and namespace when namespace-scoped."""
        scoped = bool(self.settings.namespaces)
        return {(resource, ref.namespace if scoped else "") for stack in stacks
                for ref, resource in stack.resources.items()}

    def _desire(self, stack: Stack, kfdef: KfDef, objects: list[tuple[str, JSON]]) -> tuple[DesiredState, str]:
        """Upgrade the rendered objects and settle the stack's desired state; also returns what was upgraded."""
        policy = kfdef.annotations.get(API_UPGRADE_ANNOTATION, self.settings.api_upgrade_default)
        try:
            desired, upgraded = desire(kfdef, objects, self.discovery, policy=policy,
                                       namespaces=self.settings.namespaces)
        except UnservedApiVersions as error:
            raise Fail("UnservedApiVersions", str(error), retry=False) from None
        except ValueError as error:
            raise Fail("InvalidSpec", f"{API_UPGRADE_ANNOTATION}: {error}", retry=False) from None
        stack.want(desired.objects)
        stack.resources = desired.resources
        stack.application_of = desired.application_of
        stack.applications = [app.name for app in kfdef.applications]
        stack.run_once = {ref for ref, obj in desired.objects.items() if is_run_once(obj)}
        stack.webhooks = webhooks_of(desired.objects.values())
        stack.rejected = desired.rejected
        stack.reported["upgrades"] = {"count": len(upgraded.upgraded),
                                      "kinds": sorted({u.kind for u in upgraded.upgraded}),
                                      "notes": [cond.truncate(n, 256)
                                                for n in upgraded.notes()][:cond.MAX_FAILURES_LISTED]}
        return desired, upgraded.summary() if upgraded.upgraded else ""

    async def _record_intent(self, stack: Stack, desired: DesiredState) -> set[ObjectRef]:
        """Add the objects about to be applied for the first time to the inventory, before applying them.

        If the operator dies mid-apply and the KfDef is deleted before it comes back, the teardown still
        knows every object that may exist. Entries that were never created read as gone; objects held by
        someone else are skipped by prune and teardown (they check the claim), so a wider inventory is safe.
        Returns the objects added.
        """
        new = {ref for ref in stack.desired if ref not in stack.inventory}
        if not new:
            return new
        for ref in new:
            stack.inventory[ref] = InventoryEntry(version_of(desired.objects[ref]))
        if not await self.writers[stack.key].update():
            raise Fail("StatusNotWritten", "the inventory could not be recorded before applying; retrying",
                       retry=True)
        return new

    async def _apply(self, stack: Stack, kfdef: KfDef, desired: DesiredState, manager: ResourceManager,
                     first_time: set[ObjectRef]) -> ChangeSet:
        # Run-once objects applied before with this very content are not created again once gone.
        keep_absent = kept_absent(stack.owner, desired, {ref: entry.run_once for ref, entry in stack.inventory.items()})
        await self.tracker.watch(self._targets([stack]))
        changes = await manager.apply_all(stack.owner, desired.served, desired.not_served_yet,
                                          ApplyOptions(force=kfdef.force, keep_absent=keep_absent))
        for change in changes:
            if change.action.wrote:
                metrics.OBJECTS_APPLIED.labels(change.action.value).inc()
            if change.action is Action.FAILED:
                metrics.APPLY_ERRORS.labels(metrics.kind_label(change.ref.kind)).inc()
            if change.ref not in stack.resources and change.live is not None:  # custom resources served now
                stack.resources[change.ref] = await self.discovery.resource(change.live["apiVersion"], change.ref.kind)
            if change.ref in stack.run_once and change.action in (Action.CREATED, Action.CONFIGURED,
                                                                   Action.UNCHANGED):
                stack.inventory[change.ref].run_once = applied_digest(stack.owner, desired, change.ref)
        await self.tracker.watch(self._targets([stack]))
        for change in changes:
            # Never ours, so never in our inventory: another owner's, or refused the first time it was applied
            # (an identity that may not even read it could not delete it either). A CRD that was created but
            # never became Established failed with its live copy: it stays.
            first_refusal = change.action is Action.FAILED and change.live is None and change.ref in first_time
            if change.action is Action.CONFLICT or first_refusal:
                stack.inventory.pop(change.ref, None)
        return changes

    async def _prune(self, stack: Stack, manager: ResourceManager) -> None:
        """Delete what the previous inventory holds and the desired state no longer does."""
        stale = {ref: entry.version for ref, entry in stack.inventory.items() if ref not in stack.desired}
        if not stale:
            return
        pruned = await manager.prune(stack.owner, stale)
        for change in pruned:
            if change.action is Action.FAILED:  # stays in the inventory: retried by the next run or the teardown
                log.warning("%s: could not prune %s: %s", stack.owner, change.ref, change.message)
            else:
                stack.inventory.pop(change.ref, None)
        if pruned.written:
            await self.tracker.retain(self._targets(self.stacks.values()))
            await self.events.record(stack.owner, "Normal", "Pruned", f"pruned objects no longer rendered: "
                                                                     f"{pruned.summary()}")

    async def _ensure_finalizer(self, stack: Stack) -> None:
        """Hold the KfDef until its stack is torn down (kfctl's finalizer name)."""
        body = self._bodies.get(stack.key) or {}
        if FINALIZER in ((body.get("metadata") or {}).get("finalizers") or ()):
            return
        await self._patch_finalizers(stack, add=True)

    async def _patch_finalizers(self, stack: Stack, *, add: bool) -> None:
        """Add or remove our finalizer with a resourceVersion precondition (others' finalizers are kept)."""
        path = kfdef_path(*stack.key)
        for _ in range(5):
            current = await self.kube.get(path)
            if current is None or current["metadata"].get("uid") != stack.owner.uid:
                return
            finalizers = list(current["metadata"].get("finalizers") or [])
            if (FINALIZER in finalizers) == add:
                return
            finalizers = [*finalizers, FINALIZER] if add else [f for f in finalizers if f != FINALIZER]
            try:
                await self.kube.request("PATCH", path, content_type="application/merge-patch+json", body={
                    "metadata": {"finalizers": finalizers, "resourceVersion": current["metadata"]["resourceVersion"]}})
                return
            except KubeApiError as error:
                if error.status != 409:
                    raise
        raise Fail("FinalizerConflict", "the KfDef kept changing while its finalizer was updated; retrying",
                   retry=True)

    # -- readiness from watch events --------------------------------------------------------

    def refresh(self, stack: Stack) -> None:
        """Re-evaluate a stack's status soon (coalesced: one write for a burst of events); only while leading."""
        if not self.leading():
            return
        self._refresh_pending.add(stack.key)
        if self._refresh_task is None or self._refresh_task.done():
            self._refresh_task = asyncio.create_task(self._refresh_loop())

    def _schedule_refresh_after(self, seconds: float, key: Key) -> None:
        """One timer instead of polling: past the health deadline, unhealthy objects turn into Degraded."""
        def fire() -> None:
            self._timers.discard(timer)
            stack = self.stacks.get(key)
            if stack is not None:
                self.refresh(stack)
        timer = asyncio.get_running_loop().call_later(seconds, fire)
        self._timers.add(timer)

    async def _refresh_loop(self) -> None:
        while self._refresh_pending:
            await asyncio.sleep(0.2)  # coalesce bursts of events into one status write
            pending, self._refresh_pending = self._refresh_pending, set()
            for key in pending if self.leading() else ():
                writer = self.writers.get(key)
                if writer is not None:
                    await writer.update()

    def _on_object_event(self, event_type: str, ref: ObjectRef, live: LiveObject, obj: JSON | None) -> None:
        key = self._by_label.get(instance_label(live) or "")
        stack = self.stacks.get(key) if key else None
        if stack is None or stack.deleting or ref not in stack.desired:
            return
        self.healer.observe(stack, event_type, ref, live, obj)
        if stack.changes:
            self.refresh(stack)

    # -- teardown ------------------------------------------------------------------------

    async def _teardown(self, stack: Stack, body: JSON) -> float | None:
        """Delete everything the KfDef created (in reverse dependency order), keep what it adopted.

        The finalizer stays until the inventory is empty, so nothing is ever orphaned, with two exceptions:
        a KfDef deleted with ``--cascade=orphan`` (Kubernetes' own ``orphan`` finalizer, which also makes the
        garbage collector drop the ownerReferences) is let go without touching its objects, and so is one whose
        ServiceAccount is gone (nothing may be deleted with another identity; deleting a namespace removes its
        ServiceAccounts and KfDefs together), though the garbage collector still deletes its dependents. A suspended
        KfDef is torn down like any other: deleting it is its
        owner's explicit request.
        """
        writer = self.writers[stack.key]
        stack.deleting = True
        await self.healer.forget(stack)
        finalizers = body["metadata"].get("finalizers") or []
        if FINALIZER not in finalizers:
            return None
        if stack.inventory and ORPHAN_FINALIZER in finalizers:
            await self.events.record(stack.owner, "Normal", "Orphaned",
                                     f"the KfDef was deleted with --cascade=orphan: its {len(stack.inventory)} "
                                     "objects were left in place")
            stack.inventory.clear()
        identity = await self._teardown_identity(stack, body) if stack.inventory else None
        if identity is not None:
            stack.teardown = (f"deleting {len(stack.inventory)} objects", False)
            await writer.update()
            result = await self.identities.manager(identity).teardown(
                stack.owner, {r: e.version for r, e in stack.inventory.items()},
                wave_timeout=self.settings.teardown_wave_timeout)
            for change in result.changes:
                stack.inventory.pop(change.ref, None)
            if not result.done:
                message = f"{cond.counted(len(result.remaining), 'object')} not deleted yet: " + cond.list_objects(
                    f"{ref} ({why})" for ref, why in result.remaining)
                stack.teardown = (message, True)
                await writer.update()
                await self.events.record(stack.owner, "Warning", "TeardownStuck", message)
                attempt = self._attempts.get(stack.key, 0)
                self._attempts[stack.key] = attempt + 1
                return backoff(attempt, base=5.0, cap=120.0)
            await self.events.record(stack.owner, "Normal", "Deleted",
                                     f"deleted {result.changes.count(Action.DELETED, Action.GONE)} objects, released "
                                     f"{result.changes.count(Action.RELEASED)} that were not the stack's to delete")
            await writer.update()
        await self._patch_finalizers(stack, add=False)
        await self._forget(stack.key)
        return None

    async def _teardown_identity(self, stack: Stack, body: JSON) -> StackIdentity | None:
        """Who deletes the stack; None when its ServiceAccount is gone (the operator then deletes nothing)."""
        try:
            identity = self.identities.of(stack.owner.namespace, service_account_name(body))
        except InvalidKfDef as error:
            raise Fail("InvalidSpec", f"{error}; the stack is deleted once spec.serviceAccountName is corrected",
                       retry=False) from None
        stack.identity = identity
        missing = await self.identities.unavailable(identity)
        if missing is None:
            return identity
        namespace = stack.owner.namespace
        here = [str(ref) for ref in stack.inventory if ref.namespace == namespace]
        elsewhere = [str(ref) for ref in stack.inventory if ref.namespace != namespace]
        # The operator deletes nothing, but those it created in the KfDef's namespace name the KfDef in their
        # ownerReferences: Kubernetes' garbage collector deletes them with it (adopted ones have no such
        # reference and stay). Said as it happens, so that nobody is told they were kept.
        message = f"{missing}, so the operator deletes none of its objects"
        if here:
            message += (f"; in {namespace}, the garbage collector deletes those the stack created (they name the "
                        f"KfDef as owner) and keeps adopted ones: {cond.list_objects(here)}")
        if elsewhere:
            message += f"; left in place: {cond.list_objects(elsewhere)}"
        await self.events.record(stack.owner, "Warning", "Orphaned", message)
        stack.inventory.clear()
        return None

    def _release(self, key: Key) -> None:
        """Stop everything that writes for this KfDef: its heals, status refreshes and status writes.

        Synchronous, so that nothing starts for it once the watch says it is gone here (deleted, or moved to
        another shard, which may be writing for it already); :meth:`_forget` then cleans up.
        """
        stack = self.stacks.pop(key, None)
        writer = self.writers.pop(key, None)
        self._attempts.pop(key, None)
        if writer is not None:
            writer.forget()
        if stack is not None:
            self._by_label.pop(stack.owner.label, None)
            self.healer.drop(stack)

    async def _forget(self, key: Key) -> None:
        self._release(key)
        await self.housekeeper.forget(*key)  # its render directory, cached render and sources
        self.identities.retain(s.identity for s in self.stacks.values() if s.identity is not None)
        # Watches of kinds no remaining KfDef holds are closed: at rest, only needed watches stay open.
        await self.tracker.retain(self._targets(self.stacks.values()))


async def _quietly(reason: str, message: str) -> None:
    """A step announced to nobody (a standby writes no status)."""
