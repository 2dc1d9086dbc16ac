"""``bench/results.json``, ``docs/benchmarks.md`` and ``docs/benchmarks.png`` from one session's results."""

from __future__ import annotations

import json
from pathlib import Path

from .figures import JSON, ratios, target_rows, teardown_ratios
from .markdown import render_markdown


def write(results: JSON, out: Path, docs: Path) -> None:
    results["targets"] = target_rows(results)
    results["ratios"] = {**ratios(results), **teardown_ratios(results)}
    out.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    docs.mkdir(parents=True, exist_ok=True)
    before_path = out.parent / "results-before.json"
    before = json.loads(before_path.read_text()) if before_path.exists() and before_path != out else None
    from .plot import plot  # matplotlib is only needed here
    plot(results, docs / "benchmarks.png", before)
    (docs / "benchmarks.md").write_text(render_markdown(results, before))
