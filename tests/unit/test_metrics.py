"""The operator's metrics as Prometheus scrapes them (kfdef_operator.runtime.metrics, prometheus-client)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from kfdef_operator.runtime import metrics


def scrape() -> dict[str, list]:
    return {family.name: family.samples for family in text_string_to_metric_families(metrics.exposition().decode())}


def test_counters_are_exposed_with_the_total_suffix_and_process_metrics_come_for_free():
    metrics.HEALS.labels("deleted").inc()
    text = metrics.exposition().decode()
    assert 'kfdef_heals_total{cause="deleted"}' in text
    assert "# TYPE kfdef_objects_applied_total counter" in text or "# TYPE kfdef_objects_applied counter" in text
    assert "process_resident_memory_bytes" in text and "process_cpu_seconds_total" in text


def test_api_requests_are_read_from_the_client_at_scrape_time():
    counts = {"GET": 3, "PATCH": 1}
    collector = metrics.count_api_requests(lambda: counts)
    try:
        samples = {s.labels["verb"]: s.value for s in scrape()["kfdef_api_requests"] if s.name.endswith("_total")}
        assert samples == {"GET": 3.0, "PATCH": 1.0}
        counts["GET"] = 7
        samples = {s.labels["verb"]: s.value for s in scrape()["kfdef_api_requests"] if s.name.endswith("_total")}
        assert samples["GET"] == 7.0
    finally:
        metrics.REGISTRY.unregister(collector)
    assert "kfdef_api_requests" not in scrape()


def test_condition_gauges_are_per_kfdef_and_removable():
    metrics.CONDITION.labels("ns", "kf", "Ready").set(1)
    assert any(s.labels == {"namespace": "ns", "name": "kf", "type": "Ready"} and s.value == 1.0
               for s in scrape()["kfdef_condition"])
    metrics.CONDITION.remove("ns", "kf", "Ready")
    assert not any(s.labels.get("name") == "kf" for s in scrape().get("kfdef_condition", []))


def test_heal_latency_is_a_histogram_with_millisecond_buckets():
    metrics.HEAL_SECONDS.observe(0.012)
    buckets = {s.labels["le"]: s.value for s in scrape()["kfdef_heal_latency_seconds"] if s.name.endswith("_bucket")}
    assert buckets["0.01"] <= buckets["0.025"] and buckets["+Inf"] >= 1


def test_apply_error_kinds_are_bounded_to_the_kinds_the_operator_knows():
    """A manifest names any kind it likes; the label takes the built-in kinds, the rest share one value."""
    assert metrics.kind_label("Deployment") == "Deployment"
    assert metrics.kind_label("ValidatingWebhookConfiguration") == "ValidatingWebhookConfiguration"
    labels = {metrics.kind_label(f"Attacker{i}") for i in range(1000)} | {metrics.kind_label("Profile")}
    assert labels == {metrics.OTHER_KINDS}
