"""Replicas and shards: failover, graceful handover, and a fleet of KfDefs over three shards versus one operator.

``python -m bench`` runs these scenarios after the others (the single operator process of the other scenarios
stopped). ``python -m bench.ha [--quick]`` runs them alone on a control plane of their own and merges their
figures into an existing results file (everything else in it is kept), then writes the report again.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import os
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as ``python bench/ha.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"  # noqa: A001


from kfdef_operator.api.types import JSON  # noqa: E402

from . import fleet, operator_runs  # noqa: E402
from .context import Bench  # noqa: E402
from .replicas import LEASE_DURATION_S, ReplicaSet, failover, handover, lead  # noqa: E402
from .standalone import add_output_arguments, merge_into, output_paths, run_alone  # noqa: E402
from .stats import summary  # noqa: E402

log = logging.getLogger("bench.ha")

#: (failover trials, handover trials, KfDefs per shard) for the full and the quick run.
FULL, QUICK = (5, 5, 100), (2, 2, 10)


async def run(bench: Bench, *, quick: bool, scale: float) -> JSON:
    """Every scenario of this module; results-file entries keyed as in :data:`bench.results.HA_KEYS`."""
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ha", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials and a smaller fleet")
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    out, docs = output_paths(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    with tempfile.TemporaryDirectory(prefix="kfdef-bench-ha-", dir="/dev/shm") as work_dir:
        figures = asyncio.run(run_alone(Path(work_dir), lambda bench: run(bench, quick=args.quick,
                                                                          scale=0.25 if args.quick else 1.0)))
    merge_into(out, docs, figures)
    log.info("wrote %s", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
