"""The operator is SIGKILLed at random points of apply, prune and teardown, and restarted: it converges.

A kill point is a seeded random delay after the trigger (create, edit, delete). Right after the kill the cluster is
a frozen picture of how far the operator got, so each kill is classified by what it interrupted; every scenario
keeps going until at least ``MIN_KILLS`` kills landed inside the phase it is about.

Convergence means: Ready for the current generation, an inventory of exactly the rendered objects without
duplicate entries, exactly those objects carrying the KfDef's label cluster-wide; after teardown, nothing carrying
the label anywhere and the KfDef gone (its finalizer released).
"""

from __future__ import annotations

import collections
import os
import random
import time

import pytest

from kfdef_operator.runtime.inventory import read as read_inventory
from tests.cluster.test_reconciler import stack_objects
from tests.kube import wait_for
from tests.reliability.support import (
    condition,
    delete_kfdefs,
    expected_ids,
    instance_label,
    is_converged,
    kfdef,
    labelled_objects,
    median,
    stack_kinds,
    wait_converged,
)

pytestmark = pytest.mark.cluster

SEED = int(os.environ.get("KFDEF_RELIABILITY_SEED", "90210"))
MIN_KILLS = 10
MAX_ITERATIONS = 24


def _restart(operator) -> float:
    """Start the killed operator; returns the monotonic time it was started at."""
    started = time.monotonic()
    operator.start()
    return started


def _assert_exactly_labelled(kube, stack, name: str, namespace: str, ids: set[str], timeout: float = 60) -> None:
    label = instance_label(name, namespace)
    found: list[str] = []

    def check() -> bool:
        found[:] = labelled_objects(kube, stack_kinds(stack), label)
        return found == sorted(ids)
    try:
        wait_for(check, timeout=timeout, what="labelled objects to match")
    except AssertionError:
        raise AssertionError(f"objects labelled {label}: {found}, expected {sorted(ids)}") from None


def test_sigkill_during_apply_converges_without_duplicates(operator, kube, kfdef_namespace, new_stack, reliability):
    """SIGKILL during the first apply of a stack, then restart"""
    rng = random.Random(SEED)
    phases: collections.Counter[str] = collections.Counter()
    convergence, stacks = [], []
    iteration, window = 0, 1.2
    while phases["mid-apply"] < MIN_KILLS and iteration < MAX_ITERATIONS:
        iteration += 1
        stack, name = new_stack(), f"apply-{iteration}"
        ids = expected_ids(stack_objects(stack))
        kube.apply(stack.kfdef(name, kfdef_namespace))
        time.sleep(rng.uniform(0.0, window))  # the kill point, not a synchronisation
        operator.kill()
        obj = kfdef(kube, name, kfdef_namespace)
        status = obj.get("status") or {}
        started = (status.get("observedGeneration") == obj["metadata"]["generation"]
                   or kube.exists("v1", "Namespace", stack.namespace))
        # The summary is written with the apply's final verdict.
        phase = ("ready" if is_converged(obj, ids) else "applied, not ready" if "summary" in status
                 else "mid-apply" if started else "before start")
        phases[phase] += 1
        # Aim the next kill earlier when this one came after the apply (the faster the apply, the more often),
        # later when it came before it started.
        window *= {"ready": 0.8, "applied, not ready": 0.8, "before start": 1.25}.get(phase, 1.0)
        start = _restart(operator)
        wait_converged(kube, name, kfdef_namespace, ids)
        convergence.append(time.monotonic() - start)
        _assert_exactly_labelled(kube, stack, name, kfdef_namespace, ids)
        stacks.append((name, stack))
        kube.delete("kfdef.apps.kubeflow.org/v1", "KfDef", name, kfdef_namespace)  # torn down meanwhile

    reliability.runs = iteration
    reliability.figure("kills mid-apply", phases["mid-apply"])
    reliability.figure("other kill points", dict(sorted((k, v) for k, v in phases.items() if k != "mid-apply")))
    reliability.figure("median s from restart to Ready", median(convergence))
    assert phases["mid-apply"] >= MIN_KILLS, f"only {phases['mid-apply']} kills landed mid-apply: {dict(phases)}"
    delete_kfdefs(kube, kfdef_namespace, [name for name, _ in stacks])
    for name, stack in stacks:
        _assert_exactly_labelled(kube, stack, name, kfdef_namespace, set())


