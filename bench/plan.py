"""How much of everything a benchmark session runs: the full and the quick plan, and the parts it may skip."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """How much of everything to run."""

    rounds: int
    scale: float
    # Deployment heals: 100 makes p99 the second slowest (nearest rank), not the slowest; the operator's fight
    # backoff allows it, as no Deployment of the full workload's 40 is healed more than 3 times.
    heal_trials: int
    cascade_trials: int         # namespace and CRD heals
    idle_window_s: float
    idle_settle_s: float
    many_kfdefs: int
    many_rounds: int
    sweep: tuple[float, ...]    # extra workload sizes (the default size comes from the apply rounds)
    profile: bool
    quick: bool
    release_rounds: int         # rounds of the real release (bench/release.py), each path once per round
    upgrade_rounds: int         # rounds of the day-2 upgrade (bench/upgrade.py), both paths once per round
    skip: frozenset[str] = frozenset()  # parts not run (SKIPPABLE); their figures are carried over from --out


#: Parts a session may leave out (``--skip``): their entries are taken from the previous results file.
SKIPPABLE = {"many": ("scale.kfdefs_s",), "ha": ("ha.", "shards."), "profile": ("profile",), "upgrade": ("upgrade.",)}
FULL = Plan(rounds=3, scale=1.0, heal_trials=100, cascade_trials=3, idle_window_s=300, idle_settle_s=10,
            many_kfdefs=20, many_rounds=3, sweep=(1.0, 5.0, 10.0), profile=True, quick=False, release_rounds=3,
            upgrade_rounds=3)
QUICK = Plan(rounds=2, scale=0.25, heal_trials=10, cascade_trials=1, idle_window_s=15, idle_settle_s=3,
             many_kfdefs=5, many_rounds=1, sweep=(1.0, 2.0), profile=True, quick=True, release_rounds=1,
             upgrade_rounds=1)
