"""The day-2 upgrade's figures (``bench/upgrade.py``) in the results and the report: its section, its target, its
ratio, a failed upgrade told as such, and sessions that predate it; and how a round reads the KfDef's status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import upgrade
from bench.figures import judged
from bench.markdown import render_markdown
from bench.results import parse
from bench.standalone import merge_into
from bench.tests import sessions
from kfdef_operator.api.types import JSON

DAY_TWO = "## Day 2: an upgrade against a teardown and a fresh deploy (issue 38)"
TARGET = "upgrade.ready_s <= 1.0 x (upgrade.teardown_s + upgrade.fresh_ready_s)"
#: Three rounds: upgrades of 40, 45 and 38 s against teardowns of 10, 11, 12 s and fresh deploys of 18, 19, 20 s.
ROUNDS = {"ready_s": [40.0, 45.0, 38.0], "teardown_s": [10.0, 11.0, 12.0], "fresh_ready_s": [18.0, 19.0, 20.0]}


def _page(document: JSON) -> str:
    return render_markdown(judged(parse(document)), parse(sessions.before()))


def _section(page: str) -> str:
    return page.split(f"\n{DAY_TWO}\n", 1)[1].split("\n## ", 1)[0]


def _target(document: JSON):
    [row] = [row for row in judged(parse(document)).targets if row.target.startswith(TARGET)]
    return row


def _line(text: str, start: str) -> str:
    [line] = [line for line in text.splitlines() if line.startswith(start)]
    return line


def test_the_report_has_the_section_with_medians_rounds_and_the_ratio() -> None:
    document = sessions.with_upgrade(sessions.full(), **ROUNDS)
    section = _section(_page(document))
    assert "Kubeflow v1.2.0 (552 objects" in section and "v1.11.0's (628 objects" in section
    assert _line(section, "| `upgrade.ready_s` |").split(" | ")[2:6] == ["40.0", "38.0", "45.0", "3 |"]
    assert _line(section, "| `upgrade.teardown_s` |").split(" | ")[2] == "11.0"
    # Medians: 40 / (11 + 19).
    assert "upgrade / (teardown + fresh deploy) = **1.33** (target: at most 1.0)" in section
    assert _line(section, "| 2 | 35.0 |").split(" | ") == ["| 2", "35.0", "45.0", "11.0", "19.0", "30.0", "1.50 |"]
    assert _line(section, "| 1 | 213 configured, 387 created |").split(" | ")[2:6] == [
        "262 deleted", "2 Deployment, 1 StatefulSet", "2 CRDs, 3 objects", "1 |"]
    assert ("The CRDs whose stored versions were migrated: `certificates.cert-manager.io`, "
            "`orders.acme.cert-manager.io`.") in section
    assert ("The first apply's failures in round 1: `Issuer.cert-manager.io kubeflow/selfsigned-issuer`: 404 : 404 "
            "page not found.") in section
    assert "the upgrade cost **1100** writes of the operator and 180 of every other client" in section
    assert "the teardown and fresh deploy 1400 of the operator's and 300 of the others" in section
    assert "| upgrade | 2 | 30.0 | 2.5 | 0.5 | 0.4 | 6 | 8 | 49.4 |" in section


def test_its_target_and_the_note_on_a_miss() -> None:
    missed = sessions.with_upgrade(sessions.full(), **ROUNDS)
    row = _target(missed)
    assert (row.measured, row.limit, row.met) == (40.0, 30.0, False)
    assert row.note == "missed by 10.0 s (1.33x the limit)"
    note = _line(_page(missed), "- **upgrade.ready_s**")
    assert "re-created 3 objects for an immutable field" in note and "migrated the stored versions of 2 CRDs" in note
    met = sessions.with_upgrade(sessions.full(), ready_s=[29.0, 30.0, 31.0], teardown_s=ROUNDS["teardown_s"],
                                fresh_ready_s=ROUNDS["fresh_ready_s"])
    assert _target(met).met is True


def test_an_upgrade_not_ready_in_time_is_a_missed_target_with_the_kfdef_status() -> None:
    """The second of three upgrades not Ready in time: the target is missed whatever the others' times, the section
    has that round's KfDef status, and the figures come from the rounds that measured them."""
    document = sessions.with_upgrade(sessions.full(), ready_s=[29.0, None, 31.0], teardown_s=ROUNDS["teardown_s"],
                                     fresh_ready_s=ROUNDS["fresh_ready_s"])
    row = _target(document)
    assert (row.met, row.measured, row.note) == (False, None, "1 of 3 upgrades not Ready in time: see *Day 2*")
    page = _page(document)
    section = _section(page)
    assert ("- round 2: KfDef kubeflow-1 edited from Kubeflow v1.2.0 to v1.11.0: not Ready for generation 2 300 s "
            "after the edit (its first apply done after 23.8 s)") in section
    assert "Certificate.cert-manager.io kubeflow/kfp-cache-cert (missing)" in section
    assert _line(section, "| 2 | 23.8 |").split(" | ")[2] == "**not Ready**"
    assert _line(section, "| `upgrade.ready_s` |").split(" | ")[2:6] == ["30.0", "29.0", "31.0", "2 |"]
    assert ("Ratio of medians (the upgrade's over those Ready in time): upgrade / (teardown + fresh deploy) = "
            "**1.00**") in section
    assert _line(page, "- **upgrade.ready_s**") == ("- **upgrade.ready_s**: 1 of 3 upgrades were not Ready in time; "
                                                    "*Day 2* has each one's KfDef status.")
    assert upgrade.failures(document) == [document["upgrade.rounds"][1]["failure"]]


