"""Day 2 (issue 38): a running Kubeflow v1.2.0 moved to v1.11.0 by editing its KfDef, against what the edit spares
a platform engineer: tearing v1.2.0 down and deploying v1.11.0 afresh.

Both releases as ``bench/release.py`` serves them (what this cluster cannot serve left out, v1.11.0's example
Profile named as the kustomize it pins does): v1.2.0 from kfctl's ``kfctl_k8s_istio`` KfDef (stacks mode), v1.11.0
from ``example/`` (plain mode). Each round, on one control plane and one operator process:

- **upgrade**: a KfDef of v1.2.0 created until Ready; its spec replaced by v1.11.0's in one request, timed from
  that request's answer until the first apply of the new generation is done (``upgrade.applied_s``: Reconciling
  False for it, whatever failed; its steps as its status announced them) and until the KfDef is Ready for it
  (``upgrade.ready_s``). What the operator did meanwhile: objects its applies wrote, by action (its
  ``kfdef_objects_applied`` counter; a re-created object counts as created), objects it pruned or held for the data
  they hold (its ``Pruned`` Events), objects it re-created for an immutable field and CRDs whose stored versions it
  migrated (its log), and its writes and every other client's (kube-apiserver's audit log). The stack is then torn
  down: nothing of either release may be left.
- **replacement**: v1.2.0 deployed again until Ready; its KfDef deleted until gone (``upgrade.teardown_s``), then a
  fresh KfDef of v1.11.0 created until Ready (``upgrade.fresh_ready_s``), the writes of both counted as above; the
  new stack torn down.

An upgrade that is not Ready for its new generation within the timeout (the operator's health deadline) is its
round's failure: the round's record holds the KfDef's conditions, failures and warnings, and the time its first
apply took when it got that far; the stack is torn down and the rounds go on, so that the rest is measured; the run
then ends in an error (``python -m bench`` too, once its report is written).

``python -m bench.upgrade [--quick]`` runs the rounds alone on a control plane of their own, merges their figures
into an existing results file (its earlier ``upgrade.*`` entries replaced, everything else kept) and writes the
report again; ``python -m bench`` runs them after the real release's rounds. Must run inside ``tools/netns-run``,
with ``KFDEF_STACKS_DIR`` naming the release archives (``make bench`` sets both).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as ``python bench/upgrade.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"  # noqa: A001

from kfdef_operator.api.types import JSON  # noqa: E402

from . import release  # noqa: E402
from .cluster import KFDEF_NAMESPACE, writes_by_client  # noqa: E402
from .context import KFDEFS_PATH, Bench, cpu_used  # noqa: E402
from .operator_runs import attributed  # noqa: E402
from .standalone import add_output_arguments, merge_into, output_paths, run_alone  # noqa: E402
from .stats import cpu_summary, steps_summary, summary  # noqa: E402
from .streams import Arrival  # noqa: E402

log = logging.getLogger("bench.upgrade")
#: Rounds of a full and of a quick run.
FULL_ROUNDS, QUICK_ROUNDS = 3, 1
#: Seconds from the edit until the KfDef must be Ready for its new generation: the operator's own health deadline
#: (``--health-timeout``), past which it calls the stack Degraded. A fresh v1.11.0 deploy takes about 20 s here.
READY_TIMEOUT_S = 300.0
#: What the operator logs when it re-creates an object for an immutable field (``ssa/apply.py``) and when it has
#: migrated a CRD's stored versions (``ssa/migration.py``); a CRD's reference is its kind and its name.
_RECREATED = re.compile(r"re-creating (?P<ref>.+?): an immutable field changed")
_MIGRATED = re.compile(r"(?P<crd>CustomResourceDefinition\S* \S+): stored versions migrated: (?P<objects>\d+) ")
#: The operator's counter of objects its applies wrote, by action (``runtime/metrics.py``), as ``/metrics`` names it.
_APPLIED = 'kfdef_objects_applied_total{action="'
#: What a prune did, as its ``Pruned`` Event counts it (``pruned objects no longer rendered: 3 deleted, 1 held``).
_PRUNE_COUNT = re.compile(r"(?P<count>\d+) (?P<action>[a-z]+)")
#: The failures of the first apply kept per round (status.failures lists a few more).
_FAILURES_KEPT = 10
#: What ``upgrade.rounds`` keeps of each round's upgrade (:func:`upgrade_round`).
_ROUND_KEYS = ("applied_s", "ready_s", "failure", "applied", "pruned", "recreated", "migrated",
               "first_apply_failures")


@dataclass(frozen=True)
class Releases:
    """The release a round starts from and the one its KfDef is edited to."""

    old: release.Release
    new: release.Release


async def prepare(bench: Bench, new: release.Release | None = None) -> Releases:
    """v1.2.0 prepared to be served, and v1.11.0 (``new``, when the session prepared it already)."""
    old = await release.prepare(bench, release.V1_2_0)
    return Releases(old, new or await release.prepare(bench, release.V1_11_0))


def _condition(obj: JSON, type_: str) -> JSON:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), {})


def reconciled_for(generation: int) -> Callable[[JSON], bool]:
    """Whether a KfDef's status says the first apply of ``generation`` is done (whatever failed)."""
    def done(obj: JSON) -> bool:
        status, reconciling = obj.get("status") or {}, _condition(obj, "Reconciling")
        return (status.get("observedGeneration") == generation and "summary" in status
                and reconciling.get("status") == "False" and reconciling.get("observedGeneration") == generation)
    return done


