"""Replicas and shards: only the leader writes, a killed leader's work is finished once, a handover loses nothing.

Every replica is an operator process under its own token user on a control plane of this module's own (no other
operator runs there), with kube-apiserver's audit log on: the assertions read the server's record of who wrote
what, when (``tests/reliability/replicas.py``). "Written twice" means an object created (HTTP 201) more than once,
or rewritten by a second replica; "two writers" means a replica wrote after another one had begun to.
"""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from kfdef_operator.api.names import SHARD_LABEL
from tests.cluster.conftest import KFDEF_API
from tests.cluster.test_reconciler import stack_objects
from tests.kube import Kube, wait_for
from tests.reliability.replicas import (  # noqa: F401 (kube, plane and replicas are fixtures)
    LEASE_DURATION_S,
    Replicas,
    holder,
    kube,
    landed,
    plane,
    plural,
    replicas,
    stack_writes,
    wait_leader,
    writers_in_turn,
    writes,
)
from tests.reliability.support import LogWindow, expected_ids, kfdef, median, wait_converged

pytestmark = pytest.mark.cluster

SEED = int(os.environ.get("KFDEF_RELIABILITY_SEED", "90210"))
KILLS = 3
PREPARED = "prepared as a standby"


def prepared(process, timeout: float = 60) -> None:
    """Wait until the standby has prepared a KfDef (its desired state built, its kinds watched)."""
    wait_for(lambda: PREPARED in process.log_path.read_text(errors="replace"), timeout=timeout,
             what=f"{process.user} to prepare as a standby")


def leader_and_standby(replicas: Replicas, kube: Kube):
    leader = replicas.start()
    wait_leader(kube, leader.user)
    return leader, replicas.start()


def promoted(replicas: Replicas, kube: Kube, standby):
    """After a kill: the standby holds the lease, then a new standby starts and prepares.

    The lease of a leader killed after its work was done stays until it expires; a new replica started before then
    could win it, and the test would kill the wrong one next.
    """
    wait_leader(kube, standby.user, timeout=LEASE_DURATION_S + 30)
    new_standby = replicas.start()
    prepared(new_standby)
    return standby, new_standby


def restored(kube: Kube, ident) -> bool:
    api_version, kind, name, namespace = ident
    live = kube.get(api_version, kind, name, namespace)
    return live is not None and not live["metadata"].get("deletionTimestamp")


def settled(kube: Kube, name: str, namespace: str, stack) -> None:
    """The healed Deployment Available and the KfDef's status saying so: no status refresh is left to write."""
    kube.wait_condition("apps/v1", "Deployment", "operator", "Available", namespace=stack.namespace, timeout=60)

    def all_ready() -> bool:
        status = (kfdef(kube, name, namespace) or {}).get("status") or {}
        summary = status.get("summary") or {}
        return summary.get("ready") == summary.get("total") and any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
    wait_for(all_ready, timeout=60, what=f"KfDef {namespace}/{name} ready again")


def object_writes(found, ident, killed: str) -> list:
    """The writes to the object ``ident`` that took effect (``replicas.landed``)."""
    _, kind, name, namespace = ident
    return landed([w for w in found if w.of_object(plural(kind), namespace, name)], killed)


def created(found, ident, killed: str = "") -> int:
    """How many times the object was created: HTTP 201, or a create of the ``killed`` replica that took effect
    unanswered."""
    return sum(w.created or w.verb == "create" and w.unanswered(killed) for w in object_writes(found, ident, killed))


def test_only_the_leader_writes_and_the_standby_writes_nothing(plane, kube, replicas, kfdef_namespace, new_stack,
                                                               reliability):
    """Two replicas: the leader applies, heals and corrects drift; the standby writes nothing"""
    leader, standby = leader_and_standby(replicas, kube)
    stack = new_stack()
    idents = stack_objects(stack)
    since = time.time()
    kube.apply(stack.kfdef("ha", kfdef_namespace))
    wait_converged(kube, "ha", kfdef_namespace, expected_ids(idents))
    prepared(standby)

    deleted = time.time()
    kube.delete("apps/v1", "Deployment", "operator", stack.namespace)
    wait_for(lambda: kube.exists("apps/v1", "Deployment", "operator", stack.namespace), what="the heal")
    drifted = time.time()
    kube.resource("v1", "ConfigMap").patch(name="app-parameters", namespace=stack.namespace,
                                            body={"data": {"mode": "changed"}},
                                            content_type="application/merge-patch+json")
    wait_for(lambda: (kube.get("v1", "ConfigMap", "app-parameters", stack.namespace) or {})
             .get("data", {}).get("mode") == "default", what="the drift corrected")
    wait_converged(kube, "ha", kfdef_namespace, expected_ids(idents))

    found = stack_writes(writes(plane, [leader.user, standby.user], since=since), idents, "ha", kfdef_namespace)
    by_standby = [w for w in found if w.user == standby.user]
    heals = [w for w in found if w.at >= deleted and w.of_object("deployments", stack.namespace, "operator")]
    corrections = [w for w in found if w.at >= drifted and w.of_object("configmaps", stack.namespace, "app-parameters")]
    reliability.figure("leader writes", sum(w.user == leader.user for w in found))
    reliability.figure("standby writes", len(by_standby))
    assert not by_standby, f"the standby wrote: {by_standby}"
    # A heal is one create (and the fix-up of its field ownership, ssa.restore.Restorer.create).
    assert [w.code for w in heals if w.created] == [201] and {w.user for w in heals} == {leader.user}, heals
    assert [w.code for w in corrections] == [200], f"the drifted ConfigMap was written {corrections}"


