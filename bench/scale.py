"""How the operator's time grows with KfDefs and with objects.

- ``many``: N KfDefs of ~100 objects each (their own cluster-scoped names),
  created together; seconds from the last create call returning until every
  one is Ready, then the same for their deletion.
- ``sweep``: one KfDef at several workload sizes; seconds to applied and
  objects per second, to show growth against object count, and the
  operator's resident memory at rest with each size deployed.
"""

from __future__ import annotations

import asyncio
import time

from . import baselines
from .context import Bench, is_ready
from .operator_runs import Deployed, deploy, teardown
from .workload import Workload

SMALL_STACK_SCALE = 1 / 6  # ~100 objects
RSS_SETTLE_S = 5.0  # after Ready, before reading the operator's resident memory


async def many(bench: Bench, count: int, *, timeout: float = 900) -> dict:
    """Create ``count`` small KfDefs at once; seconds until all are Ready and until all are torn down."""
    stacks: list[tuple[Workload, str]] = [bench.new_workload(SMALL_STACK_SCALE) for _ in range(count)]
    mark = bench.kfdefs.mark()
    created = await asyncio.gather(*(bench.create_kfdef(w, uri) for w, uri in stacks))
    started = max(at for _, at in created)
    names = [body["metadata"]["name"] for body, _ in created]
    ready = await asyncio.gather(*(bench.wait_kfdef(n, is_ready, after=mark, timeout=timeout, what="Ready")
                                   for n in names))
    all_ready_s = max(a.at for a in ready) - started
    deployed = [Deployed(n, w, 0.0, 0.0) for n, (w, _) in zip(names, stacks, strict=True)]
    teardown_started = time.monotonic()
    await asyncio.gather(*(teardown(bench, d, timeout=timeout) for d in deployed))
    return {"s": all_ready_s, "objects": sum(w.total for w, _ in stacks),
            "teardown_s": time.monotonic() - teardown_started}


async def sweep_point(bench: Bench, scale: float) -> dict:
    """One KfDef of the workload at ``scale``: applied and Ready times, objects per second, and the operator's
    resident memory before the KfDef and at rest with it deployed (``RSS_SETTLE_S`` after Ready); then the floor's
    apply of a workload of the same size, to tell the operator's growth from kube-apiserver's."""
    workload, uri = bench.new_workload(scale)
    rss_before = bench.operator_rss_mb()
    deployed = await deploy(bench, workload, uri)
    await asyncio.sleep(RSS_SETTLE_S)
    rss_mb = bench.operator_rss_mb()
    teardown_s = await teardown(bench, deployed)
    workload, uri = bench.new_workload(scale)
    rendered, _ = await asyncio.to_thread(baselines.render, bench, workload, uri)
    objects = baselines.load(rendered)
    floor_s = await baselines.floor_apply(bench, objects)
    await baselines.delete_applied(bench, objects)
    return {"scale": scale, "objects": workload.total, "applied_s": deployed.applied_s, "ready_s": deployed.ready_s,
            "objects_per_s": workload.total / deployed.applied_s, "teardown_s": teardown_s,
            "rss_before_mb": rss_before, "rss_mb": rss_mb, "floor_s": floor_s}
