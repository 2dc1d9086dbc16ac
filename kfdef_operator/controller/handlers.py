"""kopf handlers: thin wiring from KfDef watch events to :class:`~kfdef_operator.controller.reconciler.Reconciler`.

Only an event-watching handler is registered: kopf streams KfDefs (with its
reconnects and bookmarks) and the reconciler's work queue does the rest, so
kopf keeps no handler progress, adds no finalizer and retries nothing on its
own; the operator manages kfctl's finalizer itself. kopf therefore writes
nothing, and a standby replica streams KfDefs like the leader.

``memo`` carries what ``kfdef-operator run`` decided: ``settings``,
``label_selector`` (the shard's KfDefs), ``election`` (None: no leader
election) and ``identity`` (this process among the replicas).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import os
from pathlib import Path
from typing import Any

import kopf

from kfdef_operator import __version__
from kfdef_operator.api.names import CRD_NAME, GROUP, PLURAL, VERSION
from kfdef_operator.build.isolated import IsolatedRender, stop_renders
from kfdef_operator.build.kustomize import KustomizeError, find_render_helper
from kfdef_operator.controller.leadership import Leadership
from kfdef_operator.controller.reconciler import Reconciler
from kfdef_operator.controller.scope import has_globs
from kfdef_operator.controller.server import ProbeServer
from kfdef_operator.controller.wiring import assemble
from kfdef_operator.runtime import metrics
from kfdef_operator.source.deadline import expire_all
from kfdef_operator.ssa.client import KubeClient

log = logging.getLogger(__name__)


def configure_kopf(settings: kopf.OperatorSettings, namespaces: frozenset[str], label_selector: str) -> None:
    """kopf's settings for serving KfDefs only: in the namespaces watched, with the shard's label selector."""
    settings.posting.enabled = False  # events are posted by the operator itself, worded for people
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.inactivity_timeout = 330  # no event, not even a bookmark: reconnect (kopf#847)
    if namespaces and not has_globs(namespaces):
        settings.scanning.disabled = True  # named namespaces need no namespace or CRD watching (nor its RBAC)
    # kopf watches CRDs to notice kinds it could serve appearing and going. It serves the KfDef CRD alone; watching
    # every CRD decoded each one in full on every change (Kubeflow v1.11.0's 70: megabytes held, 14 MiB seen
    # at rest) and re-read discovery for its group.
    settings.watching.field_selectors["apiextensions.k8s.io", "customresourcedefinitions"] = f"metadata.name={CRD_NAME}"
    if label_selector:
        settings.watching.label_selectors[GROUP, PLURAL] = label_selector


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    configure_kopf(settings, memo.settings.namespaces, memo.label_selector)
    user_agent = f"kfdef-operator/{__version__} {memo.identity}"
    kube = await KubeClient.connect(memo.kubeconfig, user_agent=user_agent)
    memo.api_requests = metrics.count_api_requests(lambda: kube.stats().by_verb)
    memo.kube = kube
    gate = asyncio.Event() if memo.election else None
    reconciler = Reconciler(assemble(kube, memo.settings, gate=gate))
    await reconciler.start()
    memo.reconciler, memo.leadership = reconciler, None
    if memo.election:
        lease_kube = await KubeClient.connect(memo.kubeconfig, pool_size=2, user_agent=user_agent)
        memo.leadership = Leadership(kube, lease_kube, memo.election, reconciler)
        memo.leadership.start()
    if memo.server_address:
        memo.server = ProbeServer(memo.leadership or reconciler, memo.server_address)
        await memo.server.start()
    log.info("kfdef-operator started as %s against %s%s", memo.identity, kube.host,
             f", campaigning for lease {memo.leadership.elector.lease}" if memo.leadership else "")
    _log_renderer(memo.settings.renderer)


def _log_renderer(renderer: IsolatedRender) -> None:
    """Which kustomize renders and under which rules, once at start."""
    remote = (f"allowed (--no-remote-bases=false; {renderer.remote_bases.describe()})" if renderer.remote_bases
              else "refused")
    try:
        log.info("rendering with %s; remote bases %s; render limits: %s", find_render_helper().describe(), remote,
                 renderer.limits.describe())
    except KustomizeError as error:
        log.error("%s. Every render fails until this is fixed.", error)


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """The same credentials as our own client: kubeconfig when given, else the pod's service account."""
    if os.environ.get("KUBECONFIG") or Path("~/.kube/config").expanduser().exists():
        return kopf.login_with_kubeconfig(**kwargs)
    return kopf.login_with_service_account(**kwargs)


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    # Fetches (retry pauses included) and renders end now: their threads would otherwise hold the process until
    # their own deadlines, past the pod's grace period.
    expire_all()
    stop_renders()
    if getattr(memo, "server", None):
        await memo.server.stop()
    await memo.reconciler.stop()
    if memo.leadership is not None:  # released only now: every writer has stopped
        await memo.leadership.stop()
    metrics.stop_counting_api_requests(memo.api_requests)
    await memo.kube.close()


@kopf.on.event(GROUP, VERSION, PLURAL)
async def kfdef_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    memo.reconciler.observe(event.get("type"), copy.deepcopy(dict(event["object"])))
