"""The section on day 2 (``bench/upgrade.py``'s figures; issue 38): Kubeflow v1.2.0 moved to v1.11.0 by an edit of
its KfDef, against tearing v1.2.0 down and deploying v1.11.0 afresh."""

from __future__ import annotations

import collections
import statistics
from collections.abc import Mapping

from ..results import Results, Upgrade, UpgradeRound, WritesByClient
from ..tables import fmt, ratio, shown, table

#: The section's figures, in the order of its table: key, and what it times.
_FIGURES = (("upgrade.applied_s", "upgrade: the edit to its first apply done"),
            ("upgrade.ready_s", "upgrade: the edit to Ready for it"),
            ("upgrade.teardown_s", "v1.2.0 torn down: its KfDef deleted to gone"),
            ("upgrade.fresh_applied_s", "v1.11.0 afresh: created to every object applied"),
            ("upgrade.fresh_ready_s", "v1.11.0 afresh: created to Ready"),
            ("upgrade.old_ready_s", "v1.2.0 deployed: created to Ready (each round's two)"))


def day_two(results: Results) -> list[str]:
    """The report's section on the day-2 upgrade (empty when the results hold none)."""
    upgrade = results.upgrade
    if upgrade is None:
        return []
    old, new = upgrade.old, upgrade.new
    return [
        "## Day 2: an upgrade against a teardown and a fresh deploy (issue 38)",
        "",
        f"Measured on {upgrade.date}" + (" (quick mode)" if upgrade.quick else "")
        + f", load average at the end {', '.join(f'{x:.1f}' for x in upgrade.load_average_at_end)}; "
        "`python -m bench.upgrade` measures this section alone, in a session of its own. Each round on one control "
        f"plane and one operator process (`bench/upgrade.py`): Kubeflow {old.version} ({old.objects} objects; kfctl's "
        "`kfctl_k8s_istio` KfDef, stacks mode) deployed through a KfDef until Ready, then that KfDef's spec replaced "
        f"by {new.version}'s ({new.objects} objects; `example/`, plain mode), timed from the edit until the first "
        "apply of the new generation was done and until the KfDef was Ready for it; against it, "
        f"{old.version} deployed again, its KfDef deleted until gone, and {new.version} deployed afresh until Ready. "
        f"Both releases without what this cluster cannot serve ({old.left_out} and {new.left_out} objects, "
        "`bench/release.py`). Seconds:",
        "",
        *_figures(results, upgrade),
        *_failures(upgrade),
        *_rounds(results, upgrade),
        *_what_it_did(upgrade),
        *_writes(upgrade),
        *_cpu(upgrade),
    ]


def _figures(results: Results, upgrade: Upgrade) -> list[str]:
    rows = [[f"`{key}`", what, fmt(figure.median), fmt(figure.min), fmt(figure.max), str(figure.n)]
            for key, what in _FIGURES if (figure := results.figures.get(key)) is not None]
    if not rows:
        return []
    over = " (the upgrade's over those Ready in time)" if upgrade.failures else ""
    return [*table(["figure", "what it times", "median", "min", "max", "n"], rows), "",
            f"Ratio of medians{over}: upgrade / (teardown + fresh deploy) = "
            f"**{ratio(results.ratios, 'upgrade/(teardown + fresh)')}** (target: at most 1.0).", ""]


def _failures(upgrade: Upgrade) -> list[str]:
    if not upgrade.failures:
        return []
    return [f"**{len(upgrade.failures)} of {len(upgrade.rounds)} upgrades were not Ready in time** (the operator's "
            "health deadline; each stack was torn down and the rounds went on):", "",
            *(f"- round {index}: {r.failure}" for index, r in upgrade.failures), ""]


def _rounds(results: Results, upgrade: Upgrade) -> list[str]:
    rows = [[str(index + 1), shown(r.applied_s), shown(r.ready_s) if r.failure is None else "**not Ready**",
             fmt(r.teardown_s), fmt(r.fresh_ready_s), fmt(r.teardown_s + r.fresh_ready_s),
             "-" if r.ready_s is None else f"{r.ready_s / (r.teardown_s + r.fresh_ready_s):.2f}"]
            for index, r in enumerate(upgrade.rounds)]
    if not rows:
        return []
    steps = upgrade.steps
    return [*table(["round", "upgrade: first apply done", "upgrade: Ready", "teardown", "fresh deploy: Ready",
                    "teardown + fresh deploy", "upgrade / (teardown + fresh deploy)"], rows), "",
            *([f"The upgrade's first apply step by step (medians, seconds, as its status announced them): queued "
               f"{fmt(steps['queued'])}, fetching {fmt(steps['fetch'])}, rendering {fmt(steps['render'])}, applying "
               f"(and pruning) {fmt(steps['apply'])}; the fresh deploy's in all: "
               f"{shown(_median(results, 'upgrade.fresh_applied_s'))}.", ""] if steps else [])]


