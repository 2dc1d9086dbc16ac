"""Install modes (WATCH_NAMESPACE), shard leases and the election's namespace and identity (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfdef_operator.controller.scope import (
    ScopeError,
    election_namespace,
    instance_identity,
    lease_name,
    watched_namespaces,
)
from kfdef_operator.runtime.election import ElectionConfig, LeaseRecord, micro_time


@pytest.mark.parametrize("value, expected", [
    ("", frozenset()),                                    # AllNamespaces (OLM's targetNamespaces is empty)
    ("team-a", frozenset({"team-a"})),                    # OwnNamespace / SingleNamespace
    ("team-a,team-b", frozenset({"team-a", "team-b"})),   # MultiNamespace
    (" team-a , ,team-b ", frozenset({"team-a", "team-b"})),
])
def test_watch_namespace_maps_onto_the_namespaces_served(value: str, expected: frozenset[str]) -> None:
    assert watched_namespaces(None, {"WATCH_NAMESPACE": value}) == expected


def test_namespace_flags_win_over_watch_namespace() -> None:
    assert watched_namespaces(["kf-*"], {"WATCH_NAMESPACE": "team-a"}) == frozenset({"kf-*"})
    assert watched_namespaces(None, {}) == frozenset()


def test_watch_namespace_with_a_non_namespace_is_refused_by_name() -> None:
    with pytest.raises(ScopeError, match="Team_A"):
        watched_namespaces(None, {"WATCH_NAMESPACE": "ok,Team_A"})


def test_each_shard_has_its_own_lease_and_replicas_of_one_shard_share_it() -> None:
    assert lease_name(None, "") == "kfdef-operator-leader-election"
    assert lease_name("shard1", "kfdef.apps.kubeflow.org/shard=shard1") == "kfdef-operator-leader-election-shard1"
    selected = lease_name(None, "kfdef.apps.kubeflow.org/shard=shard1")
    assert selected == lease_name(None, "kfdef.apps.kubeflow.org/shard=shard1")
    assert selected not in (lease_name(None, "!kfdef.apps.kubeflow.org/shard"), lease_name(None, ""))
    with pytest.raises(ScopeError, match="DNS label"):
        lease_name("Shard_1", "")


def test_the_lease_lives_in_the_pods_namespace_unless_told(tmp_path: Path) -> None:
    account = tmp_path / "namespace"
    account.write_text("from-the-pod\n")
    assert election_namespace("explicit", {"POD_NAMESPACE": "x"}, account) == "explicit"
    assert election_namespace(None, {"POD_NAMESPACE": "downward"}, account) == "downward"
    assert election_namespace(None, {}, account) == "from-the-pod"
    with pytest.raises(ScopeError, match="--leader-election-namespace"):
        election_namespace(None, {}, tmp_path / "missing")


def test_identities_of_two_processes_of_one_pod_differ() -> None:
    first, second = instance_identity({"POD_NAME": "op-1"}), instance_identity({"POD_NAME": "op-1"})
    assert first.startswith("op-1_") and second.startswith("op-1_") and first != second


def test_election_timings_must_be_ordered_as_client_go_requires() -> None:
    ElectionConfig("ns", "lease", "me")
    with pytest.raises(ValueError, match="renew deadline"):
        ElectionConfig("ns", "lease", "me", lease_duration=10, renew_deadline=10, retry_period=2)


def test_a_lease_record_reads_client_go_fields_and_micro_times() -> None:
    now = micro_time()
    record = LeaseRecord.of({"metadata": {"resourceVersion": "7"}, "spec": {
        "holderIdentity": "a_1", "leaseDurationSeconds": 15, "acquireTime": now, "renewTime": now,
        "leaseTransitions": 3}})
    assert (record.holder, record.duration_s, record.transitions, record.resource_version) == ("a_1", 15.0, 3, "7")
    assert LeaseRecord.of({"spec": {}}).holder == ""  # a released lease is free
    assert now.endswith("Z") and len(now.split(".")[1]) == 7  # microseconds, as metav1.MicroTime
