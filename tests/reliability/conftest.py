"""Reliability tests: fixtures, and the plugin that turns the run into ``docs/reliability.md``.

Fixtures. ``kfdef_crd``, ``kfdef_namespace`` and ``new_stack`` are the cluster tests' own. The operator is not:
a session fixture imported into a second conftest is a second fixture definition, and pytest would start a
second operator next to the cluster tests' one (two operators reconciling the same KfDefs). Instead this package
pauses any operator another package started and runs its own, with the test knobs of :data:`OPERATOR_ENV`;
the paused one is started again when the package is done.

Report. Every test of this package is a scenario row (or several, see :class:`Scenario`); at the end of a session
in which reliability tests ran, the raw rows are written to ``<pytest basetemp>/reliability-report.json`` and
the report to ``<pytest basetemp>/reliability.md``. Only when asked (``make reliability-report``, which sets
``KFDEF_UPDATE_RELIABILITY_REPORT=1``) are the rows merged into the committed ``docs/reliability.md`` (rows of
scenarios that did not run this time are kept with their own date): an ordinary test run leaves the checkout
as it was.
"""

from __future__ import annotations

import datetime
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.conftest import kfdef_crd, kfdef_namespace, new_stack  # noqa: F401
from tests.operator_process import OperatorProcess
from tests.reliability.support import OPERATOR_ENV

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "docs" / "reliability.md"
HERE = Path(__file__).resolve().parent



def _other_operators(request: pytest.FixtureRequest) -> list[OperatorProcess]:
    """Operator processes started by other packages' ``operator`` fixtures and still running."""
    manager = request._fixturemanager  # noqa: SLF001 (no public API lists another package's fixtures)
    definitions = [d for by in (manager._arg2node2fixturedefs, manager._arg2nodeid2fixturedefs)  # noqa: SLF001
                   for defs in by.get("operator", {}).values() for d in defs]
    found = []
    for fixturedef in definitions:
        cached = getattr(fixturedef, "cached_result", None)
        if cached and isinstance(cached[0], OperatorProcess) and cached[0].popen is not None:
            found.append(cached[0])
    return found


@pytest.fixture(scope="package")
def operator(request, control_plane, kfdef_crd, tmp_path_factory) -> Iterator[OperatorProcess]:  # noqa: F811
    """``kfdef-operator run`` on all namespaces, the only operator running while this package runs."""
    paused = _other_operators(request)
    for process in paused:
        process.stop()
    process = OperatorProcess(control_plane.kubeconfig, tmp_path_factory.mktemp("reliability-operator"),
                              env=OPERATOR_ENV)
    process.start()
    try:
        yield process
    finally:
        process.stop()
        for other in paused:
            other.start()


# --- the report --------------------------------------------------------------------------------------------

GROUPS = {  # module -> (order, heading in the report)
    "test_operator_kills": (1, "Faults: the operator is killed (SIGKILL)"),
    "test_apiserver_restart": (2, "Faults: kube-apiserver restarts, watches expire (410 Gone)"),
    "test_source_faults": (3, "Faults: the manifest source fails"),
    "test_rejections": (4, "Faults: the API server rejects objects"),
    "test_stuck_deletions": (5, "Faults: slow or stuck deletions"),
    "test_bad_input": (6, "Bad input"),
    "test_security": (7, "Security"),
    "test_build_trust": (8, "Security: what a tenant's manifests can make a build do"),
    "test_build_boundary": (8, "Security: the build boundary holds where kustomize reads"),
    "test_source_trust": (9, "Security: what a source may reach"),
    "test_isolation": (10, "Isolation: slow sources, liveness, disk"),
    "test_tenancy": (11, "Security: a KfDef acts as a ServiceAccount of its namespace, never as the operator"),
    "test_destructive_actions": (12, "Security: never destroy what the stack did not create"),
    "test_high_availability": (13, "Replicas and shards: leader killed, rolling update, one shard per KfDef"),
}


@dataclass
class Scenario:
    """One row of the report: what was tried, how many times, with which figures."""

    name: str
    runs: int = 1
    figures: dict[str, Any] = field(default_factory=dict)
    note: str = ""


class Recorder:
    """Handed to tests as the ``reliability`` fixture. A test is one scenario by default; ``scenario(name)``
    adds named rows instead (they share the test's outcome)."""

    def __init__(self, default: str) -> None:
        self.default = Scenario(default)
        self.extra: list[Scenario] = []

    @property
    def runs(self) -> int:
        return self.default.runs

    @runs.setter
    def runs(self, value: int) -> None:
        self.default.runs = value

    def figure(self, name: str, value: Any) -> None:
        self.default.figures[name] = value

    def note(self, text: str) -> None:
        self.default.note = text

    def scenario(self, name: str) -> Scenario:
        row = Scenario(name)
        self.extra.append(row)
        return row

    def rows(self) -> list[Scenario]:
        return self.extra or [self.default]


_RECORDERS = pytest.StashKey[dict[str, Recorder]]()
_RESULTS = pytest.StashKey[dict[str, dict]]()


