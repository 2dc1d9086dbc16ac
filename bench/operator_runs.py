"""Scenarios of the operator itself: apply, no-op restart, idle, teardown.

Each function measures one thing on a stack the caller deployed (or deploys
it) and returns plain numbers for the results file.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from .cluster import (
    apiserver_metrics,
    audit_offset,
    difference,
    open_watches,
    stack_reads,
    stack_writes,
    writes_by_client,
)
from .context import Bench, all_applied, cpu_used, is_ready
from .workload import Workload

_OPERATOR_WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")


@dataclass
class Deployed:
    """A KfDef the operator applied, and how long that took."""

    name: str
    workload: Workload
    applied_s: float     # create call returned -> status: every object applied, Reconciling False
    ready_s: float       # create call returned -> Ready True
    steps: dict[str, float] = field(default_factory=dict)  # seconds per step of the apply (Bench.steps)
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds per process until every object was applied
    apply_phase_s: float | None = None  # first stack object sent -> last answered (Bench.apply_phase_s)


async def deploy(bench: Bench, workload: Workload, uri: str, *, timeout: float = 600) -> Deployed:
    """Create a KfDef for the workload and wait until it is applied, then Ready."""
    mark, audit_mark = bench.kfdefs.mark(), bench.audit_mark()
    cpu_before = bench.cpu()
    created, started = await bench.create_kfdef(workload, uri)
    name = created["metadata"]["name"]
    applied = await bench.wait_kfdef(name, all_applied, after=mark, timeout=timeout, what="applied")
    cpu = cpu_used(cpu_before, bench.cpu())
    ready = await bench.wait_kfdef(name, is_ready, after=mark, timeout=timeout, what="Ready")
    apply_phase_s = bench.apply_phase_s(audit_mark, applied.at)  # read once Ready: no event waits on the reading
    return Deployed(name, workload, applied.at - started, ready.at - started,
                    bench.steps(name, after=mark, started=started, applied=applied.at), cpu, apply_phase_s)


async def teardown(bench: Bench, deployed: Deployed, *, timeout: float = 300,
                   waves: list[list[dict]] | None = None) -> float:
    """Seconds from the KfDef delete call returning until it is gone and no object carries its label; the waves the
    operator logged are appended to ``waves``."""
    log_from = bench.operator_log_offset()
    started = time.monotonic()
    await bench.delete_kfdef(deployed.name, timeout=timeout)
    while await bench.leftovers(deployed.workload, deployed.name):
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"objects of KfDef {deployed.name} still there after {timeout:.0f}s")
        await asyncio.sleep(0.05)
    seconds = time.monotonic() - started
    if waves is not None:
        waves.append(bench.teardown_waves(deployed.name, log_from))
    return seconds


def _operator_writes(metrics: dict[str, float]) -> int:
    return int(sum(v for k, v in metrics.items()
                   if k.startswith("kfdef_api_requests_total{")
                   and any(f'verb="{w}"' in k for w in _OPERATOR_WRITE_VERBS)))


def attributed(by_client: dict[str, dict[str, int]]) -> dict:
    """Writes of the audit log split into the operator's (every resource; its own client and kopf's) and the other
    clients' (by client and request)."""
    operator = by_client.pop("operator", {})
    return {"writes_operator": sum(operator.values()), "writes_operator_by_request": operator,
            "writes_others": by_client}


async def _reconcile_count(bench: Bench, result: str) -> int:
    metrics = await bench.operator_metrics()
    return int(metrics.get(f'kfdef_reconcile_duration_seconds_count{{result="{result}"}}', 0))


async def noop_restart(bench: Bench, resources: frozenset[str], *, settle_s: float = 2.0,
                       timeout: float = 300) -> dict:
    """Restart the operator with the stack deployed; time its resume reconcile and count its writes.

    ``s``: from the restarted operator answering ``/readyz`` until its first
    reconcile succeeded; ``restart_s`` adds the process start; ``reconcile_s``
    is the reconcile's own duration (operator metric). Writes are counted on
    the server (every client, the operator's framework included) over the
    restart plus ``settle_s`` after, told apart by client in kube-apiserver's
    audit log (``writes_operator``: the operator's, of any resource), and on
    the operator's own client.
    Open watches: the server's watch gauge with the operator up minus down.
    ``resources``: plurals of the deployed stacks' resources (:func:`stack_resources`).
    """
    samples = await asyncio.to_thread(apiserver_metrics, bench.control_plane)
    writes_before, watches_up = stack_writes(samples, resources), open_watches(samples, resources)
    audited_from = audit_offset(bench.control_plane)
    await asyncio.to_thread(bench.operator.stop)
    await asyncio.sleep(1.5)
    watches_down = open_watches(await asyncio.to_thread(apiserver_metrics, bench.control_plane), resources)
    started = time.monotonic()
    await asyncio.to_thread(bench.operator.start)
    ready = time.monotonic()
    while await _reconcile_count(bench, "success") < 1:
        if await _reconcile_count(bench, "error") or time.monotonic() - started > timeout:
            raise RuntimeError(f"resume reconcile did not succeed:\n{bench.operator.log_tail()}")
        await asyncio.sleep(0.01)
    done = time.monotonic()
    await asyncio.sleep(settle_s)
    metrics = await bench.operator_metrics()
    samples = await asyncio.to_thread(apiserver_metrics, bench.control_plane)
    server_writes = difference(stack_writes(samples, resources), writes_before)
    return {
        **attributed(writes_by_client(bench.control_plane, audited_from)),
        "s": done - ready, "restart_s": done - started,
        "reconcile_s": metrics.get('kfdef_reconcile_duration_seconds_sum{result="success"}', 0.0),
        "writes_server": sum(server_writes.values()), "writes_server_by_request": server_writes,
        "writes_operator_client": _operator_writes(metrics),
        "operator_watches": difference(watches_up, watches_down),
    }


async def idle(bench: Bench, resources: frozenset[str], *, window_s: float, settle_s: float) -> dict:
    """Requests of the operator at rest with the stacks deployed (``resources``: their plurals), writes on the
    server by every client (also told apart by client, from the audit log), and the operator's resident memory."""
    await asyncio.sleep(settle_s)
    before = await bench.operator_metrics()
    samples = await asyncio.to_thread(apiserver_metrics, bench.control_plane)
    reads_before, writes_before = stack_reads(samples, resources), stack_writes(samples, resources)
    audited_from = audit_offset(bench.control_plane)
    started = time.monotonic()
    await asyncio.sleep(window_s)
    after = await bench.operator_metrics()
    samples = await asyncio.to_thread(apiserver_metrics, bench.control_plane)
    reads_after, writes = stack_reads(samples, resources), difference(stack_writes(samples, resources), writes_before)
    minutes = (time.monotonic() - started) / 60
    requests = {k: after[k] - before.get(k, 0) for k in after
                if k.startswith("kfdef_api_requests_total{") and after[k] != before.get(k, 0)}
    return {
        "rss_mb": bench.operator_rss_mb(),
        "requests_per_min": sum(requests.values()) / minutes,
        "requests_by_verb": requests,
        "server_reads_per_min_all_clients": (reads_after - reads_before) / minutes,
        "server_writes": sum(writes.values()), "server_writes_by_request": writes,
        **attributed(writes_by_client(bench.control_plane, audited_from)),
        "window_s": minutes * 60,
    }
