"""``docs/benchmarks.png``: the figures of one session in four panels."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after selecting the headless backend)

from .results import Figure, Results  # noqa: E402

_APPLY_BARS = (("operator\n(all applied)", "apply.operator_s"), ("operator\n(Ready)", "apply.operator_ready_s"),
               ("kubectl SSA\n(+ CRD wait)", "apply.kubectl_ssa_s"), ("floor\n(raw SSA)", "apply.floor_s"),
               ("render only\n(build)", "render.s"), ("render floor\n(kustomize)", "apply.render_floor_s"))


def _bars(axis, labels: list[str], entries: list[Figure], color: str) -> None:
    medians = [e.median for e in entries]
    below = [e.median - e.min for e in entries]
    above = [e.max - e.median for e in entries]
    axis.bar(labels, medians, yerr=[below, above], capsize=4, color=color)
    for index, value in enumerate(medians):
        axis.annotate(f"{value:.2f}", (index, value), textcoords="offset points", xytext=(0, 3), ha="center",
                      fontsize=8)


def plot(results: Results, path: Path, before: Results | None = None) -> None:
    figure, ((apply_axis, heal_axis), (scale_axis, steps_axis)) = plt.subplots(2, 2, figsize=(13, 9))
    objects = results.synthetic.objects or 0

    bars = [(label, key) for label, key in _APPLY_BARS if key in results.figures]  # older results lack some
    _bars(apply_axis, [label for label, _ in bars], [results.figures[key] for _, key in bars], "#4C72B0")
    if before:  # the same figures of the session before the change, as outlines
        medians = [before.figures[key].median if key in before.figures else 0 for _, key in bars]
        apply_axis.bar([label for label, _ in bars], medians, fill=False, edgecolor="#C44E52", linestyle="--",
                       label=f"before ({before.meta.date[:10]})")
        apply_axis.legend(fontsize=8)
    apply_axis.set_title(f"Apply {objects} objects: median, min-max (s)")
    apply_axis.set_ylabel("seconds")
    apply_axis.tick_params(axis="x", labelsize=8)

    heal = results.heal.p50
    samples = sorted(heal.samples)
    heal_axis.plot(range(1, len(samples) + 1), samples, marker=".", color="#55A868")
    heal_axis.axhline(heal.value, color="#55A868", linestyle="--", label=f"p50 {heal.value:.0f} ms")
    heal_axis.axhline(results.heal.p99.value, color="#C44E52", linestyle="--",
                      label=f"p99 {results.heal.p99.value:.0f} ms")
    heal_axis.axhline(100, color="grey", linestyle=":", label="p50 target 100 ms")
    heal_axis.set_title(f"Deployment heal latency, {len(samples)} deletes (sorted)")
    heal_axis.set_xlabel("trial (sorted)")
    heal_axis.set_ylabel("ms")
    heal_axis.legend(fontsize=8)

    points = results.sweep
    xs, ys = [p.objects for p in points], [p.applied_s for p in points]
    scale_axis.plot(xs, ys, marker="o", label="one KfDef: all applied")
    floors = [(p.objects, p.floor_s) for p in points if p.floor_s is not None]
    if floors:
        scale_axis.plot([objects for objects, _ in floors], [floor for _, floor in floors], marker="^",
                        color="#8172B3", label="floor: the same size applied at once")
    slope = ys[0] / xs[0]
    scale_axis.plot([0, xs[-1]], [0, slope * xs[-1]], linestyle=":", color="grey",
                    label="linear from the smallest size")
    many = results.many
    if many is not None:
        spread = many.figure
        scale_axis.errorbar([many.objects], [spread.median], yerr=[[spread.median - spread.min],
                                                                   [spread.max - spread.median]],
                            marker="s", color="#C44E52", capsize=4,
                            label=f"{many.kfdefs} KfDefs at once: all Ready"
                                  + (f" (session of {spread.session[:10]})" if spread.session else ""))
    scale_axis.set_title("Growth with objects")
    scale_axis.set_xlabel("objects")
    scale_axis.set_ylabel("seconds")
    scale_axis.legend(fontsize=8)

    profile = results.profile
    if profile:
        labels = list(profile.apply.steps_s)
        rows = range(len(labels))
        steps_axis.barh([r - 0.2 for r in rows], [profile.apply.steps_s[k] for k in labels], height=0.4,
                        color="#8172B2", label=f"first apply ({profile.apply.reconcile_wall_s:.1f} s wall)")
        steps_axis.barh([r + 0.2 for r in rows], [profile.noop.steps_s[k] for k in labels], height=0.4,
                        color="#CCB974",
                        label=f"no-op after restart ({profile.noop.reconcile_wall_s:.1f} s wall)")
        steps_axis.set_yticks(list(rows), labels, fontsize=8)
        steps_axis.invert_yaxis()
        steps_axis.set_title(f"Where one reconcile of {profile.objects} objects spends its time (s)")
        steps_axis.legend(fontsize=8)
    else:
        steps_axis.set_axis_off()

    figure.suptitle(f"kfdef-operator benchmarks ({results.meta.date}, {results.meta.machine.cores} cores)")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
