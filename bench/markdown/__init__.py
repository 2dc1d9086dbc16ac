"""``docs/benchmarks.md``: one session's results as a page of sections (generated; edit bench/, not the page).

Each module holds the sections on one subject, each section a function returning its lines, heading first:

- session: what the page is, the setup, the figures and their ratios;
- apply: the real release, the operator against the floor of issue 26, where the time and the CPU go;
- before_after: the session before a change beside this one;
- targets: the targets, and why each missed one is missed;
- studies: what was measured apart from the session (its figures written in the section);
- status_write: what a status write costs kube-apiserver;
- measures: what each figure measures;
- replicas: replicas and shards (none when the session has no such figures);
- upgrade: day 2, an upgrade against a teardown and a fresh deploy (none when the session has no such figures);
- growth: growth with objects, and the operator's memory;
- profile: the profile of the apply path.
"""

from __future__ import annotations

from ..results import Results
from .apply import against_floor, release, time_and_cpu
from .before_after import before_after
from .growth import growth
from .measures import measures
from .profile import profile
from .replicas import replicas_and_shards
from .session import figures, introduction, setup
from .status_write import status_write
from .studies import apply_phase_waits, findings_of_issue_18, heal_tail, render_helper
from .targets import targets
from .upgrade import day_two


def render_markdown(results: Results, before: Results | None = None) -> str:
    """The page of ``results`` (targets and ratios already derived: ``bench.figures.judged``), with ``before``
    (``bench/results-before.json``) beside it."""
    sections = [introduction(), setup(results), figures(results), release(results), against_floor(results),
                time_and_cpu(results), before_after(before, results), targets(results), apply_phase_waits(),
                heal_tail(), status_write(results), render_helper(), findings_of_issue_18(results),
                measures(results), replicas_and_shards(results), day_two(results), growth(results),
                profile(results)]
    return "\n".join(line for section in sections if section for line in (*section, ""))
