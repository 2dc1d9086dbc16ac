"""In-process metrics with Prometheus text exposition (no extra dependency).

Counters, gauges and histograms keyed by label tuples; ``render()`` produces
the ``text/plain; version=0.0.4`` format served on ``/metrics``.
"""

from __future__ import annotations

import bisect
import threading
from typing import Iterable

_DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


def _number(value: float) -> str:
    """Every digit kept: integers as integers, other floats at full precision."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    if not names:
        return ""
    escaped = (v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for v in values)
    return "{" + ",".join(f'{n}="{v}"' for n, v in zip(names, escaped)) + "}"


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str, labels: Iterable[str] = ()) -> None:
        self.name = name
        self.help = help_text
        self.label_names = tuple(labels)
        self._lock = threading.Lock()

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]


class Counter(_Metric):
    kind = "counter"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.values: dict[tuple[str, ...], float] = {}

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        with self._lock:
            self.values[labels] = self.values.get(labels, 0.0) + amount

    def value(self, *labels: str) -> float:
        return self.values.get(labels, 0.0)

    def lines(self) -> list[str]:
        return [f"{self.name}{_labels(self.label_names, k)} {_number(v)}" for k, v in sorted(self.values.items())]


class Gauge(Counter):
    kind = "gauge"

    def set(self, *labels: str, value: float) -> None:
        with self._lock:
            self.values[labels] = value

    def remove(self, *labels: str) -> None:
        with self._lock:
            self.values.pop(labels, None)


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, labels: Iterable[str] = (),
                 buckets: tuple[float, ...] = _DEFAULT_BUCKETS) -> None:
        super().__init__(name, help_text, labels)
        self.buckets = buckets
        self.series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}  # counts per bucket, [sum, count]

    def observe(self, value: float, *labels: str) -> None:
        with self._lock:
            counts, totals = self.series.setdefault(labels, ([0] * len(self.buckets), [0.0, 0]))
            index = bisect.bisect_left(self.buckets, value)
            if index < len(counts):
                counts[index] += 1
            totals[0] += value
            totals[1] += 1

    def count(self, *labels: str) -> int:
        return int(self.series.get(labels, ([], [0.0, 0]))[1][1])

    def lines(self) -> list[str]:
        out = []
        for key, (counts, (total, count)) in sorted(self.series.items()):
            cumulative = 0
            for bound, n in zip(self.buckets, counts):
                cumulative += n
                out.append(f"{self.name}_bucket{_labels(self.label_names + ('le',), key + (f'{bound:g}',))} {cumulative}")
            out.append(f"{self.name}_bucket{_labels(self.label_names + ('le',), key + ('+Inf',))} {int(count)}")
            out.append(f"{self.name}_sum{_labels(self.label_names, key)} {_number(total)}")
            out.append(f"{self.name}_count{_labels(self.label_names, key)} {int(count)}")
        return out


RECONCILE_SECONDS = Histogram("kfdef_reconcile_duration_seconds", "Time to reconcile a KfDef, by result.",
                              ("result",))
OBJECTS_APPLIED = Counter("kfdef_objects_applied_total", "Objects written by server-side apply, by action.",
                          ("action",))
APPLY_ERRORS = Counter("kfdef_apply_errors_total", "Objects the API server refused.", ("kind",))
HEALS = Counter("kfdef_heals_total", "Owned objects re-created or re-asserted, by cause.", ("cause",))
HEAL_SECONDS = Histogram("kfdef_heal_latency_seconds", "From the event to the object applied again.",
                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
CONDITION = Gauge("kfdef_condition", "Condition status per KfDef (1 true, 0 false).",
                  ("namespace", "name", "type"))
API_REQUESTS = Gauge("kfdef_api_requests", "Requests sent to kube-apiserver since start, by verb.", ("verb",))

REGISTRY: tuple[_Metric, ...] = (RECONCILE_SECONDS, OBJECTS_APPLIED, APPLY_ERRORS, HEALS, HEAL_SECONDS,
                                 CONDITION, API_REQUESTS)


def render() -> str:
    lines: list[str] = []
    for metric in REGISTRY:
        lines.extend(metric.header())
        lines.extend(metric.lines())
    return "\n".join(lines) + "\n"
