"""A KfDef's desired state: its sources fetched, its applications rendered, their objects upgraded and settled.

:class:`DesiredStateBuilder` owns the source and render caches and runs fetches and renders on the operator's work
pool; the steps after them are :func:`~kfdef_operator.controller.desired.desire`. It writes nothing, neither to the
API server nor to the stack: it returns a :class:`Build`, whose :class:`~kfdef_operator.runtime.stack.Plan` the
stack takes in one call. The leader's reconcile and a standby's preparation both use it, each announcing steps its
own way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from kfdef_operator.api.kfdef import KfDef
from kfdef_operator.api.names import API_UPGRADE_ANNOTATION
from kfdef_operator.api.types import JSON
from kfdef_operator.build.cache import RenderCache
from kfdef_operator.build.isolated import IsolatedRender
from kfdef_operator.build.kustomize import KustomizeError
from kfdef_operator.build.render import RenderedApplication, RenderError
from kfdef_operator.build.workspace import render_dir
from kfdef_operator.controller.desired import DesiredState, desire, is_run_once
from kfdef_operator.controller.failures import Fail
from kfdef_operator.controller.housekeeping import source_user
from kfdef_operator.controller.registry import Key
from kfdef_operator.controller.workpool import WorkPool
from kfdef_operator.runtime import conditions as cond
from kfdef_operator.runtime import metrics
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import Plan
from kfdef_operator.source.cache import SourceCache
from kfdef_operator.source.errors import SourceError
from kfdef_operator.source.options import CacheLimits, FetchOptions
from kfdef_operator.source.resolve import resolve_sources
from kfdef_operator.source.resolved import ResolvedSource
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.webhooks import webhooks_of
from kfdef_operator.upgrade.convert import UnservedApiVersions, UpgradeResult

#: Announces a step of the build (reason, message): a status write for the leader, nothing for a standby.
Step = Callable[[str, str], Awaitable[None]]


@dataclass(frozen=True)
class Build:
    """A KfDef's desired state, built: what its apply sends, what its stack keeps, and what was upgraded."""

    desired: DesiredState
    plan: Plan
    #: The API-version upgrades made, as said in an Event ("" when none).
    upgraded: str


async def quietly(reason: str, message: str) -> None:
    """A step announced to nobody (a standby writes no status)."""


def _kinds_served_elsewhere(rendered: Iterable[RenderedApplication]) -> set[tuple[str, str]]:
    """The (apiVersion, kind) pairs of the rendered objects that no CRD among them defines: if the cluster serves
    them, something else installed their API (the stack's own custom resources wait for their CRDs instead)."""
    objects = [obj for app in rendered for obj in app.objects]
    own = {(crd.get("spec", {}).get("group"), (crd.get("spec", {}).get("names") or {}).get("kind"))
           for crd in objects if crd.get("kind") == "CustomResourceDefinition" and isinstance(crd.get("spec"), dict)}
    return {(str(obj.get("apiVersion", "")), str(obj.get("kind", ""))) for obj in objects
            if (str(obj.get("apiVersion", "")).rpartition("/")[0], obj.get("kind")) not in own}