def test_sigkill_during_prune_converges_without_orphans(operator, kube, kfdef_namespace, new_stack, reliability):
    """SIGKILL while an edit that removes an application is pruned, then restart"""
    rng = random.Random(SEED + 1)
    stack, name = new_stack(), "prune"
    objects = stack_objects(stack)
    full, reduced = expected_ids(objects), expected_ids(objects[:2])  # Namespace and CRD stay
    kube.apply(stack.kfdef(name, kfdef_namespace))
    wait_converged(kube, name, kfdef_namespace, full)
    # Calibration: an undisturbed prune, to draw kill points from the span it takes.
    started = time.monotonic()
    kube.apply(stack.kfdef(name, kfdef_namespace, applications=stack.applications[:2]))
    wait_converged(kube, name, kfdef_namespace, reduced)
    span = time.monotonic() - started
    kube.apply(stack.kfdef(name, kfdef_namespace))
    wait_converged(kube, name, kfdef_namespace, full)
    phases: collections.Counter[str] = collections.Counter()
    convergence = []
    iteration = 0
    while phases["mid-prune"] < MIN_KILLS and iteration < MAX_ITERATIONS:
        iteration += 1
        generation = kube.apply(stack.kfdef(name, kfdef_namespace, applications=stack.applications[:2]))[
            "metadata"]["generation"]
        time.sleep(rng.uniform(0.0, span))
        operator.kill()
        obj = kfdef(kube, name, kfdef_namespace)
        status = obj.get("status") or {}
        entries = {held.ref.id for held in read_inventory(status)}
        phases["pruned" if entries == reduced else "mid-prune" if status.get("observedGeneration") == generation
               else "before start"] += 1
        start = _restart(operator)
        wait_converged(kube, name, kfdef_namespace, reduced)
        convergence.append(time.monotonic() - start)
        _assert_exactly_labelled(kube, stack, name, kfdef_namespace, reduced)
        kube.apply(stack.kfdef(name, kfdef_namespace))  # the application back, for the next round
        wait_converged(kube, name, kfdef_namespace, full)
        _assert_exactly_labelled(kube, stack, name, kfdef_namespace, full)

    reliability.runs = iteration
    reliability.figure("kills mid-prune", phases["mid-prune"])
    reliability.figure("other kill points", dict(sorted((k, v) for k, v in phases.items() if k != "mid-prune")))
    reliability.figure("undisturbed prune s", round(span, 2))
    reliability.figure("median s from restart to pruned and Ready", median(convergence))
    assert phases["mid-prune"] >= MIN_KILLS, f"only {phases['mid-prune']} kills landed mid-prune: {dict(phases)}"


def test_sigkill_during_teardown_releases_the_finalizer_and_leaves_nothing(operator, kube, kfdef_namespace, new_stack,
                                                                           reliability):
    """SIGKILL while a KfDef is deleted, then restart"""
    rng = random.Random(SEED + 2)
    stacks = {f"teardown-{i}": new_stack() for i in range(MIN_KILLS + 4)}
    for name, stack in stacks.items():
        kube.apply(stack.kfdef(name, kfdef_namespace))
    for name, stack in stacks.items():
        wait_converged(kube, name, kfdef_namespace, expected_ids(stack_objects(stack)), timeout=180)
    phases: collections.Counter[str] = collections.Counter()
    for name in stacks:
        kube.delete("kfdef.apps.kubeflow.org/v1", "KfDef", name, kfdef_namespace)
        if phases["mid-teardown"] >= MIN_KILLS:
            continue  # enough kills: the rest is torn down undisturbed
        time.sleep(rng.uniform(0.3, 1.5))
        operator.kill()
        obj = kfdef(kube, name, kfdef_namespace)
        phases["gone" if obj is None else "mid-teardown" if condition(obj, "Ready").get("reason") == "Terminating"
               else "before start"] += 1
        _restart(operator)
    started = time.monotonic()
    for name in stacks:
        kube.wait_gone("kfdef.apps.kubeflow.org/v1", "KfDef", name, kfdef_namespace, timeout=120)
    all_gone = time.monotonic() - started
    for name, stack in stacks.items():
        _assert_exactly_labelled(kube, stack, name, kfdef_namespace, set())
        kube.wait_gone("v1", "Namespace", stack.namespace, timeout=60)

    reliability.runs = sum(phases.values())
    reliability.figure("kills mid-teardown", phases["mid-teardown"])
    reliability.figure("other kill points", dict(sorted((k, v) for k, v in phases.items() if k != "mid-teardown")))
    reliability.figure("s from the last restart until every KfDef was gone", round(all_gone, 1))
    assert phases["mid-teardown"] >= MIN_KILLS, \
        f"only {phases['mid-teardown']} kills landed mid-teardown: {dict(phases)}"


def test_kfdef_deleted_while_the_operator_is_down_after_a_partial_apply_leaves_no_orphans(
        operator, kube, kfdef_namespace, new_stack, reliability):
    """SIGKILL mid-apply, the KfDef deleted while the operator is down, then restart"""
    rng = random.Random(SEED + 3)
    runs, partial, window = 0, 0, 0.3
    while partial < 3 and runs < 12:
        runs += 1
        stack, name = new_stack(), f"down-{runs}"
        kube.apply(stack.kfdef(name, kfdef_namespace))
        # Wait until the apply has begun (its Namespace exists), then kill somewhere inside it.
        wait_for(lambda: kube.exists("v1", "Namespace", stack.namespace), timeout=60, what="apply started")
        time.sleep(rng.uniform(0.0, window))
        operator.kill()
        obj = kfdef(kube, name, kfdef_namespace)
        killed_mid_apply = "summary" not in (obj.get("status") or {})  # before the apply's final verdict
        partial += killed_mid_apply
        if not killed_mid_apply:
            window /= 2  # the apply was quicker than the kill: aim earlier
        kube.delete("kfdef.apps.kubeflow.org/v1", "KfDef", name, kfdef_namespace)
        operator.start()
        kube.wait_gone("kfdef.apps.kubeflow.org/v1", "KfDef", name, kfdef_namespace, timeout=120)
        _assert_exactly_labelled(kube, stack, name, kfdef_namespace, set())
    reliability.runs = runs
    reliability.figure("kills before the apply finished", partial)
    assert partial >= 3
