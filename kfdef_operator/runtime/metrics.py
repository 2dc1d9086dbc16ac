"""Prometheus metrics of the operator (``prometheus-client``; process metrics come with its default registry)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from kfdef_operator.ssa.ordering import KNOWN_KINDS

RECONCILE_SECONDS = Histogram("kfdef_reconcile_duration_seconds", "Time to reconcile a KfDef, by result.",
                              ["result"], buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600))
OBJECTS_APPLIED = Counter("kfdef_objects_applied", "Objects written by server-side apply, by action.", ["action"])
APPLY_ERRORS = Counter("kfdef_apply_errors", "Objects the API server refused, by kind (the built-in kinds the "
                       "operator knows; every other kind counts as CustomResource).", ["kind"])
OTHER_KINDS = "CustomResource"


def kind_label(kind: str) -> str:
    """``kind`` as a metric label: manifests name any kind they like, so only the operator's known kinds are kept
    and the rest share one label (the series stay bounded)."""
    return kind if kind in KNOWN_KINDS else OTHER_KINDS
HEALS = Counter("kfdef_heals", "Owned objects re-created or re-asserted, by cause.", ["cause"])
HEAL_SECONDS = Histogram("kfdef_heal_latency_seconds", "From the event to the object applied again.",
                         buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
LEADER = Gauge("kfdef_leader", "1 while this replica holds its shard's leader lease (0: standby).", ["lease"])
CONDITION = Gauge("kfdef_condition", "Condition status per KfDef (1 true, 0 false).", ["namespace", "name", "type"])
DEGRADED_REASON = Gauge("kfdef_degraded_reason", "1 while a KfDef is Degraded, labelled with the reason (the series "
                        "goes when the reason changes or Degraded clears).", ["namespace", "name", "reason"])
OBJECTS = Gauge("kfdef_objects", "A KfDef's objects by state (total, applied, ready, failed), as in status.summary.",
                ["namespace", "name", "state"])
RENDER_SECONDS = Histogram("kfdef_render_duration_seconds", "Time to render a KfDef's applications (a render-cache "
                           "hit included).", buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
WORK_POOL_JOBS = Gauge("kfdef_work_pool_jobs", "Source fetches and renders on the work pool, by state (running, "
                       "waiting).", ["state"])


def remove_series(gauge: Gauge, *labels: str) -> None:
    """Drop one labelled series of ``gauge``, if it was ever set."""
    try:
        gauge.remove(*labels)
    except KeyError:
        pass


class ApiRequests(Collector):
    """``kfdef_api_requests_total{verb}``, read from the API client's own counts at scrape time."""

    def __init__(self, counts: Callable[[], Mapping[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily("kfdef_api_requests", "Requests sent to kube-apiserver, by verb.",
                                     labels=["verb"])
        for verb, count in sorted(self._counts().items()):
            family.add_metric([verb], count)
        yield family


def count_api_requests(counts: Callable[[], Mapping[str, int]]) -> ApiRequests:
    """Export the API client's request counts; returns the collector (unregister it when the client closes)."""
    collector = ApiRequests(counts)
    REGISTRY.register(collector)
    return collector


def stop_counting_api_requests(collector: ApiRequests) -> None:
    """Drop a collector from ``count_api_requests`` (its client is closed)."""
    REGISTRY.unregister(collector)


def watch_work_pool(running: Callable[[], int], waiting: Callable[[], int]) -> None:
    """Report the work pool's running and waiting jobs at scrape time."""
    WORK_POOL_JOBS.labels("running").set_function(running)
    WORK_POOL_JOBS.labels("waiting").set_function(waiting)


def exposition() -> bytes:
    """Every metric in the Prometheus text format."""
    return generate_latest(REGISTRY)