def ready_for(generation: int) -> Callable[[JSON], bool]:
    """Whether a KfDef is Ready for ``generation`` (an older generation's Ready does not count)."""
    def ready(obj: JSON) -> bool:
        condition = _condition(obj, "Ready")
        return ((obj.get("status") or {}).get("observedGeneration") == generation
                and condition.get("status") == "True" and condition.get("observedGeneration") == generation)
    return ready


def why_not_ready(obj: JSON) -> str:
    """A KfDef's conditions, failures and warnings, as a round's failure tells them."""
    status = obj.get("status") or {}
    conditions = "; ".join(f"{c.get('type')}={c.get('status')} ({c.get('reason')}, generation "
                           f"{c.get('observedGeneration')}): {c.get('message')}"
                           for c in status.get("conditions") or [])
    failed = "; ".join(f"{f.get('object')}: {f.get('message')}" for f in status.get("failures") or [])
    warnings = "; ".join(status.get("warnings") or [])
    return (f"observedGeneration {status.get('observedGeneration')}, summary {status.get('summary')}; conditions: "
            f"{conditions or 'none'}; failures: {failed or 'none'}; warnings: {warnings or 'none'}")


async def _wait(bench: Bench, name: str, predicate: Callable[[JSON], bool], *, after: int,
                deadline: float) -> Arrival | None:
    """The first event of KfDef ``name`` past ``after`` satisfying ``predicate``, by ``deadline`` (monotonic); None
    when there was none by then."""
    try:
        return await bench.kfdefs.wait_for(
            lambda arrival: arrival.name == name and arrival.type != "DELETED" and predicate(arrival.object),
            after=after, timeout=max(deadline - time.monotonic(), 0.0))
    except TimeoutError:
        return None


def _not_ready(bench: Bench, name: str, generation: int, timeout: float, applied_s: float | None) -> str:
    """Why the edited KfDef ``name`` is not Ready for ``generation``, from its last status."""
    last = bench.kfdefs.latest(lambda arrival: arrival.name == name)
    first = "its first apply not done" if applied_s is None else f"its first apply done after {applied_s:.1f} s"
    return (f"KfDef {name} edited from Kubeflow v1.2.0 to v1.11.0: not Ready for generation {generation} "
            f"{timeout:.0f} s after the edit ({first}); {why_not_ready(last.object if last else {})}")