def test_leader_killed_mid_apply_the_standby_finishes_it_writing_nothing_twice(plane, kube, replicas, kfdef_namespace,
                                                                                new_stack, reliability):
    """SIGKILL the leader during an apply: the standby finishes it, each object written once, never two writers"""
    rng = random.Random(SEED + 10)
    leader, standby = leader_and_standby(replicas, kube)
    mid_apply, failovers = 0, []
    for run in range(KILLS):
        stack, name = new_stack(), f"apply-{run}"
        idents = stack_objects(stack)
        since = time.time()
        kube.apply(stack.kfdef(name, kfdef_namespace))
        # Polled every 10 ms: with the usual growing pause the namespace was seen up to 0.5 s late, after the whole
        # apply (a CI run killed after the final status 3 times of 3 once renders got faster).
        wait_for(lambda stack=stack: kube.exists("v1", "Namespace", stack.namespace), what="the apply to begin",
                 max_delay=0.01)
        time.sleep(rng.uniform(0.0, 0.05))  # the kill point (the apply takes a few hundred ms), not a synchronisation
        leader.kill()
        killed = time.time()
        mid_apply += "summary" not in ((kfdef(kube, name, kfdef_namespace) or {}).get("status") or {})
        wait_converged(kube, name, kfdef_namespace, expected_ids(idents), timeout=120)
        failovers.append(time.time() - killed)

        found = stack_writes(writes(plane, [leader.user, standby.user], since=since), idents, name, kfdef_namespace)
        assert writers_in_turn(found) in ([leader.user], [leader.user, standby.user]), (
            f"writers in turn: {writers_in_turn(found)}")
        assert max(w.at for w in found if w.user == leader.user) <= killed + 0.5
        for ident in idents:
            wrote = object_writes(found, ident, leader.user)
            assert len(wrote) == 1, f"{ident} written {len(wrote)} times: {wrote}"
        leader, standby = promoted(replicas, kube, standby)
    reliability.runs = KILLS
    reliability.figure("kills before the apply's final status", mid_apply)
    reliability.figure("median s from the kill to converged", median(failovers))
    assert mid_apply >= 1


def test_leader_killed_during_a_heal_the_object_is_healed_once(plane, kube, replicas, kfdef_namespace, new_stack,
                                                               reliability):
    """SIGKILL the leader while it heals a deleted Deployment or Namespace: healed once, by one replica at a time"""
    rng = random.Random(SEED + 11)
    leader, standby = leader_and_standby(replicas, kube)
    stack = new_stack()
    idents = stack_objects(stack)
    kube.apply(stack.kfdef("heal", kfdef_namespace))
    wait_converged(kube, "heal", kfdef_namespace, expected_ids(idents))
    prepared(standby)
    healed_by: list[str] = []
    cases = [("apps/v1", "Deployment", "operator", stack.namespace)] * KILLS + [("v1", "Namespace", stack.namespace,
                                                                                   None)]
    for api_version, kind, name, where in cases:
        since = time.time()
        kube.delete(api_version, kind, name, where)
        # A Deployment's heal takes milliseconds: kill within them. A Namespace's waits for the namespace
        # controller to empty it: kill while the children's heals wait for their parent.
        time.sleep(rng.uniform(0.0, 0.02) if kind == "Deployment" else rng.uniform(0.3, 1.0))
        leader.kill()
        killed = time.time()
        gone = [i for i in idents if i[3] == stack.namespace or i[2] == stack.namespace] if kind == "Namespace" else \
            [i for i in idents if i[1] == kind and i[2] == name]
        wait_for(lambda gone=gone: all(restored(kube, ident) for ident in gone), timeout=120, what=f"{gone} healed")
        wait_converged(kube, "heal", kfdef_namespace, expected_ids(idents), timeout=120)

        found = stack_writes(writes(plane, [leader.user, standby.user], since=since), idents, "heal", kfdef_namespace)
        assert writers_in_turn(found) in ([leader.user], [standby.user], [leader.user, standby.user]), (
            f"writers in turn: {writers_in_turn(found)}")
        assert all(w.at <= killed + 0.5 for w in found if w.user == leader.user)
        for ident in gone:
            assert created(found, ident, leader.user) == 1, f"{ident} created {created(found, ident, leader.user)} " \
                                                             f"times after the delete: {found}"
        healed_by.append("leader" if all(w.user == leader.user for w in found
                                         if w.succeeded or w.unanswered(leader.user)) else "standby")
        leader, standby = promoted(replicas, kube, standby)
    reliability.runs = len(cases)
    reliability.figure("healed by", {who: healed_by.count(who) for who in sorted(set(healed_by))})


