"""The headline figures of the session before a change beside this session's (``bench/results-before.json``;
issue 18)."""

from __future__ import annotations

from collections.abc import Callable

from ..results import Results
from ..tables import fmt, table

#: How one figure is read from a session, as the table shows it; ``None``: the session has none.
Reader = Callable[[Results], str | None]


def _value(key: str) -> Reader:
    return lambda results: None if (figure := results.figures.get(key)) is None else fmt(figure.value)


def _max(key: str) -> Reader:
    return lambda results: None if (figure := results.figures.get(key)) is None else fmt(figure.max)


def _ratio(name: str) -> Reader:
    return lambda results: None if (value := results.ratios.get(name)) is None else f"{value:.2f}"


def _idle_window(results: Results) -> str:
    return fmt(results.idle.window_s)


#: The figures compared: label, and how each is read.
_COMPARED: tuple[tuple[str, Reader], ...] = (
    ("synthetic: operator apply (s)", _value("apply.operator_s")),
    ("synthetic: floor apply (s)", _value("apply.floor_s")),
    ("synthetic: render floor, kustomize alone (s)", _value("apply.render_floor_s")),
    ("synthetic: operator / (render floor + floor)", _ratio("operator/(render floor + floor)")),
    ("synthetic: operator / floor", _ratio("operator/floor")),
    ("synthetic: operator / kubectl SSA", _ratio("operator/kubectl")),
    ("synthetic: teardown (s)", _value("teardown.s")),
    ("synthetic: teardown floor (s)", _value("teardown.floor_s")),
    ("synthetic: teardown operator / floor", _ratio("teardown operator/floor")),
    ("v1.11.0: operator apply (s)", _value("release.apply.operator_s")),
    ("v1.11.0: floor apply (s)", _value("release.apply.floor_s")),
    ("v1.11.0: render floor, kustomize alone (s)", _value("release.apply.render_floor_s")),
    ("v1.11.0: operator / (render floor + floor)", _ratio("release operator/(render floor + floor)")),
    ("v1.11.0: apply phase (s)", _value("release.apply.apply_phase_s")),
    ("v1.11.0: apply phase / floor", _ratio("release apply phase/floor")),
    ("v1.11.0: operator / (render floor + kubectl SSA)", _ratio("release operator/(render floor + kubectl)")),
    ("v1.11.0: operator / floor", _ratio("release operator/floor")),
    ("v1.11.0: operator / kubectl SSA", _ratio("release operator/kubectl")),
    ("v1.11.0: teardown (s)", _value("release.teardown.s")),
    ("v1.11.0: teardown floor (s)", _value("release.teardown.floor_s")),
    ("v1.11.0: teardown operator / floor", _ratio("release teardown operator/floor")),
    ("no-op restart: writes (max; before: every client's, after: the operator's)", _max("noop.writes")),
    ("no-op restart, both stacks: writes (as above)", _value("release.noop.writes")),
    ("idle, both stacks: writes (as above)", _value("idle.writes")),
    ("idle window (s)", _idle_window),
    ("operator RSS, v1.11.0 at rest (MiB)", _value("release.rss_mb")),
    ("operator RSS, both stacks after restart and idle (MiB)", _value("idle.rss_mb")),
    ("heal p50 (ms)", _value("heal.p50_ms")),
    ("heal p99 (ms)", _value("heal.p99_ms")),
    ("heal floor p50 (ms)", _value("heal.floor_p50_ms")),
    ("heal floor p99 (ms)", _value("heal.floor_p99_ms")),
    ("heal p99 / heal floor p99", _ratio("heal p99/floor p99")),
    ("day 2: v1.2.0 -> v1.11.0 upgrade to Ready (s)", _value("upgrade.ready_s")),
    ("day 2: upgrade / (teardown + fresh deploy)", _ratio("upgrade/(teardown + fresh)")),
)


def before_after(before: Results | None, after: Results) -> list[str]:
    return ["## Before and after", "", *_before_after(before, after)]


def _before_after(before: Results | None, after: Results) -> list[str]:
    if before is None:
        return ["(no results-before.json next to the results)"]
    rows = [[label, read(before) or "n/a", read(after) or "n/a"] for label, read in _COMPARED]
    commit = "?" if before.meta.commit is None else before.meta.commit
    return [f"Before: {before.meta.date}, at commit {commit} "
            f"(`bench/results-before.json`); after: this session. Medians; each session on its own control plane.",
            "", *table(["figure", "before", "after"], rows)]
