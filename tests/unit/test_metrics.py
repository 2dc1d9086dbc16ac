"""Prometheus text exposition of the in-process metrics (kfdef_operator.runtime.metrics)."""

from __future__ import annotations

import re

import pytest

from kfdef_operator.runtime import metrics
from kfdef_operator.runtime.metrics import Counter, Gauge, Histogram

SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?P<labels>\{.*\})? (?P<value>\S+)$')


def samples(lines: list[str]) -> dict[str, float]:
    out = {}
    for line in lines:
        match = SAMPLE.match(line)
        assert match, f"not a valid sample line: {line!r}"
        out[match["name"] + (match["labels"] or "")] = float(match["value"])
    return out


def test_header_has_help_and_type():
    counter = Counter("t_requests_total", "Requests served.", ("verb",))
    assert counter.header() == ["# HELP t_requests_total Requests served.", "# TYPE t_requests_total counter"]
    assert Gauge("t_g", "G.").header()[1] == "# TYPE t_g gauge"
    assert Histogram("t_h", "H.").header()[1] == "# TYPE t_h histogram"


def test_counter_lines_sorted_by_labels():
    counter = Counter("t_total", "T.", ("verb", "code"))
    counter.inc("PATCH", "200", amount=2)
    counter.inc("GET", "200")
    counter.inc("GET", "200")
    assert counter.lines() == ['t_total{verb="GET",code="200"} 2', 't_total{verb="PATCH",code="200"} 2']
    assert counter.value("GET", "200") == 2 and counter.value("DELETE", "404") == 0


def test_metric_without_labels_has_no_braces():
    counter = Counter("t_total", "T.")
    counter.inc(amount=0.5)
    assert counter.lines() == ["t_total 0.5"]


@pytest.mark.parametrize("raw, escaped", [
    ('say "hi"', r'say \"hi\"'),
    ("back\\slash", r"back\\slash"),
    ("two\nlines", r"two\nlines"),
    ('all \\ " \n', r'all \\ \" \n'),
])
def test_label_values_are_escaped(raw, escaped):
    counter = Counter("t_total", "T.", ("why",))
    counter.inc(raw)
    (line,) = counter.lines()
    assert line == f't_total{{why="{escaped}"}} 1'
    assert "\n" not in line


def test_gauge_set_and_remove():
    gauge = Gauge("t_g", "G.", ("ns", "name"))
    gauge.set("a", "x", value=1)
    gauge.set("a", "x", value=0)
    gauge.set("b", "y", value=1)
    gauge.remove("b", "y")
    gauge.remove("never", "set")
    assert gauge.lines() == ['t_g{ns="a",name="x"} 0']


def test_histogram_buckets_are_cumulative_with_inf_equal_to_count():
    histogram = Histogram("t_seconds", "T.", ("result",), buckets=(0.1, 1, 10))
    for value in (0.05, 0.1, 0.5, 1, 3, 20, 25):
        histogram.observe(value, "ok")
    histogram.observe(2, "error")

    lines = histogram.lines()
    values = samples(lines)
    assert [line.split(" ")[0] for line in lines[:6]] == [
        't_seconds_bucket{result="error",le="0.1"}', 't_seconds_bucket{result="error",le="1"}',
        't_seconds_bucket{result="error",le="10"}', 't_seconds_bucket{result="error",le="+Inf"}',
        't_seconds_sum{result="error"}', 't_seconds_count{result="error"}']
    ok = {key: value for key, value in values.items() if 'result="ok"' in key}
    assert ok == {
        't_seconds_bucket{result="ok",le="0.1"}': 2,   # a value equal to a bound counts in it (le)
        't_seconds_bucket{result="ok",le="1"}': 4,
        't_seconds_bucket{result="ok",le="10"}': 5,
        't_seconds_bucket{result="ok",le="+Inf"}': 7,
        't_seconds_sum{result="ok"}': pytest.approx(49.65),
        't_seconds_count{result="ok"}': 7,
    }
    assert histogram.count("ok") == 7 and histogram.count("error") == 1 and histogram.count("none") == 0


def test_histogram_without_labels():
    histogram = Histogram("t_h", "T.", buckets=(1,))
    histogram.observe(0.5)
    assert histogram.lines() == ['t_h_bucket{le="1"} 1', 't_h_bucket{le="+Inf"} 1', "t_h_sum 0.5", "t_h_count 1"]


def test_empty_metrics_have_headers_only():
    histogram = Histogram("t_h", "T.")
    assert histogram.lines() == []
    assert Counter("t_c", "C.").lines() == []


def test_large_counter_values_keep_every_digit():
    counter = Counter("t_requests", "T.", ("verb",))
    counter.inc("GET", amount=1234567)
    (line,) = counter.lines()
    assert float(line.rpartition(" ")[2]) == 1234567, (
        f"BUG in kfdef_operator/metrics.py Counter.lines(): values are formatted with '{{v:g}}' (6 significant "
        f"digits), so 1234567 is exposed as {line.rpartition(' ')[2]!r}; counters such as kfdef_api_requests "
        f"lose precision above 999999")


def test_render_exposes_every_registered_metric():
    text = metrics.render()
    assert text.endswith("\n")
    for metric in metrics.REGISTRY:
        assert f"# HELP {metric.name} " in text
        assert f"# TYPE {metric.name} {metric.kind}\n" in text
    for line in text.splitlines():
        assert line.startswith("# ") or SAMPLE.match(line), line