def test_a_session_without_the_upgrade_has_no_section_and_its_target_is_not_measured() -> None:
    document = sessions.without(sessions.full(), "upgrade.")
    assert DAY_TWO not in _page(document)
    assert _target(document).met is None


def test_a_standalone_run_replaces_the_earlier_runs_entries_only(tmp_path: Path) -> None:
    earlier = sessions.with_upgrade(sessions.full(), ready_s=[None], teardown_s=[10.0], fresh_ready_s=[20.0])
    out = tmp_path / "results.json"
    out.write_text(json.dumps(earlier))
    merge_into(out, tmp_path, sessions.upgrade_run(**ROUNDS), replaced=("upgrade.",))
    merged = json.loads(out.read_text())
    assert upgrade.failures(earlier) and not upgrade.failures(merged)
    assert merged["upgrade.ready_s"]["samples"] == ROUNDS["ready_s"]
    assert merged["apply.operator_s"] == earlier["apply.operator_s"]
    assert DAY_TWO in (tmp_path / "benchmarks.md").read_text()


def _kfdef(generation: int, ready: str, *, reconciling: str = "False", observed: int | None = None) -> JSON:
    observed = generation if observed is None else observed
    return {"status": {"observedGeneration": observed, "summary": {"total": 628, "applied": 628},
                       "conditions": [{"type": "Ready", "status": ready, "reason": "Ready", "message": "ready",
                                       "observedGeneration": generation},
                                      {"type": "Reconciling", "status": reconciling, "reason": "Done",
                                       "message": "reconciled", "observedGeneration": generation}],
                       "failures": [{"object": "Issuer.cert-manager.io kubeflow/a", "message": "404"}]}}


@pytest.mark.parametrize(("kfdef", "done", "ready"), [
    (_kfdef(1, "True"), False, False),                       # the old generation's status
    (_kfdef(2, "False", reconciling="True"), False, False),  # the new one being applied
    (_kfdef(2, "False"), True, False),                       # applied, not Ready yet
    (_kfdef(2, "True"), True, True),
], ids=["old generation", "applying", "applied", "ready"])
def test_a_round_waits_for_the_new_generation(kfdef: JSON, done: bool, ready: bool) -> None:
    assert upgrade.reconciled_for(2)(kfdef) is done
    assert upgrade.ready_for(2)(kfdef) is ready


def test_why_not_ready_tells_conditions_failures_and_warnings() -> None:
    told = upgrade.why_not_ready(_kfdef(2, "False"))
    assert "Ready=False (Ready, generation 2): ready" in told
    assert "failures: Issuer.cert-manager.io kubeflow/a: 404" in told
    assert told.endswith("warnings: none")