def _title(item: pytest.Item) -> str:
    doc = (getattr(item, "function", None).__doc__ or "").strip().splitlines()
    name = doc[0].rstrip(".") if doc else item.name.removeprefix("test_").replace("_", " ")
    param = getattr(getattr(item, "callspec", None), "id", None)
    return f"{name} [{param}]" if param else name


@pytest.fixture
def reliability(request) -> Recorder:
    recorder = Recorder(_title(request.node))
    request.config.stash.setdefault(_RECORDERS, {})[request.node.nodeid] = recorder
    return recorder


def _in_package(item: pytest.Item) -> bool:
    return HERE in item.path.resolve().parents


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    if not _in_package(item):
        return report
    results = item.config.stash.setdefault(_RESULTS, {})
    entry = results.setdefault(item.nodeid, {"outcome": "passed", "seconds": 0.0, "item": item})
    entry["seconds"] += report.duration
    if report.failed:
        entry["outcome"] = "failed" if report.when == "call" else f"error in {report.when}"
    elif report.skipped and entry["outcome"] == "passed":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        entry["outcome"] = "skipped: " + reason.removeprefix("Skipped: ")
    return report


def _rows(config: pytest.Config) -> list[dict]:
    recorders = config.stash.get(_RECORDERS, {})
    today = datetime.date.today().isoformat()
    rows = []
    for nodeid, entry in config.stash.get(_RESULTS, {}).items():
        item = entry["item"]
        module = item.path.stem
        recorder = recorders.get(nodeid) or Recorder(_title(item))
        for scenario in recorder.rows():
            rows.append({"module": module, "test": item.name, "scenario": scenario.name, "runs": scenario.runs,
                         "outcome": entry["outcome"], "seconds": round(entry["seconds"], 1),
                         "figures": scenario.figures, "note": scenario.note, "date": today})
    return rows


_DATA = re.compile(r"<!-- reliability-data\n(.*?)\n-->", re.S)


def _merge(previous: list[dict], current: list[dict]) -> list[dict]:
    ran = {(r["module"], r["test"]) for r in current}
    kept = [r for r in previous if (r["module"], r["test"]) not in ran]
    return sorted(kept + current, key=lambda r: (GROUPS.get(r["module"], (99, ""))[0], r["module"], r["test"],
                                                  r["scenario"]))


def _figures(figures: dict[str, Any]) -> str:
    def value(v: Any) -> str:
        return ", ".join(f"{k} {n}" for k, n in v.items()) or "none" if isinstance(v, dict) else str(v)
    return "; ".join(f"{k}: {value(v)}" for k, v in figures.items())


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _render(rows: list[dict], seconds: float) -> str:
    lines = [
        "# Reliability report",
        "",
        "Generated by the reliability suite (`tests/reliability/`, `make test PYTEST_ARGS=\"tests/reliability\"`)",
        "against the embedded control plane (kube-apiserver, etcd, controller-manager, scheduler, kwok) with the",
        "operator running as a process, exactly as in production. Do not edit by hand: the suite rewrites this file.",
        f"Last run: {datetime.date.today().isoformat()}. The scenarios take {seconds:.0f} s "
        "(each as last run, set-up and clean-up included; the control plane's start is not).",
        "",
        f"Scenarios: {len(rows)}; passed: {sum(r['outcome'] == 'passed' for r in rows)}; "
        f"runs in total: {sum(r['runs'] for r in rows)}.",
        "",
    ]
    module = None
    for row in rows:
        if row["module"] != module:
            if module is not None:
                lines.append("")
            module = row["module"]
            lines += [f"## {GROUPS.get(module, (99, module))[1]}", "", f"`tests/reliability/{module}.py`", "",
                      "| scenario | runs | outcome | figures | date |", "|---|---|---|---|---|"]
        figures = _figures(row["figures"]) + (f" ({row['note']})" if row["note"] else "")
        lines.append(f"| {_cell(row['scenario'])} | {row['runs']} | {_cell(row['outcome'])} | {_cell(figures)} "
                     f"| {row['date']} |")
    lines.append("")
    lines += [(HERE / "POLICIES.md").read_text().rstrip(), "",
              "<!-- reliability-data", json.dumps(rows, indent=0, sort_keys=True), "-->", ""]
    return "\n".join(lines)


def pytest_sessionfinish(session: pytest.Session) -> None:
    current = _rows(session.config)
    if not current:
        return
    basetemp = session.config._tmp_path_factory.getbasetemp()  # noqa: SLF001
    (basetemp / "reliability-report.json").write_text(json.dumps(current, indent=1, sort_keys=True))
    previous = []
    if REPORT.exists():
        match = _DATA.search(REPORT.read_text())
        if match:
            previous = json.loads(match.group(1))
    rows = _merge(previous, current)
    seconds = sum(r["seconds"] for r in {(r["module"], r["test"]): r for r in rows}.values())
    target = REPORT if os.environ.get("KFDEF_UPDATE_RELIABILITY_REPORT") == "1" else basetemp / "reliability.md"
    target.write_text(_render(rows, seconds))
