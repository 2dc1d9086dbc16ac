"""The results loader: the stored sessions load whole, a part a session did not run is ``None``, and a document of
the wrong shape is refused with the key at fault."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from bench.results import ResultsError, load, parse
from kfdef_operator.api.types import JSON

BENCH = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def stored() -> JSON:
    return json.loads((BENCH / "results.json").read_text())


def test_the_stored_session_loads_whole(stored: JSON) -> None:
    results = load(BENCH / "results.json")
    assert results.meta.date == stored["meta"]["date"]
    assert results.meta.machine.cores == stored["meta"]["machine"]["cores"]
    assert results.figures["apply.operator_s"].median == stored["apply.operator_s"]["median"]
    assert results.synthetic.operator is results.figures["apply.operator_s"]
    assert results.release.floor is results.figures["release.apply.floor_s"]
    assert results.release.steps == stored["release.apply.steps"]["median"]
    assert set(results.synthetic.cpu) == {"apply.operator", "apply.floor", "teardown.operator", "teardown.floor"}
    assert [len(run) for run in results.synthetic.teardown_waves] == [len(run) for run in stored["teardown.s"]["waves"]]
    assert results.heal.floor_p99 is results.figures["heal.floor_p99_ms"]
    assert results.replicas is not None and results.replicas.sharded.kfdefs == stored["shards.fleet_s"]["kfdefs"]
    assert results.profile is not None and results.profile.noop.steps_s == stored["profile"]["noop"]["steps_s"]
    assert [row.met for row in results.targets] == [row["met"] for row in stored["targets"]]
    assert results.ratios == stored["ratios"]
    assert [p.objects for p in results.sweep] == sorted(p["objects"] for p in stored["scale.sweep"])


def test_the_session_before_loads(stored: JSON) -> None:
    """``results-before.json`` predates the status write figures."""
    before = load(BENCH / "results-before.json")
    assert before.meta.commit and "status_write.strings.apiserver_cpu_ms" not in before.figures


def test_numbers_keep_their_json_type(stored: JSON) -> None:
    """The report prints some values as the file holds them (``3`` is not ``3.0``)."""
    results = parse(stored)
    assert type(results.figures["noop.writes"].max) is int
    assert results.noop.operator_client == stored["noop.writes"]["operator_client"]


def _without(results: JSON, *prefixes: str) -> JSON:
    return {key: value for key, value in results.items() if not key.startswith(prefixes)}


def test_parts_a_session_did_not_run_are_none(stored: JSON) -> None:
    """A session with ``--skip ha,profile``, without the real release and the heal floor (results that predate
    them), and one whose sweep or many-KfDefs part measured nothing."""
    data = _without(stored, "ha.", "shards.", "release.", "heal.floor_")
    data.update(profile=None, **{"scale.kfdefs_s": {}})
    results = parse(data)
    assert (results.replicas, results.profile, results.kubeflow, results.many) == (None, None, None, None)
    assert (results.heal.floor_p50, results.heal.floor_p99) == (None, None)
    assert results.release.operator is None and results.release.steps == {} and results.release.cpu == {}
    assert results.synthetic.operator is not None


def test_older_sessions_lack_the_write_details(stored: JSON) -> None:
    """Sessions before the audit log's writes by client (2026-11-27) had no ``others`` and no ``idle.writes``."""
    data = _without(copy.deepcopy(stored), "idle.writes", "scale.sweep_failures")
    for key in ("others", "server_stack_writes"):
        del data["noop.writes"][key]
    results = parse(data)
    assert results.noop.others == [] and results.sweep_failures == ()
    assert results.idle.writes_others == {}


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r["heal.p99_ms"].update(median="12"), "heal.p99_ms.median: a number expected, found '12'"),
    (lambda r: r["meta"].pop("machine"), "meta.machine: missing"),
    (lambda r: r["targets"][2].update(met="yes"), "targets[2].met: true, false or null expected, found 'yes'"),
    (lambda r: r["scale.sweep"][1].pop("applied_s"), "scale.sweep[1].applied_s: missing"),
    (lambda r: r["profile"]["noop"]["steps_s"].update(events=None), "profile.noop.steps_s.events: a number expected"),
    (lambda r: r.update(ratios=[]), "ratios: an object expected, found list"),
])
def test_a_document_of_the_wrong_shape_is_refused_naming_the_key(stored: JSON, change, message: str) -> None:
    data = copy.deepcopy(stored)
    change(data)
    with pytest.raises(ResultsError, match="^" + re.escape(message)):
        parse(data)


def test_a_file_that_is_not_json_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text('{"meta": ')
    with pytest.raises(ResultsError, match=f"^{re.escape(str(path))}: not JSON"):
        load(path)