def _median(results: Results, key: str) -> float | None:
    figure = results.figures.get(key)
    return None if figure is None else figure.median


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {what}" for what, n in counts.items()) or "none"


def _kinds(refs: tuple[str, ...]) -> str:
    """``28 Deployment, 1 StatefulSet``: the kinds of object references (``Kind.group namespace/name``)."""
    kinds = collections.Counter(ref.split(" ")[0].split(".")[0] for ref in refs)
    return ", ".join(f"{n} {kind}" for kind, n in kinds.most_common()) or "none"


def _what_it_did(upgrade: Upgrade) -> list[str]:
    rows = [[str(index + 1), _counts(r.applied), _counts(r.pruned), _kinds(r.recreated),
             f"{len(r.migrated)} CRDs, {sum(r.migrated.values())} objects", str(len(r.first_apply_failures))]
            for index, r in enumerate(upgrade.rounds)]
    if not rows:
        return []
    migrated = sorted({crd for r in upgrade.rounds for crd in r.migrated})
    return ["What the operator did, per round: objects its applies wrote (its `kfdef_objects_applied` counter; a "
            "re-created object counts as created), objects its prunes deleted or held for the data they hold (its "
            "`Pruned` Events), objects it re-created for an immutable field and CRDs whose stored versions it "
            "migrated, with the objects rewritten (its log), and the objects `status.failures` named once the first "
            "apply was done (retried by the next run):", "",
            *table(["round", "applied", "pruned", "re-created", "stored versions migrated", "failed in the first "
                                                                                              "apply"], rows), "",
            *([f"The CRDs whose stored versions were migrated: {', '.join(f'`{crd}`' for crd in migrated)}.", ""]
              if migrated else []),
            *_first_failures(upgrade.rounds)]


def _first_failures(rounds: tuple[UpgradeRound, ...]) -> list[str]:
    """The failures of the first round whose first apply had any, as its status told them."""
    failed = next((r for r in rounds if r.first_apply_failures), None)
    if failed is None:
        return []
    index = rounds.index(failed) + 1
    return [f"The first apply's failures in round {index}: "
            + "; ".join(f"`{obj}`: {message}" for obj, message in failed.first_apply_failures) + ".", ""]


def _total(by_client: WritesByClient) -> int:
    return sum(sum(requests.values()) for requests in by_client.values())


def _writes(upgrade: Upgrade) -> list[str]:
    writes, replacement = upgrade.writes, upgrade.replacement_writes
    if writes is None:
        return []
    others = statistics.median(_total(c) for c in upgrade.writes_others) if upgrade.writes_others else None
    replaced_others = (statistics.median(_total(c) for c in upgrade.replacement_writes_others)
                       if upgrade.replacement_writes_others else None)
    replaced = None if replacement is None else replacement.median
    return [f"Writes (kube-apiserver's audit log, dry runs and Leases aside; medians): the upgrade cost "
            f"**{fmt(writes.median)}** writes of the operator and {shown(others)} of every other client (the "
            f"cluster's controllers and kwok following the changes, and the benchmark's own few: the edit, the "
            f"simulated volumes); the teardown and fresh deploy {shown(replaced)} of the operator's and "
            f"{shown(replaced_others)} of the others.", ""]


def _cpu(upgrade: Upgrade) -> list[str]:
    if not upgrade.cpu:
        return []
    processes = list(next(iter(upgrade.cpu.values())).median)
    rows = [[path, *(fmt(use.median[name]) for name in processes), fmt(use.total)] for path, use in
            (("upgrade", upgrade.cpu.get("upgrade")), ("teardown + fresh deploy", upgrade.cpu.get("replacement")))
            if use is not None]
    return ["CPU seconds used during each path (medians; the operator's include its renders):", "",
            *table(["path", *processes, "total"], rows)]