class DesiredStateBuilder:
    """Builds stacks' desired states under ``work_dir`` (sources, renders) on ``work_pool``."""

    def __init__(self, discovery: Discovery, work_pool: WorkPool, *, work_dir: Path, fetch_options: FetchOptions,
                 renderer: IsolatedRender, api_upgrade_default: str, namespaces: frozenset[str]) -> None:
        self._discovery = discovery
        self._work_pool = work_pool
        self._work_dir = work_dir
        self._api_upgrade_default = api_upgrade_default
        self._namespaces = namespaces
        self.source_cache = SourceCache(work_dir / "sources", CacheLimits.from_env())
        # A KfDef never reads the operator's work directory (other KfDefs' sources and renders) as a source.
        self._fetch_options = replace(fetch_options, private_dirs=(work_dir,))
        self.render_cache = RenderCache(work_dir / "rendered", renderer, renderer.settings)
        self._building: set[Key] = set()

    def building(self, key: Key) -> bool:
        """Whether the KfDef's sources are being fetched or its applications rendered right now."""
        return key in self._building

    async def build(self, owner: Owner, kfdef: KfDef, body: JSON, step: Step) -> Build:
        """Fetch, render and upgrade the KfDef of ``owner`` (``step`` announces the steps).

        Fetch and render run on the work pool as the KfDef's namespace: cancelled, they are interrupted."""
        self._building.add(owner.key)
        try:
            rendered, sources = await self._fetch_and_render(owner, kfdef, body, step)
        finally:
            self._building.discard(owner.key)
        await self._discovery.refresh_unless_served(_kinds_served_elsewhere(rendered))
        desired, upgraded = self._desire(kfdef, [(app.name, obj) for app in rendered for obj in app.objects])
        # Duplicates resolve as kfctl resolved them: a note, not a problem (Degraded means a person must act).
        duplicates = ([f"rendered twice (last wins): {cond.list_objects(desired.duplicates)}"]
                      if desired.duplicates else [])
        reported = {
            "upgrades": {"count": len(upgraded.upgraded), "kinds": sorted({u.kind for u in upgraded.upgraded}),
                         "notes": [cond.truncate(n, 256) for n in upgraded.notes()][:cond.MAX_FAILURES_LISTED]},
            "sources": [{"name": s.name, "uri": s.uri, "revision": s.revision} for s in sources.values()],
            "reposCache": [{"name": s.name, "localPath": str(s.local_path)} for s in sources.values()],
            "warnings": [*duplicates, *(cond.truncate(f"application {app.name!r}: {warning}", 512)
                                        for app in rendered for warning in app.warnings)][:cond.MAX_FAILURES_LISTED],
        }
        plan = Plan(objects=desired.objects, resources=desired.resources, application_of=desired.application_of,
                    applications=[app.name for app in kfdef.applications],
                    run_once={ref for ref, obj in desired.objects.items() if is_run_once(obj)},
                    webhooks=webhooks_of(desired.objects.values()), rejected=desired.rejected, reported=reported)
        return Build(desired, plan, upgraded.summary() if upgraded.upgraded else "")

    async def _fetch_and_render(self, owner: Owner, kfdef: KfDef, body: JSON,
                                step: Step) -> tuple[list[RenderedApplication], Mapping[str, ResolvedSource]]:
        tenant = owner.namespace
        try:
            await step("FetchingSources", f"fetching {cond.counted(len(kfdef.repos), 'source')}")
            sources = await self._work_pool.run(tenant, lambda interrupt: resolve_sources(
                kfdef.repos, self.source_cache, self._fetch_options, user=source_user(*owner.key),
                interrupt=interrupt))
        except SourceError as error:
            raise Fail("SourceFailed", str(error), retry=True) from None
        workdir = render_dir(self._work_dir, *owner.key)
        try:
            await step("Rendering", f"rendering {cond.counted(len(kfdef.applications), 'application')}")
            with metrics.RENDER_SECONDS.time():
                rendered = await self._work_pool.run(tenant, lambda interrupt: self.render_cache.render(
                    body, kfdef, sources, workdir, interrupt=interrupt))
        except (RenderError, KustomizeError) as error:
            raise Fail("RenderFailed", str(error), retry=True, base=30.0) from None
        return rendered, sources

    def _desire(self, kfdef: KfDef, objects: list[tuple[str, JSON]]) -> tuple[DesiredState, UpgradeResult]:
        """Upgrade the rendered objects and settle the desired state; also returns the upgrades made."""
        policy = kfdef.annotations.get(API_UPGRADE_ANNOTATION, self._api_upgrade_default)
        try:
            return desire(kfdef, objects, self._discovery, policy=policy, namespaces=self._namespaces)
        except UnservedApiVersions as error:
            raise Fail("UnservedApiVersions", str(error), retry=False) from None
        except ValueError as error:
            raise Fail("InvalidSpec", f"{API_UPGRADE_ANNOTATION}: {error}", retry=False) from None
