"""The composition root: every long-lived part of a running operator, built once from its settings and wired.

:func:`assemble` makes the parts and hands each the others it needs; :class:`Parts` holds them. The
:class:`~kfdef_operator.controller.reconciler.Reconciler` coordinates them, and a test builds the same parts on the
fake API server to drive one alone (a build, an :class:`ApplyStep` run, a :class:`Teardown`). What is wired here:

- the tracker's watch events go to :class:`~kfdef_operator.runtime.stack_events.StackEvents`, which finds the
  stack by the registry's instance labels and hands the event to the healer, then asks the status refresher;
- the healer acts as a stack's identity (:class:`Identities`) and reports through the status refresher;
- the refresher writes only while this replica leads (``gate``);
- the work pool's load is exported as metrics.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from kfdef_operator.controller.apply_step import ApplyStep
from kfdef_operator.controller.builder import DesiredStateBuilder
from kfdef_operator.controller.heartbeat import Liveness
from kfdef_operator.controller.housekeeping import Housekeeper
from kfdef_operator.controller.refresher import StatusRefresher
from kfdef_operator.controller.registry import StackRegistry
from kfdef_operator.controller.settings import Settings
from kfdef_operator.controller.teardown import Teardown
from kfdef_operator.controller.workpool import WorkPool
from kfdef_operator.runtime import metrics
from kfdef_operator.runtime.events import EventRecorder
from kfdef_operator.runtime.heal import Healer
from kfdef_operator.runtime.identity import Identities
from kfdef_operator.runtime.stack_events import StackEvents
from kfdef_operator.runtime.tracker import Tracker
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.discovery import Discovery
from kfdef_operator.ssa.live import OwnWrites


@dataclass(frozen=True)
class Parts:
    """The parts of one running operator, wired (:func:`assemble`)."""

    kube: KubeClient
    settings: Settings
    #: Set while this replica leads (None: always leads, no leader election).
    gate: asyncio.Event | None
    discovery: Discovery
    tracker: Tracker
    identities: Identities
    events: EventRecorder
    registry: StackRegistry
    refresher: StatusRefresher
    healer: Healer
    work_pool: WorkPool
    liveness: Liveness
    builder: DesiredStateBuilder
    housekeeper: Housekeeper
    apply_step: ApplyStep
    teardown: Teardown
    #: Where the tracker hands its watch events: the stack's healer, then a status refresh.
    stack_events: StackEvents


def assemble(kube: KubeClient, settings: Settings, *, gate: asyncio.Event | None = None) -> Parts:
    """Build the parts of an operator acting through ``kube`` (``gate``: set while this replica leads)."""

    def leading() -> bool:
        return gate is None or gate.is_set()

    discovery = Discovery(kube)
    # Its events arrive once the watches run: after everything is built.
    tracker = Tracker(kube, lambda *event: stack_events(*event))
    own_writes = OwnWrites()  # what the applies wrote, so that the healer need not compare its watch events
    identities = Identities(kube, discovery, tracker, concurrency=settings.concurrency,
                            default_service_account=settings.default_service_account, own_writes=own_writes)
    events = EventRecorder(kube)
    registry = StackRegistry(kube, tracker, events, health_timeout=settings.health_timeout,
                             scoped=bool(settings.namespaces))
    refresher = StatusRefresher(registry, leading)
    healer = Healer(identities, tracker, events, registry.stacks, refresher.refresh, own_writes)
    stack_events = StackEvents(registry.labelled, healer, refresher.refresh)
    work_pool = WorkPool(settings.work_threads)  # fetch and render, off the event loop's default executor
    metrics.watch_work_pool(lambda: work_pool.running, lambda: work_pool.waiting)
    builder = DesiredStateBuilder(discovery, work_pool, work_dir=settings.work_dir,
                                  fetch_options=settings.fetch_options, renderer=settings.renderer,
                                  api_upgrade_default=settings.api_upgrade_default, namespaces=settings.namespaces)
    housekeeper = Housekeeper(settings.work_dir, builder.source_cache, builder.render_cache, work_pool,
                              live=lambda: set(registry.stacks))
    apply_step = ApplyStep(kube, builder, registry, refresher, identities, tracker, discovery, healer,
                           interval=settings.interval, health_timeout=settings.health_timeout)
    teardown = Teardown(identities, healer, wave_timeout=settings.teardown_wave_timeout)
    return Parts(kube=kube, settings=settings, gate=gate, discovery=discovery, tracker=tracker,
                 identities=identities, events=events, registry=registry, refresher=refresher, healer=healer,
                 work_pool=work_pool, liveness=Liveness(work_pool), builder=builder, housekeeper=housekeeper,
                 apply_step=apply_step, teardown=teardown, stack_events=stack_events)