async def upgrade(bench: Bench, releases: Releases, deployed: release.DeployedRelease, *, timeout: float) -> dict:
    """The running KfDef ``deployed`` (v1.2.0, Ready) given v1.11.0's spec: seconds until its first apply was done
    (and of each of its steps) and until it was Ready, what its applies did, the writes and the CPU it took. Not
    Ready within ``timeout``: ``ready_s`` is None and ``failure`` says why (``applied_s`` too when the first apply
    was not done), and what was counted runs until then."""
    mark, audit_mark, log_from = bench.kfdefs.mark(), bench.audit_mark(), bench.operator_log_offset()
    metrics_before, cpu_before = await bench.operator_metrics(), bench.cpu()
    edited = await bench.kube.request("PATCH", f"{KFDEFS_PATH}/{deployed.name}",
                                      content_type="application/json-patch+json",
                                      body=[{"op": "replace", "path": "/spec", "value": releases.new.kfdef["spec"]}])
    started = time.monotonic()
    generation = edited["metadata"]["generation"]
    applied = await _wait(bench, deployed.name, reconciled_for(generation), after=mark, deadline=started + timeout)
    applied_s = None if applied is None else applied.at - started
    ready = None if applied is None else await _wait(bench, deployed.name, ready_for(generation), after=mark,
                                                     deadline=started + timeout)
    by_client = writes_by_client(bench.control_plane, audit_mark)
    cpu = cpu_used(cpu_before, bench.cpu())
    metrics = await bench.operator_metrics()
    operator_log = bench.operator_log_since(log_from)
    status = {} if applied is None else applied.object["status"]
    return {"applied_s": applied_s, "ready_s": None if ready is None else ready.at - started,
            "failure": None if ready is not None else _not_ready(bench, deployed.name, generation, timeout,
                                                                  applied_s),
            "cpu": cpu, **attributed(by_client),
            "steps": {} if applied is None else bench.steps(deployed.name, after=mark, started=started,
                                                            applied=applied.at),
            "applied": {key[len(_APPLIED):-2]: int(value - metrics_before.get(key, 0))
                        for key, value in sorted(metrics.items())
                        if key.startswith(_APPLIED) and value != metrics_before.get(key, 0)},
            "recreated": [m["ref"] for m in _RECREATED.finditer(operator_log)],
            "migrated": {m["crd"].split(" ")[1]: int(m["objects"]) for m in _MIGRATED.finditer(operator_log)},
            "first_apply_failures": [{"object": f.get("object"), "message": f.get("message")}
                                     for f in status.get("failures") or []][:_FAILURES_KEPT]}


async def upgrade_round(bench: Bench, releases: Releases, *, timeout: float) -> dict:
    """v1.2.0 deployed, upgraded to v1.11.0 (:func:`upgrade`), torn down (Ready or not); checks that nothing of
    either is left."""
    deployed = await release.deploy(bench, releases.old)
    log.info("upgrade: v1.2.0 Ready after %.1f s; editing its KfDef to v1.11.0", deployed.ready_s)
    deployed.volumes += await release.simulated_storage(bench, releases.new.claims)
    measured = await upgrade(bench, releases, deployed, timeout=timeout)
    if measured["failure"] is not None:
        log.error("upgrade: %s\noperator log tail:\n%s", measured["failure"], bench.operator.log_tail(40))
    else:
        log.info("upgrade: first apply done after %.1f s, Ready after %.1f s; %d writes of the operator; applied %s, "
                 "%d re-created, migrated %s", measured["applied_s"], measured["ready_s"], measured["writes_operator"],
                 measured["applied"], len(measured["recreated"]), measured["migrated"])
    await release.teardown(bench, releases.new, deployed)
    left = await release.remaining(bench, releases.old.objects)
    if left:
        raise RuntimeError(f"the upgraded stack's teardown left {len(left)} objects of v1.2.0, e.g. {left[:5]}")
    return {**measured, "old_ready_s": deployed.ready_s, "pruned": await pruned(bench, deployed.name)}


