"""What ``bench/report.py`` makes of a session: the document ``bench/run.py`` builds is read as its results file
will hold it, and gets its targets and ratios as the file holds them."""

from __future__ import annotations

import json

from bench.report import judge
from bench.tests import sessions


def test_a_fresh_session_is_read_as_its_results_file_will_hold_it() -> None:
    """``bench/run.py``'s own document holds tuples (``os.getloadavg()``) where the file holds lists."""
    document = sessions.quick()
    written = {"targets": document.pop("targets"), "ratios": document.pop("ratios")}
    document["meta"]["machine"]["load_average_at_end"] = tuple(document["meta"]["machine"]["load_average_at_end"])
    results = judge(document)
    assert results.meta.machine.load_average_at_end == tuple(document["meta"]["machine"]["load_average_at_end"])
    assert {"targets": document["targets"], "ratios": document["ratios"]} == written
    assert json.loads(json.dumps(document)) == sessions.quick()
