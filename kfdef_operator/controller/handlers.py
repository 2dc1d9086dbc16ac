"""kopf handlers: thin wiring from KfDef events to :class:`reconciler.Operator`.

Every KfDef is handled independently and concurrently by kopf; a failing one
never blocks the others. Transient failures come back as
:class:`kopf.TemporaryError` with the backoff the operator chose.
"""

from __future__ import annotations

import copy
import logging
import os
from pathlib import Path
from typing import Any, Awaitable, Callable

import kopf

from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.controller.reconciler import Operator, Retry
from kfdef_operator.controller.server import ProbeServer

GROUP, VERSION, PLURAL = "kfdef.apps.kubeflow.org", "v1", "kfdefs"
FINALIZER = "kfdef-finalizer.kfdef.apps.kubeflow.org"  # kfctl's name: existing KfDefs carry it

log = logging.getLogger(__name__)


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    # Keep kopf's bookkeeping in annotations of our own prefix (status is schema-pruned).
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.posting.enabled = False  # events are posted by the operator itself, worded for people
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.inactivity_timeout = 330  # no event, not even a bookmark: reconnect (kopf#847)
    settings.batching.error_delays = (1, 2, 5, 10, 30, 60)
    settings.execution.max_workers = 8
    options = memo.options
    kube = await KubeClient.connect(options.get("kubeconfig"))
    operator = Operator(kube, work_dir=Path(options["work_dir"]), api_upgrade_default=options["api_upgrade"],
                        concurrency=options["concurrency"], health_timeout=options["health_timeout"],
                        namespaces=tuple(options["namespaces"]))
    await operator.start()
    memo.kube, memo.operator = kube, operator
    if options.get("server_address"):
        memo.server = ProbeServer(operator, options["server_address"])
        await memo.server.start()
    log.info("kfdef-operator started against %s", kube.host)


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """The same credentials as our own client: kubeconfig when given, else the pod's service account."""
    if os.environ.get("KUBECONFIG") or Path("~/.kube/config").expanduser().exists():
        return kopf.login_with_kubeconfig(**kwargs)
    return kopf.login_with_service_account(**kwargs)


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    if getattr(memo, "server", None):
        await memo.server.stop()
    await memo.operator.stop()
    await memo.kube.close()


@kopf.on.resume(GROUP, VERSION, PLURAL, backoff=10)
@kopf.on.create(GROUP, VERSION, PLURAL, backoff=10)
@kopf.on.update(GROUP, VERSION, PLURAL, backoff=10)
async def reconcile(body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
    await _retrying(memo.operator.reconcile, body, retry)


@kopf.on.delete(GROUP, VERSION, PLURAL, backoff=10)
async def teardown(body: kopf.Body, memo: kopf.Memo, retry: int, **_: Any) -> None:
    await _retrying(memo.operator.teardown, body, retry)


async def _retrying(step: Callable[..., Awaitable[None]], body: kopf.Body, retry: int) -> None:
    """Run one operator step; its Retry becomes kopf's TemporaryError with the step's own delay."""
    try:
        await step(_plain(body), attempt=retry)
    except Retry as error:
        raise kopf.TemporaryError(str(error), delay=error.delay)


def _plain(body: kopf.Body) -> dict:
    """kopf's live body view as a plain, detached dict."""
    return copy.deepcopy(dict(body))


def default_work_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kfdef-operator"
