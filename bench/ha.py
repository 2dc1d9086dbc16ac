"""Replicas and shards: failover, graceful handover, and a fleet of KfDefs over three shards versus one operator.

``python -m bench`` runs these scenarios after the others (the single operator process of the other scenarios
stopped). ``python -m bench.ha [--quick]`` runs them alone on a control plane of their own and merges their
figures into an existing results file (everything else in it is kept), then writes the report again.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import logging
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python bench/ha.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"  # noqa: A001


from . import fleet, operator_runs, report  # noqa: E402
from .context import Bench  # noqa: E402
from .replicas import LEASE_DURATION_S, ReplicaSet, failover, handover, lead  # noqa: E402
from .standalone import run_alone  # noqa: E402
from .stats import summary  # noqa: E402

log = logging.getLogger("bench.ha")
ROOT = Path(__file__).resolve().parents[1]
JSON = dict[str, Any]

#: (failover trials, handover trials, KfDefs per shard) for the full and the quick run.
FULL, QUICK = (5, 5, 100), (2, 2, 10)
KEYS = ("ha.failover_s", "ha.takeover_s", "ha.handover_s", "ha.handover_lease_s", "shards.fleet_s", "shards.single_s")


async def run(bench: Bench, *, quick: bool, scale: float) -> JSON:
    """Every scenario of this module; results-file entries keyed as in :data:`KEYS`."""
    failovers, handovers, per_shard = QUICK if quick else FULL
    workload, uri = bench.new_workload(scale)
    replicas = ReplicaSet(bench)
    leader, standby = await lead(bench, replicas)
    try:
        log.info("replicas: deploying %d objects through the leader", workload.total)
        deployed = await operator_runs.deploy(bench, workload, uri)
        log.info("replicas: %d failovers (SIGKILL), lease duration %.0f s", failovers, LEASE_DURATION_S)
        killed, (leader, standby) = await failover(bench, deployed, replicas, leader, standby, failovers)
        log.info("replicas: %d handovers (SIGTERM, rolling update)", handovers)
        stopped, (leader, standby) = await handover(bench, deployed, replicas, leader, standby, handovers)
        await operator_runs.teardown(bench, deployed)
    finally:
        await replicas.stop_all()
    log.info("shards: %d KfDefs of %d objects over 3 shards", 3 * per_shard, fleet.OBJECTS_PER_KFDEF)
    sharded = await fleet.shards(bench, per_shard)
    log.info("shards: the same %d KfDefs with one operator", 3 * per_shard)
    unsharded = await fleet.single(bench, 3 * per_shard)
    results = {
        "ha.failover_s": summary([t.healed_s for t in killed], "s", objects=workload.total,
                                 lease_duration_s=LEASE_DURATION_S),
        "ha.takeover_s": summary([t.lease_s for t in killed], "s"),
        "ha.handover_s": summary([t.healed_s for t in stopped], "s"),
        "ha.handover_lease_s": summary([t.lease_s for t in stopped], "s"),
        "shards.fleet_s": summary([sharded.pop("converged_s")], "s", **sharded),
        "shards.single_s": summary([unsharded.pop("converged_s")], "s", **unsharded),
    }
    for entry in results.values():
        entry["value"] = entry["median"]
    results["ha.meta"] = {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                          "quick": quick, "load_average_at_end": os.getloadavg()}
    return results


def markdown(results: JSON) -> list[str]:
    """The report's section on replicas and shards (empty when the results hold none)."""
    if not all(key in results for key in KEYS):
        return []
    fail, hand = results["ha.failover_s"], results["ha.handover_s"]
    after_lease = statistics.median(healed - taken for healed, taken in
                                    zip(fail["samples"], results["ha.takeover_s"]["samples"], strict=True))
    sharded, single = results["shards.fleet_s"], results["shards.single_s"]
    meta = results.get("ha.meta") or {}
    from .markdown import _table  # the report's own table (imported here: the report imports this module)

    f = report._fmt  # noqa: SLF001 (the report's number format)

    def share(entry: JSON, *groups: str) -> str:
        used = entry["cpu"]["cpu_s"]
        return f"{sum(used[g] for g in groups) / sum(used.values()):.0%}"

    return [
        "## Replicas and shards",
        "",
        f"Measured on {meta.get('date', '?')}" + (" (quick mode)" if meta.get("quick") else "")
        + f", load average at the end {', '.join(f'{x:.1f}' for x in meta.get('load_average_at_end', ()))}; "
        "`python -m bench.ha` measures this section alone, in a session of its own. Targets: issue 16.",
        "",
        f"Two replicas with the default timings (lease {f(fail['lease_duration_s'])} s, renew deadline 10 s, retry "
        f"2 s) serving one KfDef of {fail['objects']} objects (`bench/replicas.py`):",
        "",
        f"- **Failover** (SIGKILL the leader at a random point of its renewal cycle, delete a Deployment at once): "
        f"the Deployment was back after {f(fail['median'])} s (median; {f(fail['min'])} to {f(fail['max'])} s over "
        f"{fail['n']} trials); the standby held the lease after {f(results['ha.takeover_s']['median'])} s and "
        f"healed {f(after_lease)} s later (median). The standby may take over only once the lease has expired on "
        "its own clock, counted from the last renewal it saw (the leader renews every 2 s): the figure is the lease "
        "duration minus the time since that renewal, plus the takeover reconcile: the KfDef read afresh, a render "
        "cache hit, a no-op apply but for the deleted object. The standby keeps that short by being warm (compare "
        "`noop.restart_s`, a cold start's first reconcile).",
        f"- **Graceful handover** (a rolling update's step: a new replica up and warm, then SIGTERM to the leader "
        f"and a Deployment deleted): back after {f(hand['median'])} s (median; max {f(hand['max'])} s, "
        f"{hand['n']} trials); a successor held the lease after "
        f"{f(results['ha.handover_lease_s']['median'])} s. The leader stops its work, then releases the lease; "
        "the standbys watch the Lease and take it at once.",
        "",
        f"A fleet of {sharded['kfdefs']} KfDefs of {fleet.OBJECTS_PER_KFDEF} objects ({sharded['objects']} objects; "
        f"`bench/fleet.py`), created at once:",
        "",
        *_table(["operators", "s to all Ready", "s to all gone", "KfDefs per operator", "writes per operator"],
                      [["3 shards", f(sharded["median"]), f(sharded["removed_s"]),
                        ", ".join(f"{k} {v}" for k, v in sharded["kfdefs_per_shard"].items()),
                        ", ".join(f"{k} {v}" for k, v in sharded["writes_per_shard"].items())],
                       ["1, unsharded", f(single["median"]), f(single["removed_s"]), str(single["kfdefs"]),
                        str(single["writes"])]]),
        "",
        f"Each KfDef was reconciled by exactly one shard, its own: {sharded['served_by_its_shard']} of "
        f"{sharded['kfdefs']} (by several: {sharded['served_by_several']}), read from each shard's own "
        "`kfdef_condition` gauges; `tests/reliability/test_high_availability.py` proves the same from "
        "kube-apiserver's audit log.",
        "",
        *_table(["CPU seconds, from creating the namespaces until all Ready", *sharded["cpu"]["cpu_s"], "cores used"],
                [[label, *(f(v) for v in entry["cpu"]["cpu_s"].values()),
                  f"{f(entry['cpu']['cores_used'])} of {entry['cpu']['cores']}"]
                 for label, entry in (("3 shards", sharded), ("1, unsharded", single))]),
        "",
        f"**What this 2-core machine limits.** Everything shares {sharded['cpu']['cores']} cores: the operators, "
        "kube-apiserver, etcd, the controller-manager, the scheduler, kwok, and whatever else ran on the machine "
        f"(load average above). Until all were Ready, the operators spent {share(sharded, 'operators')} of the "
        f"CPU the cluster used with three shards ({share(single, 'operators')} with one; kustomize renders "
        f"included), kube-apiserver and etcd {share(sharded, 'kube-apiserver', 'etcd')}. Three shards took "
        f"{f(sharded['median'] / single['median'])} times the unsharded time with about the same CPU "
        f"({f(sum(sharded['cpu']['cpu_s'].values()))} against {f(sum(single['cpu']['cpu_s'].values()))} CPU "
        "seconds): one operator process is one asyncio loop (its fetch/render threads and kustomize subprocesses "
        "aside) and leaves a core idle while it waits on the API server; three overlap their waits and kept the "
        f"cores busier ({f(sharded['cpu']['cores_used'])} against {f(single['cpu']['cores_used'])} cores used over "
        "the run). Shards cannot "
        "add cores here: on separate nodes each shard brings its own, while kube-apiserver and etcd serve every "
        "shard's writes and do not grow with them. Failover and handover times do not depend on the CPU: the "
        "first is the lease duration by design, the second a few requests.",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ha", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials and a smaller fleet")
    parser.add_argument("--out", type=Path, help="results file to merge into (default bench/results.json; "
                                                 "with --quick build/bench-quick/results.json)")
    parser.add_argument("--docs", type=Path, help="where benchmarks.md and .png go (default docs/; with --quick "
                                                  "build/bench-quick/)")
    args = parser.parse_args(argv)
    quick_dir = ROOT / "build" / "bench-quick"
    out = args.out or (quick_dir / "results.json" if args.quick else ROOT / "bench" / "results.json")
    docs = args.docs or (quick_dir if args.quick else ROOT / "docs")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    with tempfile.TemporaryDirectory(prefix="kfdef-bench-ha-", dir="/dev/shm") as work_dir:
        figures = asyncio.run(run_alone(Path(work_dir), lambda bench: run(bench, quick=args.quick,
                                                                          scale=0.25 if args.quick else 1.0)))
    results = json.loads(out.read_text()) if out.exists() else {}
    results.update(figures)
    out.parent.mkdir(parents=True, exist_ok=True)
    if "meta" in results:  # a whole session's results: the report can be written again
        report.write(results, out, docs)
    else:
        out.write_text(json.dumps(results, indent=2) + "\n")
    log.info("wrote %s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