def test_rolling_update_hands_over_at_once_and_loses_no_heal(plane, kube, replicas, kfdef_namespace, new_stack,
                                                              reliability):
    """Rolling update: a new replica starts, the leader gets SIGTERM as an object is deleted; it is healed once"""
    leader, standby = leader_and_standby(replicas, kube)
    stack = new_stack()
    idents = stack_objects(stack)
    kube.apply(stack.kfdef("roll", kfdef_namespace))
    wait_converged(kube, "roll", kfdef_namespace, expected_ids(idents))
    surge = replicas.start()  # maxSurge 1: the new pod is up before an old one stops
    prepared(standby)
    prepared(surge)

    since = time.time()
    leader.popen.send_signal(signal.SIGTERM)
    kube.delete("apps/v1", "Deployment", "operator", stack.namespace)
    wait_for(lambda: holder(kube) in (standby.user, surge.user), timeout=LEASE_DURATION_S,
             what="a successor to take the lease")
    wait_for(lambda: kube.exists("apps/v1", "Deployment", "operator", stack.namespace), what="the heal")
    assert leader.popen.wait(30) == 0, leader.log_tail()
    wait_converged(kube, "roll", kfdef_namespace, expected_ids(idents))

    successors = (standby.user, surge.user)
    taken = [w.at for w in writes(plane, successors, since=since, leases=True) if w.succeeded]
    handover = min(taken) - since
    found = stack_writes(writes(plane, [leader.user, *successors], since=since), idents, "roll", kfdef_namespace)
    turn = writers_in_turn(found)
    reliability.figure("s from SIGTERM to the successor's lease", round(handover, 2))
    assert turn in ([leader.user], [holder(kube)], [leader.user, holder(kube)]), f"writers in turn: {turn}"
    assert created(found, ("apps/v1", "Deployment", "operator", stack.namespace)) == 1
    assert handover < 2.0, f"the handover took {handover:.2f}s"


def test_each_kfdef_is_served_by_exactly_one_shard(plane, kube, replicas, kfdef_namespace, new_stack, reliability):
    """Two shards by label selector: each KfDef applied and healed by its shard only, also after it moves"""
    default = replicas.start("--watch-label-selector", f"!{SHARD_LABEL}", "--shard", "default")
    shard1 = replicas.start("--watch-label-selector", f"{SHARD_LABEL}=shard1", "--shard", "shard1")
    wait_leader(kube, default.user, lease="kfdef-operator-leader-election-default")
    wait_leader(kube, shard1.user, lease="kfdef-operator-leader-election-shard1")
    other = f"{kfdef_namespace}-s1"
    kube.create_namespace(other)
    try:
        x, y = new_stack(), new_stack()
        since = time.time()
        kube.apply(x.kfdef("x", kfdef_namespace))
        labelled = y.kfdef("y", other)
        labelled["metadata"]["labels"] = {SHARD_LABEL: "shard1"}
        kube.apply(labelled)
        wait_converged(kube, "x", kfdef_namespace, expected_ids(stack_objects(x)))
        wait_converged(kube, "y", other, expected_ids(stack_objects(y)))
        for stack in (x, y):  # object events reach both shards' watches; only the owner heals
            kube.delete("apps/v1", "Deployment", "operator", stack.namespace)
            wait_for(lambda stack=stack: kube.exists("apps/v1", "Deployment", "operator", stack.namespace),
                     what="the heal")
        found = writes(plane, [default.user, shard1.user], since=since)
        x_writers = {w.user for w in stack_writes(found, stack_objects(x), "x", kfdef_namespace)}
        y_writers = {w.user for w in stack_writes(found, stack_objects(y), "y", other)}
        assert (x_writers, y_writers) == ({default.user}, {shard1.user})

        # y moves to the default shard. The old shard stops the moment its watch says y is gone (a write it
        # had under way in that instant may still land); from then on only the new shard writes for y.
        settled(kube, "y", other, y)
        moved = time.time()
        released = LogWindow(shard1.log_path)
        kube.resource(KFDEF_API, "KfDef").patch(name="y", namespace=other, body={"metadata": {"labels": None}},
                                                content_type="application/merge-patch+json")
        wait_for(lambda: f"KfDef {other}/y is no longer served here" in released.text(), what="shard1 to let go of y")
        let_go = time.time()
        kube.delete("apps/v1", "Deployment", "operator", y.namespace)
        wait_for(lambda: kube.exists("apps/v1", "Deployment", "operator", y.namespace), what="the heal after the move")
        wait_converged(kube, "y", other, expected_ids(stack_objects(y)))
        after = stack_writes(writes(plane, [default.user, shard1.user], since=moved), stack_objects(y), "y", other)
        reliability.figure("s for shard1 to let go of y", round(let_go - moved, 3))
        reliability.figure("shard1 writes for y in that time", sum(w.user == shard1.user for w in after))
        assert {w.user for w in after if w.at >= let_go} == {default.user}
    finally:
        for item in kube.resource(KFDEF_API, "KfDef").get(namespace=other).items:
            kube.delete(KFDEF_API, "KfDef", item.metadata.name, other)
        kube.delete_namespace(other)

