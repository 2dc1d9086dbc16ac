"""``python -m bench.memory``: the operator's resident memory with Kubeflow v1.11.0 deployed, and its heal latency,
in a session of their own (``python -m bench`` measures each once, among everything else).

- ``release``: rounds of the release (``bench/release.py``), each with an operator process started for it: the KfDef
  applied, the resident memory read ``RSS_SETTLE_S`` after Ready (``release.rss_mb`` of the full session); the
  operator restarted, its resume reconcile (the no-op) done, the memory read again after as long; the teardown.
- ``heal``: the synthetic workload deployed, the operator restarted (as in ``python -m bench``, its heals follow a
  no-op restart), Deployments deleted one at a time, each followed by a copy of it that the heal floor puts back
  (``bench/heal.py``).

The figures go to ``build/bench-memory/results.json`` (or ``--out``) and to the log, medians first. Must run inside
``tools/netns-run``, with ``KFDEF_STACKS_DIR`` naming the release archives.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as ``python bench/memory.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"  # noqa: A001

from . import heal, operator_runs, release  # noqa: E402
from .context import Bench, stack_resources  # noqa: E402
from .scale import RSS_SETTLE_S  # noqa: E402
from .standalone import run_alone  # noqa: E402
from .stats import summary  # noqa: E402

log = logging.getLogger("bench.memory")
ROOT = Path(__file__).resolve().parents[1]
#: Lines of ``/proc/<pid>/status`` read, in MiB: the whole resident set, and its anonymous and file-backed parts.
STATUS_FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")


def resident_mb(pid: int) -> dict[str, float]:
    """:data:`STATUS_FIELDS` of a process, in MiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in STATUS_FIELDS:
            found[key] = round(int(value.split()[0]) / 1024, 1)
    return found


def _operator_mb(bench: Bench) -> dict[str, float]:
    assert bench.operator.popen is not None
    return resident_mb(bench.operator.popen.pid)


async def release_rounds(bench: Bench, rounds: int) -> dict[str, list]:
    """Memory at rest after each round's first apply (``applied``) and after its no-op restart (``restarted``)."""
    prepared = await release.prepare(bench)
    measured: dict[str, list] = {"applied": [], "restarted": [], "applied_s": [], "restart_writes": []}
    for index in range(rounds):
        await asyncio.to_thread(bench.operator.restart)
        log.info("round %d: the release applied by a fresh operator (%.0f MiB)", index + 1,
                 _operator_mb(bench)["VmRSS"])
        deployed = await release.deploy(bench, prepared)
        await asyncio.sleep(RSS_SETTLE_S)
        measured["applied"].append(_operator_mb(bench))
        measured["applied_s"].append(deployed.applied_s)
        restart = await operator_runs.noop_restart(bench, prepared.resources)
        await asyncio.sleep(RSS_SETTLE_S)
        measured["restarted"].append(_operator_mb(bench))
        measured["restart_writes"].append(restart["writes_operator"])
        log.info("round %d: %s after the apply, %s after the restart", index + 1, measured["applied"][-1],
                 measured["restarted"][-1])
        await release.teardown(bench, prepared, deployed)
    return measured


async def heal_round(bench: Bench, trials: int) -> dict[str, list[float]]:
    """Milliseconds of ``trials`` Deployment heals on the synthetic workload, after a no-op restart (its resume
    reconcile done, as in ``python -m bench``: a delete during that reconcile measures the reconcile), and of as
    many of the heal floor's (``heal.deployments``)."""
    await asyncio.to_thread(bench.operator.restart)
    workload, uri = bench.new_workload(1.0)
    deployed = await operator_runs.deploy(bench, workload, uri)
    await operator_runs.noop_restart(bench, stack_resources([workload]))
    samples = await heal.deployments(bench, deployed, trials)
    await operator_runs.teardown(bench, deployed)
    return samples


def _figures(measured: dict[str, list], heal_ms: dict[str, list[float]]) -> dict:
    figures: dict = {}
    for moment in ("applied", "restarted"):
        for field in STATUS_FIELDS:
            samples = [reading[field] for reading in measured.get(moment, [])]
            if samples:
                figures[f"release.{moment}.{field}_mb"] = summary(samples, "MiB")
    if measured.get("applied_s"):
        figures["release.apply.operator_s"] = summary(measured["applied_s"], "s")
        figures["release.restart.writes"] = summary(measured["restart_writes"], "requests")
    if heal_ms:
        figures.update(heal.figures(heal_ms))
    return figures


async def _session(bench: Bench, rounds: int, heal_trials: int) -> dict:
    await asyncio.to_thread(bench.operator.start)
    try:
        heal_ms = await heal_round(bench, heal_trials) if heal_trials else {}
        measured = await release_rounds(bench, rounds) if rounds else {}
    except BaseException:
        log.error("failed; operator log tail:\n%s", bench.operator.log_tail(60))
        raise
    finally:
        await asyncio.to_thread(bench.operator.stop)
    return _figures(measured, heal_ms)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the release (0: none)")
    parser.add_argument("--heal-trials", type=int, default=100, help="Deployment heals (0: none)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "bench-memory" / "results.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    with tempfile.TemporaryDirectory(prefix="kfdef-bench-memory-", dir="/dev/shm") as work_dir:
        figures = asyncio.run(run_alone(Path(work_dir), lambda bench: _session(bench, args.rounds, args.heal_trials)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=1) + "\n")
    for key, entry in figures.items():
        log.info("%s: %s %s (min %s, max %s, n %d)", key, round(entry.get("value", entry["median"]), 1),
                 entry["unit"], entry["min"], entry["max"], entry["n"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
