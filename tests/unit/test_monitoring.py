"""deploy/monitoring/: every metric its alerts and dashboard query is one the operator serves on /metrics, and the
alerts pass ``promtool check rules`` and their ``promtool test rules`` unit tests.

promtool is ``$KFDEF_PROMTOOL``, else the path ``tools/build-promtool.sh`` would build (``make promtool``, which
``make test`` runs first).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.metrics_core import Metric

from kfdef_operator.runtime import metrics
from kfdef_operator.runtime.inventory import InventoryFormat
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.runtime.status import StatusWriter
from tests.kustomize_cli import cli_build

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "deploy" / "monitoring"
RULE = MONITORING / "prometheusrule.yaml"
DASHBOARD = MONITORING / "kfdef-operator-dashboard.json"
#: The samples each type of metric family is exposed as.
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "gauge": ("",), "summary": ("", "_sum", "_count", "_created"), "info": ("_info",)}
OURS = re.compile(r"\bkfdef_[a-zA-Z0-9_]*")


def served() -> set[str]:
    """The names of the samples the operator's /metrics can hold (labelled families included before their first
    series, and the API request counts the client registers once connected)."""
    collector = metrics.count_api_requests(dict)
    try:
        families: list[Metric] = list(metrics.REGISTRY.collect())
    finally:
        metrics.stop_counting_api_requests(collector)
    return {family.name + suffix for family in families for suffix in SUFFIXES[family.type]}


def rule_groups() -> list[dict]:
    return yaml.safe_load(RULE.read_text())["spec"]["groups"]


def rule_queries() -> list[str]:
    return [rule["expr"] for group in rule_groups() for rule in group["rules"]]


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    queries += [variable["query"]["query"] for variable in dashboard["templating"]["list"]
                if isinstance(variable.get("query"), dict)]
    return queries


@pytest.mark.parametrize("source, queries", [("rules", rule_queries), ("dashboard", dashboard_queries)])
def test_every_metric_queried_is_served(source, queries):
    used = {name for query in queries() for name in OURS.findall(query)}
    assert used, f"the {source} query no kfdef_ metric"
    assert sorted(used - served()) == [], f"the {source} query metrics the operator does not serve"


def test_the_dashboard_covers_what_on_call_needs():
    queried = " ".join(dashboard_queries())
    for metric in ("kfdef_condition", "kfdef_reconcile_duration_seconds_bucket", "kfdef_heal_latency_seconds_bucket",
                   "kfdef_objects", "kfdef_render_duration_seconds_bucket", "kfdef_api_requests_total"):
        assert metric in queried, metric


def test_the_alerts_are_the_ones_the_docs_name():
    alerts = [rule["alert"] for group in rule_groups() for rule in group["rules"]]
    assert alerts == ["KfDefNotReady", "KfDefObjectFight", "KfDefRenderOrSourceFailing", "KfDefOperatorNoLeader",
                      "KfDefTeardownStuck"]
    docs = (ROOT / "docs" / "deployment.md").read_text()
    assert all(f"`{alert}`" in docs for alert in alerts)


def promtool() -> Path:
    explicit = os.environ.get("KFDEF_PROMTOOL")
    path = Path(explicit) if explicit else Path(subprocess.run(
        [ROOT / "tools" / "build-promtool.sh", "--path"], check=True, capture_output=True, text=True).stdout.strip())
    if not os.access(path, os.X_OK):
        pytest.fail(f"no promtool binary at {path}: run `make promtool` (needs Go and the module proxy)")
    return path


@pytest.mark.kustomize  # promtool is Go-built
def test_the_rules_pass_promtool_check_and_their_unit_tests(tmp_path: Path):
    (tmp_path / "kfdef-operator.rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups()}, sort_keys=False))
    shutil.copy(MONITORING / "rules-test.yaml", tmp_path / "rules-test.yaml")
    checked = subprocess.run([promtool(), "check", "rules", "kfdef-operator.rules.yaml"], cwd=tmp_path,
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = subprocess.run([promtool(), "test", "rules", "rules-test.yaml"], cwd=tmp_path, capture_output=True,
                            text=True)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_exported_degraded_reason_follows_the_condition():
    stack = Stack(Owner("monitored", "ns", "uid"), 1)
    writer = StatusWriter(None, stack, None, None, health_timeout=1,  # type: ignore[arg-type]
                          inventory_format=InventoryFormat())

    def exported() -> dict[tuple[str, str], float]:
        return {(s.labels["reason"], s.name): s.value for family in metrics.REGISTRY.collect()
                if family.name == "kfdef_degraded_reason" for s in family.samples if s.labels["name"] == "monitored"}

    def degraded(status: str, reason: str) -> None:
        stack.status = {"conditions": [{"type": "Degraded", "status": status, "reason": reason}],
                        "summary": {"total": 3, "applied": 3, "ready": 2, "failed": 0}}
        writer._export()

    degraded("True", "ApplyFailed")
    assert exported() == {("ApplyFailed", "kfdef_degraded_reason"): 1.0}
    degraded("True", "TeardownStuck")
    assert exported() == {("TeardownStuck", "kfdef_degraded_reason"): 1.0}
    degraded("False", "AsExpected")
    assert exported() == {}
    objects = {s.labels["state"]: s.value for family in metrics.REGISTRY.collect() if family.name == "kfdef_objects"
               for s in family.samples if s.labels["name"] == "monitored"}
    assert objects == {"total": 3, "applied": 3, "ready": 2, "failed": 0}
    degraded("True", "Attention")
    writer.forget()
    assert exported() == {}


@pytest.mark.kustomize
def test_the_kustomization_ships_the_rule_the_dashboard_and_the_scrape():
    built = {obj["kind"]: obj for obj in cli_build(MONITORING)}
    assert sorted(built) == ["ConfigMap", "PrometheusRule", "ServiceMonitor"]
    assert built["PrometheusRule"]["spec"]["groups"] == rule_groups()
    dashboard = built["ConfigMap"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["kfdef-operator-dashboard.json"]) == json.loads(DASHBOARD.read_text())
    endpoints = built["ServiceMonitor"]["spec"]["endpoints"]
    assert endpoints == [{"port": "metrics", "path": "/metrics", "honorLabels": True}]