async def pruned(bench: Bench, name: str) -> dict[str, int]:
    """What the prunes of KfDef ``name`` did, by action, as its ``Pruned`` Events say (read once it is gone: every
    Event of its runs posted)."""
    events = await bench.kube.request("GET", f"/api/v1/namespaces/{KFDEF_NAMESPACE}/events",
                                      params={"fieldSelector": f"involvedObject.name={name},reason=Pruned"})
    counts: dict[str, int] = {}
    for event in events.get("items") or []:
        for match in _PRUNE_COUNT.finditer(event.get("message", "").partition(": ")[2]):
            counts[match["action"]] = counts.get(match["action"], 0) + int(match["count"]) * event.get("count", 1)
    return counts


async def replacement_round(bench: Bench, releases: Releases) -> dict:
    """v1.2.0 deployed, then torn down and v1.11.0 deployed afresh: seconds of each, their writes and CPU."""
    old = await release.deploy(bench, releases.old)
    audit_mark, cpu_before = bench.audit_mark(), bench.cpu()
    teardown_s = await release.teardown(bench, releases.old, old)
    fresh = await release.deploy(bench, releases.new)
    by_client = writes_by_client(bench.control_plane, audit_mark)
    cpu = cpu_used(cpu_before, bench.cpu())
    log.info("replacement: v1.2.0 Ready after %.1f s, torn down in %.1f s; v1.11.0 Ready after %.1f s", old.ready_s,
             teardown_s, fresh.ready_s)
    await release.teardown(bench, releases.new, fresh)
    return {"old_ready_s": old.ready_s, "teardown_s": teardown_s, "fresh_applied_s": fresh.applied_s,
            "fresh_ready_s": fresh.ready_s, "cpu": cpu, **attributed(by_client)}


async def measure(bench: Bench, rounds: int, *, quick: bool, new: release.Release | None = None,
                  timeout: float = READY_TIMEOUT_S) -> JSON:
    """``rounds`` rounds of both paths (the operator running); their results-file entries. An upgrade not Ready in
    time is recorded as its round's failure, and the rounds go on."""
    releases = await prepare(bench, new)
    raw: dict[str, list[dict]] = {"upgrade": [], "replacement": []}
    for index in range(rounds):
        log.info("upgrade round %d/%d: v1.2.0 (%d objects) edited to v1.11.0 (%d objects)", index + 1, rounds,
                 len(releases.old.objects), len(releases.new.objects))
        raw["upgrade"].append(await upgrade_round(bench, releases, timeout=timeout))
        log.info("upgrade round %d/%d: v1.2.0 torn down, v1.11.0 deployed afresh", index + 1, rounds)
        raw["replacement"].append(await replacement_round(bench, releases))
    return results(releases, raw, quick=quick)


def _release_meta(prepared: release.Release) -> JSON:
    return {"version": prepared.version, "objects": len(prepared.objects), "left_out": prepared.left_out}


