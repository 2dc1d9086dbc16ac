"""The section on replicas and shards (``bench/ha.py``'s figures; issue 16)."""

from __future__ import annotations

import statistics

from ..results import Fleet, Results, ShardedFleet
from ..tables import fmt, table


def _leadership(sharded: ShardedFleet) -> str:
    if sharded.step_downs is None or sharded.lease_renewal_gap_max_s is None:
        return ""
    return (f" While the fleet converged, the shard leaders' Leases were written at most "
            f"{fmt(sharded.lease_renewal_gap_max_s)} s apart (a renewal every 2 s; a leader steps down when one "
            f"has not succeeded 10 s after the previous began), and leaders stepped down {sharded.step_downs} "
            "times (the shards' logs).")


def _share(fleet: Fleet, *groups: str) -> str:
    """The share of the CPU the fleet's run used that went to ``groups`` (processes)."""
    used = fleet.cpu.cpu_s
    return f"{sum(used[g] for g in groups) / sum(used.values()):.0%}"


def replicas_and_shards(results: Results) -> list[str]:
    """The report's section on replicas and shards (empty when the results hold none)."""
    replicas = results.replicas
    if replicas is None:
        return []
    fail, hand = replicas.failover, replicas.handover
    after_lease = statistics.median(healed - taken for healed, taken in
                                    zip(fail.samples, replicas.takeover.samples, strict=True))
    sharded, single = replicas.sharded, replicas.single
    f = fmt

    return [
        "## Replicas and shards",
        "",
        f"Measured on {replicas.date or '?'}" + (" (quick mode)" if replicas.quick else "")
        + f", load average at the end {', '.join(f'{x:.1f}' for x in replicas.load_average_at_end)}; "
        "`python -m bench.ha` measures this section alone, in a session of its own. Targets: issue 16.",
        "",
        f"Two replicas with the default timings (lease {f(replicas.lease_duration_s)} s, renew deadline 10 s, retry "
        f"2 s) serving one KfDef of {replicas.objects} objects (`bench/replicas.py`):",
        "",
        f"- **Failover** (SIGKILL the leader at a random point of its renewal cycle, delete a Deployment at once): "
        f"the Deployment was back after {f(fail.median)} s (median; {f(fail.min)} to {f(fail.max)} s over "
        f"{fail.n} trials); the standby held the lease after {f(replicas.takeover.median)} s and "
        f"healed {f(after_lease)} s later (median). The standby may take over only once the lease has expired on "
        "its own clock, counted from the last renewal it saw (the leader renews every 2 s): the figure is the lease "
        "duration minus the time since that renewal, plus the takeover reconcile: the KfDef read afresh, a render "
        "cache hit, a no-op apply but for the deleted object. The standby keeps that short by being warm (compare "
        "`noop.restart_s`, a cold start's first reconcile).",
        f"- **Graceful handover** (a rolling update's step: a new replica up and warm, then SIGTERM to the leader "
        f"and a Deployment deleted): back after {f(hand.median)} s (median; max {f(hand.max)} s, "
        f"{hand.n} trials); a successor held the lease after "
        f"{f(replicas.handover_lease.median)} s. The leader stops its work, then releases the lease; "
        "the standbys watch the Lease and take it at once.",
        "",
        f"A fleet of {sharded.kfdefs} KfDefs of {sharded.objects // sharded.kfdefs} objects ({sharded.objects} "
        "objects; `bench/fleet.py`), created at once:",
        "",
        *table(["operators", "s to all Ready", "s to all gone", "KfDefs per operator", "writes per operator"],
               [["3 shards", f(sharded.figure.median), f(sharded.removed_s),
                 ", ".join(f"{k} {v}" for k, v in sharded.kfdefs_per_shard.items()),
                 ", ".join(f"{k} {v}" for k, v in sharded.writes_per_shard.items())],
                ["1, unsharded", f(single.figure.median), f(single.removed_s), str(single.kfdefs),
                 str(single.writes)]]),
        "",
        f"Each KfDef was reconciled by exactly one shard, its own: {sharded.served_by_its_shard} of "
        f"{sharded.kfdefs} (by several: {sharded.served_by_several}), read from each shard's own "
        "`kfdef_condition` gauges; `tests/reliability/test_high_availability.py` proves the same from "
        "kube-apiserver's audit log." + _leadership(sharded),
        "",
        *table(["CPU seconds, from creating the namespaces until all Ready", *sharded.cpu.cpu_s, "cores used"],
               [[label, *(f(v) for v in fleet.cpu.cpu_s.values()), f"{f(fleet.cpu.cores_used)} of {fleet.cpu.cores}"]
                for label, fleet in (("3 shards", sharded), ("1, unsharded", single))]),
        "",
        f"**What this 2-core machine limits.** Everything shares {sharded.cpu.cores} cores: the operators, "
        "kube-apiserver, etcd, the controller-manager, the scheduler, kwok, and whatever else ran on the machine "
        f"(load average above). Until all were Ready, the operators spent {_share(sharded, 'operators')} of the "
        f"CPU the cluster used with three shards ({_share(single, 'operators')} with one; kustomize renders "
        f"included), kube-apiserver and etcd {_share(sharded, 'kube-apiserver', 'etcd')}. Three shards took "
        f"{f(sharded.figure.median / single.figure.median)} times the unsharded time with about the same CPU "
        f"({f(sum(sharded.cpu.cpu_s.values()))} against {f(sum(single.cpu.cpu_s.values()))} CPU "
        "seconds): one operator process is one asyncio loop (its fetch/render threads and kustomize subprocesses "
        "aside) and leaves a core idle while it waits on the API server; three overlap their waits and kept the "
        f"cores busier ({f(sharded.cpu.cores_used)} against {f(single.cpu.cores_used)} cores used over "
        "the run). Shards cannot "
        "add cores here: on separate nodes each shard brings its own, while kube-apiserver and etcd serve every "
        "shard's writes and do not grow with them. Failover and handover times do not depend on the CPU: the "
        "first is the lease duration by design, the second a few requests.",
    ]
