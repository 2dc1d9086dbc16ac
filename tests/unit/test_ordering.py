"""Apply stages, install ranks and teardown waves (kfdef_operator.ssa.ordering)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfdef_operator.ssa.ordering import (
    ADMISSION,
    PREREQUISITES,
    RESOURCES,
    STAGES,
    awaits_controllers,
    group_by_stage,
    install_rank,
    is_custom_group,
    stage_of,
    teardown_waves,
)

ADMISSION_KINDS = ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                   "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy",
                   "MutatingAdmissionPolicyBinding", "APIService"]
BUILTIN_RESOURCE_KINDS = ["Secret", "ConfigMap", "PersistentVolume", "PersistentVolumeClaim", "ServiceAccount",
                          "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "NetworkPolicy", "Service",
                          "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
                          "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "PodDisruptionBudget",
                          "Ingress"]
PREREQUISITE_KINDS = ["Namespace", "ResourceQuota", "LimitRange", "PodSecurityPolicy", "PriorityClass",
                      "StorageClass", "IngressClass", "RuntimeClass", "CustomResourceDefinition"]
CUSTOM_KINDS = ["Notebook", "Profile", "VirtualService", "Gateway", "PodDefault"]
ALL_KINDS = PREREQUISITE_KINDS + BUILTIN_RESOURCE_KINDS + ADMISSION_KINDS + CUSTOM_KINDS
CUSTOM_GROUP = {kind: "kubeflow.org" for kind in CUSTOM_KINDS}


def kind_of(item: tuple[str, str]) -> str:
    return item[0]


def is_custom(item: tuple[str, str]) -> bool:
    return is_custom_group(CUSTOM_GROUP.get(item[0], ""))


# --------------------------------------------------------------------------------------------------------------------
# stage_of and install_rank


@pytest.mark.parametrize("kind, stage", [
    *[(kind, PREREQUISITES) for kind in PREREQUISITE_KINDS],
    *[(kind, RESOURCES) for kind in BUILTIN_RESOURCE_KINDS],
    *[(kind, ADMISSION) for kind in ADMISSION_KINDS],
    *[(kind, RESOURCES) for kind in CUSTOM_KINDS],
])
def test_stage_of_each_kind(kind, stage):
    assert stage_of(kind) == stage


def test_stages_are_in_apply_order():
    assert STAGES == (PREREQUISITES, RESOURCES, ADMISSION)


def test_namespace_ranks_first_and_crds_last_among_prerequisites():
    ranks = [install_rank(kind) for kind in PREREQUISITE_KINDS]
    assert min(ranks) == install_rank("Namespace")
    assert max(ranks) == install_rank("CustomResourceDefinition")


@pytest.mark.parametrize("earlier, later", [
    ("Namespace", "CustomResourceDefinition"),
    ("CustomResourceDefinition", "Secret"),
    ("ConfigMap", "Deployment"),
    ("ServiceAccount", "ClusterRoleBinding"),
    ("ClusterRole", "ClusterRoleBinding"),
    ("Role", "RoleBinding"),
    ("Service", "Deployment"),
    ("Deployment", "Ingress"),
    ("Job", "CronJob"),
    ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"),
    ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"),
    ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"),
])
def test_install_rank_orders_dependencies_first(earlier, later):
    assert install_rank(earlier) < install_rank(later)


@pytest.mark.parametrize("custom", CUSTOM_KINDS)
def test_custom_resources_rank_after_every_builtin_and_before_admission(custom):
    assert all(install_rank(kind) < install_rank(custom) for kind in PREREQUISITE_KINDS + BUILTIN_RESOURCE_KINDS)
    assert all(install_rank(custom) < install_rank(kind) for kind in ADMISSION_KINDS)


def test_unknown_kinds_share_one_rank():
    assert len({install_rank(kind) for kind in CUSTOM_KINDS + ["Whatever", ""]}) == 1


def test_admission_kinds_rank_after_everything_and_apiservice_last():
    others = PREREQUISITE_KINDS + BUILTIN_RESOURCE_KINDS + CUSTOM_KINDS
    assert min(install_rank(kind) for kind in ADMISSION_KINDS) > max(install_rank(kind) for kind in others)
    assert install_rank("APIService") == max(install_rank(kind) for kind in ALL_KINDS)


def test_ranks_of_known_kinds_are_distinct():
    known = PREREQUISITE_KINDS + BUILTIN_RESOURCE_KINDS + ADMISSION_KINDS
    assert len({install_rank(kind) for kind in known}) == len(known)


# --------------------------------------------------------------------------------------------------------------------
# group_by_stage


def test_group_by_stage_splits_and_sorts():
    items = [("ValidatingWebhookConfiguration", "vwc"), ("Notebook", "nb"), ("Deployment", "web"),
             ("CustomResourceDefinition", "crd"), ("APIService", "api"), ("Namespace", "ns"),
             ("MutatingWebhookConfiguration", "mwc"), ("ServiceAccount", "sa")]

    stages = group_by_stage(items, kind_of)

    assert list(stages) == list(STAGES)
    assert [name for _, name in stages[PREREQUISITES]] == ["ns", "crd"]
    assert [name for _, name in stages[RESOURCES]] == ["sa", "web", "nb"]
    assert [name for _, name in stages[ADMISSION]] == ["mwc", "vwc", "api"]


def test_group_by_stage_keeps_input_order_for_equal_kinds():
    items = [("Deployment", "c"), ("Notebook", "z"), ("Deployment", "a"), ("Profile", "y"), ("Deployment", "b"),
             ("Notebook", "x")]

    stages = group_by_stage(items, kind_of)

    assert stages[RESOURCES] == [("Deployment", "c"), ("Deployment", "a"), ("Deployment", "b"),
                                 ("Notebook", "z"), ("Profile", "y"), ("Notebook", "x")]


def test_group_by_stage_of_nothing_has_every_stage_empty():
    assert group_by_stage([], kind_of) == {stage: [] for stage in STAGES}


@given(st.lists(st.tuples(st.sampled_from(ALL_KINDS), st.integers(0, 5))))
def test_group_by_stage_is_a_stable_partition(items):
    stages = group_by_stage(items, kind_of)

    flattened = [item for stage in STAGES for item in stages[stage]]
    assert sorted(flattened) == sorted(items)
    for stage, members in stages.items():
        assert all(stage_of(kind) == stage for kind, _ in members)
        ranks = [install_rank(kind) for kind, _ in members]
        assert ranks == sorted(ranks)
        for kind in {kind for kind, _ in members}:  # stable: same-kind items keep their relative order
            assert [i for i in members if i[0] == kind] == [i for i in items if i[0] == kind]


# --------------------------------------------------------------------------------------------------------------------
# teardown_waves


def test_teardown_waves_order():
    items = [("Namespace", "ns"), ("Deployment", "web"), ("CustomResourceDefinition", "crd"), ("Notebook", "nb"),
             ("ValidatingWebhookConfiguration", "vwc"), ("ServiceAccount", "sa"), ("APIService", "api"),
             ("Service", "svc"), ("ConfigMap", "cm"), ("Profile", "profile")]

    waves = teardown_waves(items, kind_of, is_custom=is_custom)

    assert waves == [
        [("ValidatingWebhookConfiguration", "vwc"), ("APIService", "api")],
        [("Notebook", "nb"), ("Profile", "profile")],
        # CRDs while the controllers (Deployments) that may finalize their remaining objects still run
        [("CustomResourceDefinition", "crd")],
        # Namespaces first: kube-controller-manager waits 5 s before emptying one
        [("Namespace", "ns"), ("Deployment", "web"), ("Service", "svc"), ("ServiceAccount", "sa"), ("ConfigMap", "cm")],
    ]


def test_teardown_rest_is_reverse_install_order():
    kinds = BUILTIN_RESOURCE_KINDS + ["ResourceQuota", "StorageClass", "PriorityClass"]
    (wave,) = teardown_waves([(kind, kind) for kind in kinds], kind_of, is_custom=is_custom)
    ranks = [install_rank(kind) for kind, _ in wave]
    assert ranks == sorted(ranks, reverse=True)
    assert wave[0][0] == "Ingress" and wave[-1][0] == "ResourceQuota"


def test_teardown_omits_empty_waves():
    assert teardown_waves([], kind_of, is_custom=is_custom) == []
    assert teardown_waves([("Namespace", "a"), ("Notebook", "b")], kind_of, is_custom=is_custom) == [
        [("Notebook", "b")], [("Namespace", "a")]]
    assert teardown_waves([("Namespace", "a"), ("ConfigMap", "b")], kind_of, is_custom=is_custom) == [
        [("Namespace", "a"), ("ConfigMap", "b")]]


def test_teardown_keeps_input_order_within_a_wave():
    items = [("Deployment", "b"), ("Deployment", "a"), ("Namespace", "z"), ("Namespace", "y")]
    assert teardown_waves(items, kind_of, is_custom=is_custom) == [
        [("Namespace", "z"), ("Namespace", "y"), ("Deployment", "b"), ("Deployment", "a")]]


def test_teardown_accepts_a_one_shot_iterable():
    waves = teardown_waves(iter([("Notebook", "a"), ("Service", "b")]), kind_of, is_custom=is_custom)
    assert waves == [[("Notebook", "a")], [("Service", "b")]]


def test_crds_that_need_no_controller_go_with_the_namespaces_after_them():
    items = [("Deployment", "web"), ("CustomResourceDefinition", "held"), ("Namespace", "ns"),
             ("CustomResourceDefinition", "free"), ("Notebook", "nb")]

    waves = teardown_waves(items, kind_of, is_custom=is_custom, crd_waits=lambda item: item[1] == "held")

    assert waves == [[("Notebook", "nb")], [("CustomResourceDefinition", "held")],
                     [("Namespace", "ns"), ("CustomResourceDefinition", "free"), ("Deployment", "web")]]
    assert teardown_waves(items, kind_of, is_custom=is_custom, crd_waits=lambda item: False) == [
        [("Notebook", "nb")],
        [("Namespace", "ns"), ("CustomResourceDefinition", "held"), ("CustomResourceDefinition", "free"),
         ("Deployment", "web")]]


@pytest.mark.parametrize("custom_resources, awaits", [
    ([], False),
    ([{"metadata": {"name": "a"}}, {"metadata": {"name": "b", "finalizers": []}}], False),
    ([{"metadata": {"name": "a"}}, {"metadata": {"name": "b", "finalizers": ["example.com/cleanup"]}}], True),
    ([{"metadata": {"name": "a", "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["x.io/y"]}}], True),
    # kube's own: removed by the garbage collector, but a dependent it waits for may need a controller
    ([{"metadata": {"name": "a", "finalizers": ["foregroundDeletion"]}}], True),
    ([{}], False),
])
def test_a_crd_awaits_controllers_while_a_custom_resource_of_it_holds_a_finalizer(custom_resources, awaits):
    assert awaits_controllers(custom_resources) is awaits
    assert awaits_controllers(iter(custom_resources)) is awaits


@given(st.lists(st.tuples(st.sampled_from(ALL_KINDS), st.integers(0, 5))))
def test_teardown_waves_partition_every_item_in_wave_order(items):
    waves = teardown_waves(items, kind_of, is_custom=is_custom)

    assert sorted(item for wave in waves for item in wave) == sorted(items)
    assert all(waves)

    def category(item) -> int:
        if item[0] in ADMISSION_KINDS:
            return 0
        if item[0] == "CustomResourceDefinition":
            return 2
        return 1 if is_custom(item) else 3  # the rest and Namespaces: one wave

    for wave in waves:
        assert len({category(item) for item in wave}) == 1
    assert [category(wave[0]) for wave in waves] == sorted(category(wave[0]) for wave in waves)


# --------------------------------------------------------------------------------------------------------------------
# is_custom_group


@pytest.mark.parametrize("group", [
    "", "apps", "batch", "policy", "autoscaling", "extensions", "networking.k8s.io", "rbac.authorization.k8s.io",
    "storage.k8s.io", "admissionregistration.k8s.io", "apiextensions.k8s.io", "apiregistration.k8s.io",
    "scheduling.k8s.io", "coordination.k8s.io", "node.k8s.io", "discovery.k8s.io", "events.k8s.io",
    "flowcontrol.apiserver.k8s.io", "certificates.k8s.io", "resource.k8s.io",
])
def test_builtin_groups_are_not_custom(group):
    assert not is_custom_group(group)


@pytest.mark.parametrize("group", [
    "kubeflow.org", "app.k8s.io", "networking.istio.io", "kfdef.apps.kubeflow.org", "metrics.k8s.io",
    "apps.kubeflow.org", "serving.knative.dev", "cert-manager.io",
])
def test_other_groups_are_custom(group):
    assert is_custom_group(group)
