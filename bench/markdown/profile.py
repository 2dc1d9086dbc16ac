"""The profile of the apply path: one first apply and one no-op reconcile in-process (``bench/profile_apply.py``),
step by step."""

from __future__ import annotations

from ..results import ProfileRun, Results
from ..tables import fmt, table


def profile(results: Results) -> list[str]:
    return ["## Profile of the apply path", "", *_profile(results)]


def _verbs(run: ProfileRun) -> str:
    return ", ".join(f"{n} {verb}" for verb, n in sorted(run.requests_by_verb.items()))


def _profile(results: Results) -> list[str]:
    profile = results.profile
    if profile is None:
        return ["(not run)"]
    apply, noop = profile.apply, profile.noop
    rows = []
    for label, a in apply.steps_s.items():
        n = noop.steps_s[label]
        rows.append([label.replace(" ", "&nbsp;", 2) if label.startswith(" ") else label,
                     fmt(a), f"{a / apply.reconcile_wall_s * 100:.0f} %",
                     fmt(n), f"{n / noop.reconcile_wall_s * 100:.0f} %"])
    return [f"`Reconciler` in-process on {profile.objects} objects (`bench/profile_apply.py`): the first "
            f"apply took {fmt(apply.reconcile_wall_s)} s wall ({_verbs(apply)}; stages "
            f"{', '.join(fmt(s) for s in apply.stage_s)} s), the no-op reconcile of a freshly started operator "
            f"{fmt(noop.reconcile_wall_s)} s ({_verbs(noop)}). Steps overlap with nothing unless said; the apply "
            f"stages include the live-metadata lists. pyinstrument trees: `bench/{apply.pyinstrument_text}`, "
            f"`bench/{noop.pyinstrument_text}`.", "",
            *table(["step", "apply s", "share", "no-op s", "share"], rows)]
