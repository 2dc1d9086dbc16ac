"""One session's results as the report reads them: typed records over ``bench/results.json``, and their loader.

``bench/run.py`` builds the results file as plain JSON (``bench/stats.py``'s summaries and each scenario's
details); :func:`parse` reads such a document once into the records below, whatever session or version of the
benchmarks wrote it: a figure a session did not measure is ``None`` (or absent from :attr:`Results.figures`), and
a document of the wrong shape is refused with the key at fault (:class:`ResultsError`).

Numbers and the mappings of counts are kept as the file holds them (an ``int`` stays an ``int``, a dict stays a
dict): the report prints some of them as they are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kfdef_operator.api.types import JSON

#: The entries of the replicas and shards scenarios (``bench/ha.py``).
HA_KEYS = ("ha.failover_s", "ha.takeover_s", "ha.handover_s", "ha.handover_lease_s", "shards.fleet_s",
           "shards.single_s")
#: Write requests by client (``operator``, ``kube-controller-manager``, ...) and ``"VERB resource"``.
WritesByClient = Mapping[str, Mapping[str, int]]


class ResultsError(ValueError):
    """A results document without the shape the report reads; the message names the key at fault."""


@dataclass(frozen=True)
class Figure:
    """One figure of the session measured ``n`` times (``bench/stats.py``'s summary): ``value`` is the median, or
    the percentile the figure's name says (``heal.p99_ms``)."""

    value: float
    median: float
    min: float
    max: float
    n: int
    unit: str
    samples: tuple[float, ...]
    #: The date of the earlier session the figure was carried over from (``python -m bench --skip``).
    session: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class CpuUse:
    """CPU seconds used during one path (``bench/stats.py``'s ``cpu_summary``): medians by process, and of the
    total."""

    median: Mapping[str, float]
    total: float


@dataclass(frozen=True)
class Wave:
    """One wave of the operator's teardown: how many objects it deleted, their kinds, when the last was gone."""

    objects: int
    kinds: tuple[str, ...]
    done_s: float


@dataclass(frozen=True)
class Workload:
    """The apply and teardown paths measured on one workload: the synthetic one (keys without a prefix) or the real
    release (keys starting ``release.``). ``None``: not measured by the session."""

    objects: int | None                 # objects the operator applied
    operator: Figure | None             # apply.operator_s
    operator_ready: Figure | None       # apply.operator_ready_s
    kubectl: Figure | None              # apply.kubectl_ssa_s
    floor: Figure | None                # apply.floor_s
    render_floor: Figure | None         # apply.render_floor_s
    apply_phase: Figure | None          # apply.apply_phase_s
    teardown: Figure | None             # teardown.s
    teardown_floor: Figure | None       # teardown.floor_s
    #: Median seconds of each step of the operator's first apply (queued, fetch, render, apply); empty: not seen.
    steps: Mapping[str, float]
    #: CPU used by path: ``apply.operator``, ``apply.floor``, ``teardown.operator``, ``teardown.floor``.
    cpu: Mapping[str, CpuUse]
    #: The operator's teardown waves, per run (a run whose waves were not read is empty).
    teardown_waves: tuple[tuple[Wave, ...], ...]
    #: Objects the floor's apply had in flight at once.
    floor_concurrency: int | None


@dataclass(frozen=True)
class Kubeflow:
    """What the real release was (``bench/release.py``): its version, and the objects left out of it."""

    version: str
    left_out: int


@dataclass(frozen=True)
class Noop:
    """The no-op restarts' writes, one entry per restart (``noop.writes``)."""

    operator_client: list[int]                      # the operator's own client's writes
    by_request: list[Mapping[str, int]]             # the operator's writes by request
    others: list[WritesByClient]                    # other clients' writes (audit log)
    server_stack_writes: list[Mapping[str, int]]    # every client's writes of the stacks (server metrics)


@dataclass(frozen=True)
class Idle:
    """The operator at rest with both stacks deployed (``idle.*``)."""

    window_s: float
    requests_by_verb: Mapping[str, int]             # the operator's own requests
    server_reads_per_min_all_clients: float
    writes_by_request: Mapping[str, int]            # the operator's writes (audit log)
    writes_others: WritesByClient                   # other clients' writes
    watches: int | None                             # open watches of the operator (server gauge)
    watches_by_resource: Mapping[str, int]


@dataclass(frozen=True)
class Heal:
    """The Deployment heals (``bench/heal.py``): the operator's percentiles and the heal floor's (``None`` in
    results that predate it), and what each client wrote meanwhile."""

    p50: Figure
    p99: Figure
    floor_p50: Figure | None
    floor_p99: Figure | None
    resolution: str
    writes_by_client: WritesByClient


@dataclass(frozen=True)
class Many:
    """Many small KfDefs created at once (``scale.kfdefs_s``)."""

    figure: Figure
    kfdefs: int
    objects: int


@dataclass(frozen=True)
class SweepPoint:
    """One KfDef of the workload at ``scale``; the floor and the memory figures are ``None`` in older results."""

    scale: float
    objects: int
    applied_s: float
    objects_per_s: float
    floor_s: float | None
    rss_before_mb: float | None
    rss_mb: float | None


@dataclass(frozen=True)
class SweepFailure:
    """A sweep size that was not measured, and why."""

    scale: float
    error: str


@dataclass(frozen=True)
class FleetCpu:
    """CPU seconds by process group while a fleet converged, and the cores they kept busy."""

    cpu_s: Mapping[str, float]
    cores_used: float
    cores: int


@dataclass(frozen=True)
class Fleet:
    """A fleet of KfDefs created at once (``bench/fleet.py``)."""

    figure: Figure                                  # seconds until all were Ready
    kfdefs: int
    objects: int
    removed_s: float
    cpu: FleetCpu


@dataclass(frozen=True)
class SingleFleet(Fleet):
    """The fleet served by one operator."""

    writes: int


@dataclass(frozen=True)
class ShardedFleet(Fleet):
    """The fleet served by shards: who served what, and how the shard leaders kept their Leases."""

    kfdefs_per_shard: Mapping[str, int]
    writes_per_shard: Mapping[str, int]
    served_by_its_shard: int
    served_by_several: int
    step_downs: int | None                          # None in results that predate the figure
    lease_renewal_gap_max_s: float | None


@dataclass(frozen=True)
class Replicas:
    """Replicas and shards (``bench/ha.py``), measured in its own session or in this one."""

    failover: Figure
    takeover: Figure
    handover: Figure
    handover_lease: Figure
    lease_duration_s: float
    objects: int
    sharded: ShardedFleet
    single: SingleFleet
    date: str | None
    quick: bool
    load_average_at_end: tuple[float, ...]


@dataclass(frozen=True)
class ProfileRun:
    """One reconcile under the profiler (``bench/profile_apply.py``): its wall time, requests, and timed steps."""

    reconcile_wall_s: float
    requests_by_verb: Mapping[str, int]
    steps_s: Mapping[str, float]                    # by the profile's step labels, in its order
    stage_s: tuple[float, ...]
    pyinstrument_text: str


@dataclass(frozen=True)
class Profile:
    """The first apply of a KfDef and the no-op reconcile of a freshly started operator, in-process."""

    objects: int
    apply: ProfileRun
    noop: ProfileRun


@dataclass(frozen=True)
class UpgradeRelease:
    """One end of the day-2 upgrade (``bench/upgrade.py``): the release, and what this cluster runs of it."""

    version: str
    objects: int
    left_out: int


@dataclass(frozen=True)
class UpgradeRound:
    """One round of the day-2 upgrade (``upgrade.rounds``): its times, what its upgrade did, and why it was not
    Ready in time (None: it was). A time is None when not measured."""

    applied_s: float | None                         # the edit to its first apply done
    ready_s: float | None                           # the edit to Ready for it
    teardown_s: float                               # v1.2.0 deleted to gone
    fresh_ready_s: float                            # v1.11.0 created afresh to Ready
    failure: str | None
    applied: Mapping[str, int]                      # objects its applies wrote, by action (re-created: created)
    pruned: Mapping[str, int]                       # objects its prunes deleted, held, ... (its Pruned Events)
    recreated: tuple[str, ...]                      # objects re-created for an immutable field
    migrated: Mapping[str, int]                     # CRDs whose stored versions were migrated: objects rewritten
    first_apply_failures: tuple[tuple[str, str], ...]  # (object, message) once its first apply was done


@dataclass(frozen=True)
class Upgrade:
    """Day 2 (``bench/upgrade.py``; issue 38): v1.2.0 upgraded to v1.11.0 by an edit of its KfDef, against its
    teardown and a fresh v1.11.0 deploy. A figure is None when no round got that far."""

    date: str
    quick: bool
    load_average_at_end: tuple[float, ...]
    old: UpgradeRelease
    new: UpgradeRelease
    applied: Figure | None                          # upgrade.applied_s: the edit to its first apply done
    ready: Figure | None                            # upgrade.ready_s: the edit to Ready for it
    old_ready: Figure | None                        # upgrade.old_ready_s: v1.2.0 created to Ready
    teardown: Figure | None                         # upgrade.teardown_s: v1.2.0 deleted to gone
    fresh_applied: Figure | None                    # upgrade.fresh_applied_s
    fresh_ready: Figure | None                      # upgrade.fresh_ready_s: v1.11.0 created to Ready
    writes: Figure | None                           # upgrade.writes: the operator's, during the upgrade
    replacement_writes: Figure | None               # upgrade.replacement_writes: during teardown and fresh deploy
    writes_others: tuple[WritesByClient, ...]       # other clients' writes, per upgrade
    replacement_writes_others: tuple[WritesByClient, ...]
    #: Median seconds of each step of the upgrade's first apply (queued, fetch, render, apply).
    steps: Mapping[str, float]
    rounds: tuple[UpgradeRound, ...]
    #: CPU used by path: ``upgrade`` (those Ready in time), ``replacement`` (teardown and fresh deploy).
    cpu: Mapping[str, CpuUse]

    @property
    def failures(self) -> tuple[tuple[int, UpgradeRound], ...]:
        """The rounds whose upgrade was not Ready in time, numbered from 1."""
        return tuple((index + 1, r) for index, r in enumerate(self.rounds) if r.failure is not None)


@dataclass(frozen=True)
class TargetRow:
    """One target checked against the session (``bench/figures.py``): ``met`` is ``None`` when not measured."""

    target: str
    measured: float | None
    limit: float | None
    met: bool | None
    note: str

    def to_json(self) -> JSON:
        """The row as the results file holds it (a target not measured has no ``measured`` and ``limit``)."""
        if self.measured is None or self.limit is None:
            return {"target": self.target, "met": self.met, "note": self.note}
        return {"target": self.target, "measured": self.measured, "limit": self.limit, "met": self.met,
                "note": self.note}


@dataclass(frozen=True)
class Machine:
    cpu: str
    cores: int
    memory_gib: float
    kernel: str
    load_average_at_end: tuple[float, ...]


@dataclass(frozen=True)
class WorkloadShape:
    """The synthetic workload at the session's scale (``bench/workload.py``)."""

    objects: int
    by_kind: Mapping[str, int]
    namespaces: int
    crds_over_256kib: int
    largest_crd_kib: int


@dataclass(frozen=True)
class Meta:
    """What the session ran on and how (``bench/environment.py``)."""

    date: str
    duration_s: float
    quick: bool
    commit: str | None
    machine: Machine
    versions: Mapping[str, str]
    flags: Mapping[str, tuple[str, ...]]
    workload: WorkloadShape


@dataclass(frozen=True)
class Results:
    """One session's results."""

    meta: Meta
    #: Every figure by its key in the results file (``apply.operator_s``, ``heal.p99_ms``, ...).
    figures: Mapping[str, Figure]
    #: The ratios and the targets ``bench/figures.py`` derives from the figures; empty in a document the report has
    #: not written yet (``bench/run.py``'s own).
    ratios: Mapping[str, float]
    targets: tuple[TargetRow, ...]
    synthetic: Workload
    release: Workload
    kubeflow: Kubeflow | None
    noop: Noop
    idle: Idle
    heal: Heal
    many: Many | None
    sweep: tuple[SweepPoint, ...]                   # smallest first
    sweep_failures: tuple[SweepFailure, ...]
    replicas: Replicas | None
    profile: Profile | None
    upgrade: Upgrade | None


def load(path: Path) -> Results:
    """The results file at ``path``."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ResultsError(f"{path}: not JSON ({error})") from error
    try:
        return parse(data)
    except ResultsError as error:
        raise ResultsError(f"{path}: {error}") from error


def parse(data: Any) -> Results:
    """The results in a decoded results document."""
    doc = _Doc(_mapping(data, "results"), "")
    figures = {key: _figure(value, key) for key, value in doc.data.items() if _is_figure(value)}
    return Results(
        meta=_meta(doc.child("meta")),
        figures=figures,
        ratios={name: _number(value, f"ratios.{name}") for name, value in doc.optional_mapping("ratios").items()},
        targets=tuple(_target(row) for row in doc.children("targets", optional=True)),
        synthetic=_workload(doc, figures, ""),
        release=_workload(doc, figures, "release."),
        kubeflow=_kubeflow(doc),
        noop=_noop(doc),
        idle=_idle(doc),
        heal=_heal(doc, figures),
        many=_many(doc, figures),
        sweep=tuple(sorted(map(_sweep_point, doc.children("scale.sweep")), key=lambda point: point.objects)),
        sweep_failures=tuple(map(_sweep_failure, doc.children("scale.sweep_failures", optional=True))),
        replicas=_replicas(doc, figures),
        profile=_profile(doc),
        upgrade=_upgrade(doc, figures),
    )


def _is_figure(value: Any) -> bool:
    """Whether a top-level entry is a summary: it counts its samples (``apply.steps`` and ``cpu`` have a median
    per step or process, ``idle.watches`` a value, neither a count)."""
    return isinstance(value, dict) and "n" in value


def _figure(entry: JSON, key: str) -> Figure:
    doc = _Doc(entry, f"{key}.")
    median = doc.number("median")
    return Figure(value=doc.number("value") if "value" in entry else median, median=median, min=doc.number("min"),
                  max=doc.number("max"), n=doc.integer("n"), unit=doc.text("unit"),
                  samples=tuple(_number(s, f"{key}.samples") for s in doc.optional_array("samples")),
                  session=doc.optional_text("session"), note=doc.optional_text("note"))


def _meta(doc: _Doc) -> Meta:
    machine, workload = doc.child("machine"), doc.child("workload")
    return Meta(
        date=doc.text("date"), duration_s=doc.number("duration_s"), quick=bool(doc.child("plan").data.get("quick")),
        commit=doc.optional_text("commit"),
        machine=Machine(cpu=machine.text("cpu"), cores=machine.integer("cores"),
                        memory_gib=machine.number("memory_gib"), kernel=machine.text("kernel"),
                        load_average_at_end=machine.numbers("load_average_at_end")),
        versions={name: _text(value, f"meta.versions.{name}") for name, value in doc.mapping("versions").items()},
        flags={name: tuple(_text(flag, f"meta.flags.{name}") for flag in _list(flags, f"meta.flags.{name}"))
               for name, flags in doc.mapping("flags").items()},
        workload=WorkloadShape(objects=workload.integer("objects"),
                               by_kind={kind: _integer(n, f"meta.workload.by_kind.{kind}")
                                        for kind, n in workload.mapping("by_kind").items()},
                               namespaces=workload.integer("namespaces"),
                               crds_over_256kib=workload.integer("crds_over_256kib"),
                               largest_crd_kib=workload.integer("largest_crd_kib")))


def _target(doc: _Doc) -> TargetRow:
    met = doc.data.get("met")
    if met is not None and not isinstance(met, bool):
        raise ResultsError(f"{doc.where}met: true, false or null expected, found {met!r}")
    return TargetRow(target=doc.text("target"), measured=doc.optional_number("measured"),
                     limit=doc.optional_number("limit"), met=met, note=doc.text("note"))


def _workload(doc: _Doc, figures: Mapping[str, Figure], prefix: str) -> Workload:
    def figure(key: str) -> Figure | None:
        return figures.get(prefix + key)

    operator = doc.optional_child(f"{prefix}apply.operator_s")
    steps = doc.optional_child(f"{prefix}apply.steps")
    cpu = doc.optional_child(f"{prefix}cpu")
    teardown = doc.optional_child(f"{prefix}teardown.s")
    floor = doc.optional_child(f"{prefix}apply.floor_s")
    return Workload(
        objects=operator.optional_integer("objects") if operator else None,
        operator=figure("apply.operator_s"), operator_ready=figure("apply.operator_ready_s"),
        kubectl=figure("apply.kubectl_ssa_s"), floor=figure("apply.floor_s"),
        render_floor=figure("apply.render_floor_s"), apply_phase=figure("apply.apply_phase_s"),
        teardown=figure("teardown.s"), teardown_floor=figure("teardown.floor_s"),
        steps=steps.numbers_by_name("median") if steps and "median" in steps.data else {},
        # bench/run.py gave every entry a "value", this one too (null).
        cpu={path: _cpu(cpu.child(path)) for path in cpu.data if path != "value"} if cpu else {},
        teardown_waves=_waves(teardown) if teardown else (),
        floor_concurrency=floor.optional_integer("concurrency") if floor else None)


def _waves(teardown: _Doc) -> tuple[tuple[Wave, ...], ...]:
    where = f"{teardown.where}waves"
    return tuple(tuple(_wave(_Doc(_mapping(wave, f"{where}[{run}][{index}]"), f"{where}[{run}][{index}]."))
                       for index, wave in enumerate(_list(waves or [], f"{where}[{run}]")))
                 for run, waves in enumerate(teardown.optional_array("waves")))


def _cpu(doc: _Doc) -> CpuUse:
    return CpuUse(median=doc.numbers_by_name("median"), total=doc.number("total"))


def _wave(doc: _Doc) -> Wave:
    return Wave(objects=doc.integer("objects"), kinds=tuple(_text(kind, f"{doc.where}kinds")
                                                             for kind in doc.array("kinds")),
                done_s=doc.number("done_s"))


def _kubeflow(doc: _Doc) -> Kubeflow | None:
    operator = doc.optional_child("release.apply.operator_s")
    if operator is None:
        return None
    return Kubeflow(version=operator.text("release"), left_out=operator.integer("left_out"))


def _counts(value: Any, where: str) -> Mapping[str, int]:
    return {name: _integer(n, f"{where}.{name}") for name, n in _mapping(value, where).items()}


def _by_client(value: Any, where: str) -> WritesByClient:
    return {client: _counts(requests, f"{where}.{client}") for client, requests in _mapping(value, where).items()}


def _noop(doc: _Doc) -> Noop:
    writes = doc.child("noop.writes")
    return Noop(operator_client=[_integer(n, f"{writes.where}operator_client")
                                 for n in writes.optional_array("operator_client")],
                by_request=[_counts(c, f"{writes.where}by_request") for c in writes.optional_array("by_request")],
                others=[_by_client(c, f"{writes.where}others") for c in writes.optional_array("others")],
                server_stack_writes=[_counts(c, f"{writes.where}server_stack_writes")
                                     for c in writes.optional_array("server_stack_writes")])


def _idle(doc: _Doc) -> Idle:
    requests = doc.child("idle.requests_per_min")
    writes = doc.optional_child("idle.writes") or _Doc({}, "idle.writes.")
    watches = doc.optional_child("idle.watches")
    return Idle(window_s=requests.number("window_s"),
                requests_by_verb=_counts(requests.optional_mapping("by_verb"), f"{requests.where}by_verb"),
                server_reads_per_min_all_clients=requests.number("server_reads_per_min_all_clients"),
                writes_by_request=_counts(writes.optional_mapping("by_request"), f"{writes.where}by_request"),
                writes_others=_by_client(writes.optional_mapping("others"), f"{writes.where}others"),
                watches=watches.integer("value") if watches else None,
                watches_by_resource=_counts(watches.optional_mapping("by_resource"), f"{watches.where}by_resource")
                if watches else {})


def _heal(doc: _Doc, figures: Mapping[str, Figure]) -> Heal:
    p50, p99 = doc.child("heal.p50_ms"), doc.child("heal.p99_ms")
    if "heal.p50_ms" not in figures or "heal.p99_ms" not in figures:
        raise ResultsError("heal.p50_ms, heal.p99_ms: summaries expected (median, min, max, n, unit)")
    return Heal(p50=figures["heal.p50_ms"], p99=figures["heal.p99_ms"], floor_p50=figures.get("heal.floor_p50_ms"),
                floor_p99=figures.get("heal.floor_p99_ms"), resolution=p50.text("resolution"),
                writes_by_client=_by_client(p99.optional_mapping("writes_by_client"), f"{p99.where}writes_by_client"))


def _many(doc: _Doc, figures: Mapping[str, Figure]) -> Many | None:
    entry = doc.optional_child("scale.kfdefs_s")
    if entry is None or not entry.data.get("objects"):
        return None
    return Many(figure=figures["scale.kfdefs_s"], kfdefs=entry.integer("kfdefs"), objects=entry.integer("objects"))


def _sweep_point(doc: _Doc) -> SweepPoint:
    return SweepPoint(scale=doc.number("scale"), objects=doc.integer("objects"), applied_s=doc.number("applied_s"),
                      objects_per_s=doc.number("objects_per_s"), floor_s=doc.optional_number("floor_s"),
                      rss_before_mb=doc.optional_number("rss_before_mb"), rss_mb=doc.optional_number("rss_mb"))


def _sweep_failure(doc: _Doc) -> SweepFailure:
    return SweepFailure(scale=doc.number("scale"), error=doc.text("error"))


def _fleet_cpu(doc: _Doc) -> FleetCpu:
    return FleetCpu(cpu_s=doc.numbers_by_name("cpu_s"), cores_used=doc.number("cores_used"),
                    cores=doc.integer("cores"))


def _replicas(doc: _Doc, figures: Mapping[str, Figure]) -> Replicas | None:
    if not all(key in figures for key in HA_KEYS):
        return None
    failover, sharded, single = doc.child("ha.failover_s"), doc.child("shards.fleet_s"), doc.child("shards.single_s")
    meta = doc.optional_child("ha.meta") or _Doc({}, "ha.meta.")
    return Replicas(
        failover=figures["ha.failover_s"], takeover=figures["ha.takeover_s"], handover=figures["ha.handover_s"],
        handover_lease=figures["ha.handover_lease_s"], lease_duration_s=failover.number("lease_duration_s"),
        objects=failover.integer("objects"),
        sharded=ShardedFleet(
            figure=figures["shards.fleet_s"], kfdefs=sharded.integer("kfdefs"), objects=sharded.integer("objects"),
            removed_s=sharded.number("removed_s"), cpu=_fleet_cpu(sharded.child("cpu")),
            kfdefs_per_shard=_counts(sharded.mapping("kfdefs_per_shard"), f"{sharded.where}kfdefs_per_shard"),
            writes_per_shard=_counts(sharded.mapping("writes_per_shard"), f"{sharded.where}writes_per_shard"),
            served_by_its_shard=sharded.integer("served_by_its_shard"),
            served_by_several=sharded.integer("served_by_several"), step_downs=sharded.optional_integer("step_downs"),
            lease_renewal_gap_max_s=sharded.optional_number("lease_renewal_gap_max_s")),
        single=SingleFleet(figure=figures["shards.single_s"], kfdefs=single.integer("kfdefs"),
                           objects=single.integer("objects"), removed_s=single.number("removed_s"),
                           cpu=_fleet_cpu(single.child("cpu")), writes=single.integer("writes")),
        date=meta.optional_text("date"), quick=bool(meta.data.get("quick")),
        load_average_at_end=meta.numbers("load_average_at_end") if "load_average_at_end" in meta.data else ())


def _upgrade(doc: _Doc, figures: Mapping[str, Figure]) -> Upgrade | None:
    meta = doc.optional_child("upgrade.meta")
    if meta is None:
        return None
    writes, replacement = (doc.optional_child(key) or _Doc({}, f"{key}.")
                           for key in ("upgrade.writes", "upgrade.replacement_writes"))
    steps = doc.optional_child("upgrade.steps")
    cpu = doc.optional_child("upgrade.cpu")
    return Upgrade(
        date=meta.text("date"), quick=bool(meta.data.get("quick")),
        load_average_at_end=meta.numbers("load_average_at_end"),
        old=_upgrade_release(meta.child("from")), new=_upgrade_release(meta.child("to")),
        applied=figures.get("upgrade.applied_s"), ready=figures.get("upgrade.ready_s"),
        old_ready=figures.get("upgrade.old_ready_s"), teardown=figures.get("upgrade.teardown_s"),
        fresh_applied=figures.get("upgrade.fresh_applied_s"), fresh_ready=figures.get("upgrade.fresh_ready_s"),
        writes=figures.get("upgrade.writes"), replacement_writes=figures.get("upgrade.replacement_writes"),
        writes_others=tuple(_by_client(c, f"{writes.where}others") for c in writes.optional_array("others")),
        replacement_writes_others=tuple(_by_client(c, f"{replacement.where}others")
                                        for c in replacement.optional_array("others")),
        steps=steps.numbers_by_name("median") if steps and "median" in steps.data else {},
        rounds=tuple(map(_upgrade_round, doc.children("upgrade.rounds", optional=True))),
        cpu={path: _cpu(cpu.child(path)) for path in cpu.data} if cpu else {})


def _upgrade_release(doc: _Doc) -> UpgradeRelease:
    return UpgradeRelease(version=doc.text("version"), objects=doc.integer("objects"), left_out=doc.integer("left_out"))


def _upgrade_round(doc: _Doc) -> UpgradeRound:
    return UpgradeRound(
        applied_s=doc.optional_number("applied_s"), ready_s=doc.optional_number("ready_s"),
        teardown_s=doc.number("teardown_s"), fresh_ready_s=doc.number("fresh_ready_s"),
        failure=doc.optional_text("failure"),
        applied=_counts(doc.optional_mapping("applied"), f"{doc.where}applied"),
        pruned=_counts(doc.optional_mapping("pruned"), f"{doc.where}pruned"),
        recreated=tuple(_text(ref, f"{doc.where}recreated") for ref in doc.optional_array("recreated")),
        migrated=_counts(doc.optional_mapping("migrated"), f"{doc.where}migrated"),
        first_apply_failures=tuple((failure.text("object"), failure.text("message"))
                                   for failure in doc.children("first_apply_failures", optional=True)))


def _profile(doc: _Doc) -> Profile | None:
    profile = doc.optional_child("profile")
    if profile is None:
        return None
    return Profile(objects=profile.integer("objects"), apply=_profile_run(profile.child("apply")),
                   noop=_profile_run(profile.child("noop")))


def _profile_run(doc: _Doc) -> ProfileRun:
    return ProfileRun(reconcile_wall_s=doc.number("reconcile_wall_s"),
                      requests_by_verb=_counts(doc.mapping("requests_by_verb"), f"{doc.where}requests_by_verb"),
                      steps_s=doc.numbers_by_name("steps_s"), stage_s=doc.numbers("stage_s"),
                      pyinstrument_text=doc.text("pyinstrument_text"))


# The checks of each value's JSON type; ``where`` is its path in the document, for the message.

def _mapping(value: Any, where: str) -> JSON:
    if not isinstance(value, dict):
        raise ResultsError(f"{where}: an object expected, found {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ResultsError(f"{where}: a list expected, found {type(value).__name__}")
    return value


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ResultsError(f"{where}: a number expected, found {value!r}")
    return value


def _integer(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ResultsError(f"{where}: an integer expected, found {value!r}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ResultsError(f"{where}: a string expected, found {value!r}")
    return value


class _Doc:
    """An object of the document and its path (``where``, ending in a dot), read key by key with type checks."""

    def __init__(self, data: JSON, where: str) -> None:
        self.data = data
        self.where = where

    def _required(self, key: str) -> Any:
        if key not in self.data:
            raise ResultsError(f"{self.where}{key}: missing")
        return self.data[key]

    def child(self, key: str) -> _Doc:
        return _Doc(_mapping(self._required(key), self.where + key), f"{self.where}{key}.")

    def optional_child(self, key: str) -> _Doc | None:
        """The object under ``key``; ``None`` when it is absent, null or empty (a part the session skipped)."""
        return self.child(key) if self.data.get(key) else None

    def mapping(self, key: str) -> JSON:
        return _mapping(self._required(key), self.where + key)

    def array(self, key: str) -> list[Any]:
        return _list(self._required(key), self.where + key)

    def children(self, key: str, *, optional: bool = False) -> list[_Doc]:
        """The objects of the list under ``key`` (``optional``: absent or null is an empty list)."""
        items = self.optional_array(key) if optional else self.array(key)
        return [_Doc(_mapping(item, f"{self.where}{key}[{index}]"), f"{self.where}{key}[{index}].")
                for index, item in enumerate(items)]

    def optional_array(self, key: str) -> list[Any]:
        """The list under ``key``; empty when absent or null (results that predate it)."""
        value = self.data.get(key)
        return [] if value is None else _list(value, self.where + key)

    def optional_mapping(self, key: str) -> JSON:
        """The object under ``key``; empty when absent or null."""
        value = self.data.get(key)
        return {} if value is None else _mapping(value, self.where + key)

    def number(self, key: str) -> float:
        return _number(self._required(key), self.where + key)

    def integer(self, key: str) -> int:
        return _integer(self._required(key), self.where + key)

    def text(self, key: str) -> str:
        return _text(self._required(key), self.where + key)

    def optional_number(self, key: str) -> float | None:
        return None if self.data.get(key) is None else self.number(key)

    def optional_integer(self, key: str) -> int | None:
        return None if self.data.get(key) is None else self.integer(key)

    def optional_text(self, key: str) -> str | None:
        return None if self.data.get(key) is None else self.text(key)

    def numbers(self, key: str) -> tuple[float, ...]:
        return tuple(_number(value, self.where + key) for value in self.array(key))

    def numbers_by_name(self, key: str) -> dict[str, float]:
        return {name: _number(value, f"{self.where}{key}.{name}") for name, value in self.mapping(key).items()}
