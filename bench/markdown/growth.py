"""Growth with objects: one KfDef at each size of the sweep against the floor of the same size, many KfDefs at once,
and the operator's memory at each size."""

from __future__ import annotations

from ..figures import rss_points
from ..results import Results, SweepPoint
from ..tables import fmt, table


def growth(results: Results) -> list[str]:
    return ["## Growth with objects", "", *_sweep(results), "", "Operator memory:", "", *_memory(results), "",
            "![benchmarks](benchmarks.png)"]


def _sweep(results: Results) -> list[str]:
    def floor(point: SweepPoint) -> list[str]:
        if point.floor_s is None:
            return ["-", "-", "-"]
        return [fmt(point.floor_s), fmt(point.floor_s / point.objects * 1000),
                f"{point.applied_s / point.floor_s:.2f}"]

    rows = [[fmt(p.scale), str(p.objects), fmt(p.applied_s), fmt(p.objects_per_s),
             fmt(p.applied_s / p.objects * 1000), *floor(p)] for p in results.sweep]
    many = results.many
    if many is not None:
        median = many.figure.median
        rows.append([f"{many.kfdefs} KfDefs", str(many.objects), fmt(median), fmt(many.objects / median),
                     fmt(median / many.objects * 1000), "-", "-", "-"])
    return table(["workload", "objects", "seconds (median)", "objects/s", "ms per object", "floor s",
                  "floor ms per object", "operator / floor"], rows)


def _memory(results: Results) -> list[str]:
    """The operator's resident memory at rest with one KfDef of each sweep size deployed."""
    points = rss_points(results)
    if not points:
        return ["(not measured)"]
    rows = [[fmt(p.scale), str(p.objects), fmt(p.rss_before_mb), fmt(p.rss_mb), fmt(p.growth_per_1000_mb)]
            for p in points]
    steps = [f"{fmt((b.rss_mb - a.rss_mb) / (b.objects - a.objects) * 1000)} MiB per 1,000 objects "
             f"from x{fmt(a.scale)} to x{fmt(b.scale)}" for a, b in zip(points, points[1:], strict=False)]
    return [*table(["scale", "objects", "RSS before the KfDef (MiB)", "RSS at rest with it (MiB)",
                    "above the empty operator, per 1,000 objects (MiB)"], rows), "",
            f"The empty operator (before the first sweep KfDef): {fmt(points[0].rss_before_mb)} MiB. "
            f"Growth between sizes: {'; '.join(steps) or '-'}. Memory is read from `/proc/<pid>/status` (VmRSS) "
            f"{fmt(5.0)} s after the KfDef is Ready; each size is torn down before the next (CPython keeps some "
            "freed memory, so a later size starts from a higher floor)."]
