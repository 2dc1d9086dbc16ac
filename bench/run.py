"""``python -m bench``: every scenario on one embedded control plane; writes results and the report.

Rounds interleave the three apply paths (operator, kubectl, floor) so that
noise from other work on the machine spreads over all of them alike. Each
round uses fresh names and removes what it created before the next one.
Must run inside ``tools/netns-run`` (see ``make bench``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as ``python bench/run.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"  # noqa: A001 (lets the relative imports below resolve)

from kfdef_dev.process import LocalSourcesOperator  # noqa: E402
from kfdef_operator.ssa.client import KubeClient  # noqa: E402

from . import baselines, ha, heal, operator_runs, release, report, scale, status_write, upgrade  # noqa: E402
from .archive_server import ArchiveServer  # noqa: E402
from .cluster import audit_offset, start_control_plane, writes_by_client  # noqa: E402
from .context import APPLY_PHASE_NOTE, KFDEFS_PATH, Bench, cpu_used, run_selector, stack_resources  # noqa: E402
from .environment import describe  # noqa: E402
from .plan import FULL, QUICK, SKIPPABLE, Plan  # noqa: E402
from .stats import cpu_summary, steps_summary, summary  # noqa: E402
from .streams import EventStream  # noqa: E402

log = logging.getLogger("bench")
ROOT = Path(__file__).resolve().parents[1]


async def _round(bench: Bench, plan: Plan, index: int, raw: dict[str, list]) -> None:
    """One operator run (apply, heal in the first round, no-op restart, teardown), then kubectl, then floor."""
    workload, uri = bench.new_workload(plan.scale)
    raw["workloads"].append(workload)
    log.info("round %d: operator apply of %d objects", index + 1, workload.total)
    deployed = await operator_runs.deploy(bench, workload, uri)
    raw["apply.operator_s"].append(deployed.applied_s)
    if deployed.apply_phase_s is not None:
        raw["apply.apply_phase_s"].append(deployed.apply_phase_s)
    raw["apply.operator_ready_s"].append(deployed.ready_s)
    raw["apply.operator_steps"].append(deployed.steps)
    raw["cpu.apply.operator"].append(deployed.cpu)
    log.info("no-op restart")
    raw["noop"].append(await operator_runs.noop_restart(bench, stack_resources([workload])))
    if index == 0:
        log.info("heal: %d Deployment deletes, %d namespace and CRD deletes", plan.heal_trials, plan.cascade_trials)
        audited_from = audit_offset(bench.control_plane)
        raw["heal.deployment_ms"] = await heal.deployments(bench, deployed, plan.heal_trials)
        raw["heal.writes"] = writes_by_client(bench.control_plane, audited_from)
        raw["heal.namespace_s"] = await heal.namespaces(bench, deployed, plan.cascade_trials)
        raw["heal.crd_s"] = await heal.crds(bench, deployed, plan.cascade_trials)
    log.info("teardown")
    before = bench.cpu()
    raw["teardown.s"].append(await operator_runs.teardown(bench, deployed, waves=raw["teardown.waves"]))
    raw["cpu.teardown.operator"].append(cpu_used(before, bench.cpu()))

    for path in ("kubectl", "floor"):
        workload, uri = bench.new_workload(plan.scale)
        rendered, render_s = await asyncio.to_thread(baselines.render, bench, workload, uri)
        raw["render.s"].append(render_s)
        objects = baselines.load(rendered)
        log.info("round %d: %s apply of %d objects", index + 1, path, len(objects))
        if path == "kubectl":
            crds = ("crd", "-l", run_selector(workload))
            raw["kubectl"].append(await baselines.kubectl_apply(bench, rendered, crds))
        else:
            trees = await asyncio.to_thread(baselines.workload_trees, bench, workload, uri)
            raw["apply.render_floor_s"].append(await asyncio.to_thread(baselines.kustomize_alone, trees))
            before = bench.cpu()
            raw["apply.floor_s"].append(await baselines.floor_apply(bench, objects))
            middle = bench.cpu()
            raw["teardown.floor_s"].append(await baselines.floor_teardown(bench, objects))
            raw["cpu.apply.floor"].append(cpu_used(before, middle))
            raw["cpu.teardown.floor"].append(cpu_used(middle, bench.cpu()))
        await baselines.delete_applied(bench, objects)


async def _idle_with_both(bench: Bench, plan: Plan, prepared: release.Release, raw: dict[str, list]) -> dict:
    """The release's first operator round, with a synthetic stack deployed beside it: the release alone at rest
    (resident memory), then both through a no-op restart and ``plan.idle_window_s`` at rest (writes on the
    server by anyone, the operator's requests, resident memory); both torn down. The release's round figures."""
    deployed_release = await release.deploy(bench, prepared)
    await asyncio.sleep(scale.RSS_SETTLE_S)
    raw["release.rss_mb"].append(bench.operator_rss_mb())
    workload, uri = bench.new_workload(plan.scale)
    log.info("idle: a synthetic stack of %d objects beside the release", workload.total)
    deployed = await operator_runs.deploy(bench, workload, uri)
    resources = stack_resources([workload]) | prepared.resources
    log.info("no-op restart with both stacks")
    raw["release.noop"].append(await operator_runs.noop_restart(bench, resources))
    log.info("idle for %.0f s with both stacks", plan.idle_window_s)
    raw["idle"].append(await operator_runs.idle(bench, resources, window_s=plan.idle_window_s,
                                                settle_s=plan.idle_settle_s))
    before, waves = bench.cpu(), []
    teardown_s = await release.teardown(bench, prepared, deployed_release, waves)
    teardown_cpu = cpu_used(before, bench.cpu())
    await operator_runs.teardown(bench, deployed)
    return release.round_figures(deployed_release, teardown_s, teardown_cpu, waves[0])


async def _release(bench: Bench, plan: Plan, prepared: release.Release, raw_all: dict[str, list]) -> dict:
    """Rounds of the real release, each path in turn (operator, kubectl, floor); its results entries."""
    raw: dict[str, list] = {"operator": [], "kubectl": [], "floor": []}
    for index in range(plan.release_rounds):
        log.info("release round %d: operator, kubectl and floor apply of %d objects", index + 1,
                 len(prepared.objects))
        if index == 0:
            raw["operator"].append(await _idle_with_both(bench, plan, prepared, raw_all))
        else:
            raw["operator"].append(await release.operator_round(bench, prepared))
        raw["kubectl"].append(await release.kubectl_round(bench, prepared))
        raw["floor"].append(await release.floor_round(bench, prepared))
    return release.results(prepared, raw)


async def _scale(bench: Bench, plan: Plan, raw: dict[str, list]) -> None:
    for index in range(0 if "many" in plan.skip else plan.many_rounds):
        log.info("scale: %d KfDefs at once (%d/%d)", plan.many_kfdefs, index + 1, plan.many_rounds)
        raw["many"].append(await scale.many(bench, plan.many_kfdefs))
    for size in plan.sweep:
        log.info("scale: one KfDef at x%g of the workload", size)
        try:
            raw["sweep"].append(await scale.sweep_point(bench, size * plan.scale))
        except (RuntimeError, TimeoutError) as error:  # recorded: the session's other figures stand
            log.error("scale: x%g failed: %s\n%s", size, error, bench.operator.log_tail(40))
            raw["sweep_failures"].append({"scale": size * plan.scale, "error": str(error)[:2000]})
            await bench.remove_kfdefs()


def _results(plan: Plan, raw: dict[str, list], base_objects: int) -> dict:
    noop, idle, kubectl, many = raw["noop"], raw["idle"][0], raw["kubectl"], raw["many"]
    results = {
        "apply.operator_s": summary(raw["apply.operator_s"], "s", objects=base_objects),
        "apply.operator_ready_s": summary(raw["apply.operator_ready_s"], "s"),
        "apply.kubectl_ssa_s": summary([k["s"] for k in kubectl], "s", steps=kubectl),
        "apply.floor_s": summary(raw["apply.floor_s"], "s", concurrency=baselines.FLOOR_CONCURRENCY),
        "apply.render_floor_s": summary(raw["apply.render_floor_s"], "s", note=baselines.RENDER_FLOOR_NOTE),
        "render.s": summary(raw["render.s"], "s", note="kfdef-operator build (not part of kubectl/floor figures)"),
        "noop.writes": summary([n["writes_operator"] for n in noop], "requests",
                               operator_client=[n["writes_operator_client"] for n in noop],
                               by_request=[n["writes_operator_by_request"] for n in noop],
                               others=[n["writes_others"] for n in noop],
                               server_stack_writes=[n["writes_server_by_request"] for n in noop]),
        "noop.s": summary([n["s"] for n in noop], "s"),
        "noop.restart_s": summary([n["restart_s"] for n in noop], "s"),
        "noop.reconcile_s": summary([n["reconcile_s"] for n in noop], "s"),
        **heal.figures(raw["heal.deployment_ms"], writes_by_client=raw["heal.writes"]),
        "heal.namespace_s": summary(raw["heal.namespace_s"], "s", resolution="watch events"),
        "heal.crd_s": summary(raw["heal.crd_s"], "s", resolution=f"GET every {heal.POLL_S * 1000:.0f} ms"),
        "teardown.s": summary(raw["teardown.s"], "s", waves=raw["teardown.waves"]),
        "teardown.floor_s": summary(raw["teardown.floor_s"], "s", concurrency=baselines.FLOOR_CONCURRENCY),
        "idle.rss_mb": summary([idle["rss_mb"]], "MiB"),
        "idle.requests_per_min": summary([idle["requests_per_min"]], "requests/min",
                                         by_verb=idle["requests_by_verb"], window_s=idle["window_s"],
                                         server_reads_per_min_all_clients=idle["server_reads_per_min_all_clients"]),
        "idle.writes": summary([idle["writes_operator"]], "requests", by_request=idle["writes_operator_by_request"],
                               others=idle["writes_others"], server_stack_writes=idle["server_writes_by_request"],
                               window_s=idle["window_s"], stacks="synthetic + release"),
        "release.rss_mb": summary(raw["release.rss_mb"], "MiB", note="the release alone, at rest after its apply"),
        "release.noop.writes": summary([n["writes_operator"] for n in raw["release.noop"]], "requests",
                                       stacks="synthetic + release",
                                       by_request=[n["writes_operator_by_request"] for n in raw["release.noop"]],
                                       others=[n["writes_others"] for n in raw["release.noop"]]),
        "apply.steps": steps_summary(raw["apply.operator_steps"]),
        "cpu": {key[len("cpu."):]: cpu_summary(raw[key]) for key in
                ("cpu.apply.operator", "cpu.apply.floor", "cpu.teardown.operator", "cpu.teardown.floor")},
        "idle.watches": {"value": sum(noop[0]["operator_watches"].values()), "unit": "watches",
                         "by_resource": noop[0]["operator_watches"]},
        "scale.sweep": raw["sweep"],
        "scale.sweep_failures": raw["sweep_failures"],
    }
    if raw["apply.apply_phase_s"]:
        results["apply.apply_phase_s"] = summary(raw["apply.apply_phase_s"], "s", note=APPLY_PHASE_NOTE)
    if many:
        results["scale.kfdefs_s"] = summary([m["s"] for m in many], "s", kfdefs=plan.many_kfdefs,
                                            objects=many[0]["objects"], teardown_s=[m["teardown_s"] for m in many])
    for entry in results.values():
        if isinstance(entry, dict):
            entry.setdefault("value", entry.get("median"))
    return results


async def _session(plan: Plan, work_dir: Path, out: Path, docs: Path) -> dict:
    started = time.monotonic()
    control_plane = await asyncio.to_thread(start_control_plane)
    raw: dict[str, list] = {k: [] for k in ("apply.operator_s", "apply.operator_ready_s", "apply.floor_s", "render.s",
                                            "apply.render_floor_s", "apply.apply_phase_s",
                                            "kubectl", "noop", "idle", "teardown.s", "teardown.floor_s", "many",
                                            "sweep", "sweep_failures", "workloads", "release.rss_mb",
                                            "release.noop", "apply.operator_steps", "cpu.apply.operator",
                                            "cpu.teardown.operator", "cpu.apply.floor", "cpu.teardown.floor",
                                            "teardown.waves")}
    kube = await KubeClient.connect(str(control_plane.kubeconfig))
    archive_dir = work_dir / "archives"
    archive_dir.mkdir(parents=True, exist_ok=True)
    operator = LocalSourcesOperator(control_plane.kubeconfig, work_dir / "operator")
    try:
        with ArchiveServer(archive_dir) as archives:
            kfdefs = await EventStream(kube, KFDEFS_PATH).start()
            await asyncio.to_thread(operator.start)
            bench = Bench(control_plane, kube, archives, work_dir, operator, kfdefs)
            for index in range(plan.rounds):
                await _round(bench, plan, index, raw)
            prepared = await release.prepare(bench)
            released = await _release(bench, plan, prepared, raw)
            upgraded = {} if "upgrade" in plan.skip else await upgrade.measure(
                bench, plan.upgrade_rounds, quick=plan.quick, new=prepared)
            await _scale(bench, plan, raw)
            await asyncio.to_thread(operator.stop)  # replicas and shards bring their own operators
            log.info("status writes: kube-apiserver's CPU per write, by inventory format")
            status_writes = await status_write.measure(bench)
            replicas_and_shards = {} if "ha" in plan.skip else await ha.run(bench, quick=plan.quick, scale=plan.scale)
            profile = None
            if plan.profile and "profile" not in plan.skip:
                from . import profile_apply
                await asyncio.to_thread(operator.stop)
                profile = await profile_apply.profile(bench, plan.scale, out.parent)
            await kfdefs.close()
            environment = await describe(bench, raw["workloads"][0], plan)
    except BaseException:
        log.error("benchmark failed; operator log tail:\n%s", operator.log_tail(80))
        raise
    finally:
        operator.stop()
        await kube.close()
        await asyncio.to_thread(control_plane.stop)
    results = _results(plan, raw, raw["workloads"][0].total)
    results.update(replicas_and_shards)
    results.update(released)
    results.update(upgraded)
    results.update(status_writes)
    results["profile"] = profile
    results["meta"] = {**environment, "duration_s": round(time.monotonic() - started, 1),
                       "skipped": sorted(plan.skip), "commit": _commit()}
    return results


def _commit() -> str:
    """The commit measured (``$KFDEF_BENCH_COMMIT`` when the tree is no git checkout)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("KFDEF_BENCH_COMMIT", "unknown")


def _carry_over(results: dict, previous: Path, skip: frozenset[str]) -> None:
    """Entries of the skipped parts taken from the previous results file (their own session's figures)."""
    if not skip or not previous.exists():
        return
    old = json.loads(previous.read_text())
    prefixes = tuple(prefix for part in skip for prefix in SKIPPABLE[part])
    for key, value in old.items():
        if key.startswith(prefixes) and not results.get(key):
            results[key] = {**value, "session": value.get("session") or old["meta"]["date"]} if isinstance(
                value, dict) and "median" in value else value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and a smaller workload (development)")
    parser.add_argument("--no-profile", action="store_true", help="skip the pyinstrument profile of the apply path")
    parser.add_argument("--skip", default="", help=f"comma-separated parts not to run ({', '.join(SKIPPABLE)}); "
                                                     "their figures are carried over from the results file")
    parser.add_argument("--idle-window", type=float, help="seconds at rest for the idle figures")
    parser.add_argument("--rounds", type=int, help="rounds of the synthetic workload (and of the release)")
    parser.add_argument("--sweep", help="comma-separated sizes of the sweep, as multiples of the workload")
    parser.add_argument("--report-only", action="store_true",
                        help="only write benchmarks.md and .png again from an existing results file")
    parser.add_argument("--out", type=Path, help="results file (default bench/results.json; "
                                                 "with --quick build/bench-quick/results.json)")
    parser.add_argument("--docs", type=Path, help="where benchmarks.md and .png go (default docs/; "
                                                  "with --quick build/bench-quick/)")
    args = parser.parse_args(argv)
    quick_dir = ROOT / "build" / "bench-quick"
    args.out = args.out or (quick_dir / "results.json" if args.quick else ROOT / "bench" / "results.json")
    args.docs = args.docs or (quick_dir if args.quick else ROOT / "docs")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if args.report_only:
        report.write(json.loads(args.out.read_text()), args.out, args.docs)
        return 0
    plan = QUICK if args.quick else FULL
    if args.no_profile:
        plan = dataclasses.replace(plan, profile=False)
    skip = frozenset(part for part in args.skip.split(",") if part)
    if skip - set(SKIPPABLE):
        parser.error(f"--skip: unknown parts {sorted(skip - set(SKIPPABLE))}")
    plan = dataclasses.replace(plan, skip=skip, idle_window_s=args.idle_window or plan.idle_window_s)
    if args.rounds:
        plan = dataclasses.replace(plan, rounds=args.rounds, release_rounds=min(args.rounds, plan.release_rounds),
                                   upgrade_rounds=min(args.rounds, plan.upgrade_rounds))
    if args.sweep:
        plan = dataclasses.replace(plan, sweep=tuple(float(size) for size in args.sweep.split(",")))
    with tempfile.TemporaryDirectory(prefix="kfdef-bench-", dir="/dev/shm") as work_dir:
        results = asyncio.run(_session(plan, Path(work_dir), args.out, args.docs))
    _carry_over(results, args.out, skip)
    args.out.with_suffix(".raw.json").write_text(json.dumps(results, indent=1,
                                                            default=repr) + "\n")  # kept if the report fails
    report.write(results, args.out, args.docs)
    log.info("wrote %s, %s", args.out, args.docs / "benchmarks.md")
    not_ready = upgrade.failures(results)
    for failure in not_ready:
        log.error("the day-2 upgrade was not Ready in time: %s", failure)
    return 1 if not_ready else 0


if __name__ == "__main__":
    sys.exit(main())