def results(releases: Releases, raw: dict[str, list[dict]], *, quick: bool) -> JSON:
    """The entries of ``bench/results.json``: figures (``upgrade.*_s``, ``upgrade.*writes``) over the rounds that
    measured them (the upgrade's Ready, writes and CPU over those Ready in time), each round's record
    (``upgrade.rounds``: its times, what its upgrade did, why it was not Ready), the steps of the upgrades' first
    applies (``upgrade.steps``), the CPU of both paths (``upgrade.cpu``) and the run (``upgrade.meta``)."""
    upgrades, replacements = raw["upgrade"], raw["replacement"]
    ready = [u for u in upgrades if u["ready_s"] is not None]
    applied = [u["applied_s"] for u in upgrades if u["applied_s"] is not None]
    figures: JSON = {}
    if applied:
        figures["upgrade.applied_s"] = summary(applied, "s")
    if ready:
        figures["upgrade.ready_s"] = summary([u["ready_s"] for u in ready], "s")
        figures["upgrade.writes"] = summary([u["writes_operator"] for u in ready], "requests",
                                            by_request=[u["writes_operator_by_request"] for u in ready],
                                            others=[u["writes_others"] for u in ready])
    if replacements:
        figures.update({
            "upgrade.old_ready_s": summary([r["old_ready_s"] for r in (*upgrades, *replacements)], "s"),
            "upgrade.teardown_s": summary([r["teardown_s"] for r in replacements], "s"),
            "upgrade.fresh_applied_s": summary([r["fresh_applied_s"] for r in replacements], "s"),
            "upgrade.fresh_ready_s": summary([r["fresh_ready_s"] for r in replacements], "s"),
            "upgrade.replacement_writes": summary([r["writes_operator"] for r in replacements], "requests",
                                                  by_request=[r["writes_operator_by_request"] for r in replacements],
                                                  others=[r["writes_others"] for r in replacements])})
    for entry in figures.values():
        entry["value"] = entry["median"]
    return {
        "upgrade.meta": {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "quick": quick,
                         "load_average_at_end": list(os.getloadavg()), "from": _release_meta(releases.old),
                         "to": _release_meta(releases.new)},
        **figures,
        "upgrade.rounds": [{**{key: u[key] for key in _ROUND_KEYS},
                            **{key: r[key] for key in ("teardown_s", "fresh_ready_s")}}
                           for u, r in zip(upgrades, replacements, strict=True)],
        "upgrade.steps": steps_summary([u["steps"] for u in upgrades]),
        "upgrade.cpu": {path: cpu_summary([run["cpu"] for run in runs])
                        for path, runs in (("upgrade", ready), ("replacement", replacements)) if runs}}


async def _session(bench: Bench, rounds: int, *, quick: bool, timeout: float) -> JSON:
    await asyncio.to_thread(bench.operator.start)
    try:
        return await measure(bench, rounds, quick=quick, timeout=timeout)
    except BaseException:
        log.error("failed; operator log tail:\n%s", bench.operator.log_tail(60))
        raise
    finally:
        await asyncio.to_thread(bench.operator.stop)


def failures(results: JSON) -> list[str]:
    """Why each upgrade of a results document that was not Ready in time was not."""
    return [r["failure"] for r in results.get("upgrade.rounds") or [] if r.get("failure")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.upgrade", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_ROUNDS} round (else {FULL_ROUNDS})")
    parser.add_argument("--rounds", type=int, help="rounds of both paths")
    parser.add_argument("--timeout", type=float, default=READY_TIMEOUT_S,
                        help="seconds from the edit until the KfDef must be Ready for it")
    add_output_arguments(parser)
    args = parser.parse_args(argv)
    out, docs = output_paths(args)
    rounds = args.rounds or (QUICK_ROUNDS if args.quick else FULL_ROUNDS)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    with tempfile.TemporaryDirectory(prefix="kfdef-bench-upgrade-", dir="/dev/shm") as work_dir:
        figures = asyncio.run(run_alone(Path(work_dir), lambda bench: _session(bench, rounds, quick=args.quick,
                                                                               timeout=args.timeout)))
    merge_into(out, docs, figures, replaced=("upgrade.",))
    for key in ("upgrade.applied_s", "upgrade.ready_s", "upgrade.teardown_s", "upgrade.fresh_ready_s"):
        if key in figures:
            log.info("%s: median %.1f s %s", key, figures[key]["median"], figures[key]["samples"])
    log.info("wrote %s", out)
    not_ready = failures(figures)
    for failure in not_ready:
        log.error("the upgrade was not Ready in time: %s", failure)
    return 1 if not_ready else 0


if __name__ == "__main__":
    sys.exit(main())
