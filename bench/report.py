"""``bench/results.json``, ``docs/benchmarks.md`` and ``docs/benchmarks.png`` from one session's results."""

from __future__ import annotations

import json
from pathlib import Path

from kfdef_operator.api.types import JSON

from .figures import judged
from .markdown import render_markdown
from .results import Results, load, parse


def judge(document: JSON) -> Results:
    """The session in ``document`` (as ``bench/run.py`` builds it, or a results file read again) with its targets
    checked and its ratios computed, both also written into ``document``."""
    # Read as the results file will hold it (bench/run.py's own document holds tuples, for one), so that a fresh
    # session's page is the one `--report-only` makes of its file.
    results = judged(parse(json.loads(json.dumps(document))))
    document["targets"] = [row.to_json() for row in results.targets]
    document["ratios"] = dict(results.ratios)
    return results


def write(document: JSON, out: Path, docs: Path) -> None:
    """The results file of the session in ``document`` (its targets and ratios added) to ``out``, the page and the
    plot to ``docs``."""
    results = judge(document)
    out.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    docs.mkdir(parents=True, exist_ok=True)
    before_path = out.parent / "results-before.json"
    before = load(before_path) if before_path.exists() and before_path != out else None
    from .plot import plot  # matplotlib is only needed here
    plot(results, docs / "benchmarks.png", before)
    (docs / "benchmarks.md").write_text(render_markdown(results, before))
