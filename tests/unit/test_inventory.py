"""Object identities, their inventory entries and the prune set (kfdef_operator.ssa.inventory)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kfdef_operator.ssa.inventory import (
    ObjectRef,
    entry_of,
    parse_entry,
    parse_id,
    ref_of,
    split_api_version,
    stale,
    version_of,
)


def obj(api_version: str, kind: str, name: str, namespace: str | None = None) -> dict:
    meta = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


@pytest.mark.parametrize("api_version, expected", [
    ("apps/v1", ("apps", "v1")),
    ("v1", ("", "v1")),
    ("rbac.authorization.k8s.io/v1", ("rbac.authorization.k8s.io", "v1")),
    ("", ("", "")),
])
def test_split_api_version(api_version, expected):
    assert split_api_version(api_version) == expected


@pytest.mark.parametrize("source, ref, entry_id", [
    (obj("apps/v1", "Deployment", "web", "kubeflow"), ObjectRef("apps", "Deployment", "kubeflow", "web"),
     "kubeflow_web_apps_Deployment"),
    (obj("v1", "ConfigMap", "settings", "kubeflow"), ObjectRef("", "ConfigMap", "kubeflow", "settings"),
     "kubeflow_settings__ConfigMap"),
    (obj("v1", "Namespace", "kubeflow"), ObjectRef("", "Namespace", "", "kubeflow"), "_kubeflow__Namespace"),
    (obj("rbac.authorization.k8s.io/v1", "ClusterRole", "system:aggregate-to-admin"),
     ObjectRef("rbac.authorization.k8s.io", "ClusterRole", "", "system:aggregate-to-admin"),
     "_system:aggregate-to-admin_rbac.authorization.k8s.io_ClusterRole"),
    (obj("rbac.authorization.k8s.io/v1", "RoleBinding", "my_binding_v2", "team_a"),
     ObjectRef("rbac.authorization.k8s.io", "RoleBinding", "team_a", "my_binding_v2"),
     "team_a_my_binding_v2_rbac.authorization.k8s.io_RoleBinding"),
    (obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "notebooks.kubeflow.org"),
     ObjectRef("apiextensions.k8s.io", "CustomResourceDefinition", "", "notebooks.kubeflow.org"),
     "_notebooks.kubeflow.org_apiextensions.k8s.io_CustomResourceDefinition"),
])
def test_ref_and_id_of_objects(source, ref, entry_id):
    assert ref_of(source) == ref
    assert ref.id == entry_id


@pytest.mark.parametrize("ref", [
    ObjectRef("apps", "Deployment", "kubeflow", "web"),
    ObjectRef("", "Namespace", "", "kubeflow"),
    ObjectRef("", "ConfigMap", "kubeflow", "a_b__c"),
    ObjectRef("rbac.authorization.k8s.io", "ClusterRole", "", "system:aggregate-to-admin"),
    ObjectRef("rbac.authorization.k8s.io", "ClusterRoleBinding", "", "system:_odd__name_"),
])
def test_parse_id_inverts_id(ref):
    assert parse_id(ref.id) == ref


def test_namespace_in_metadata_as_empty_string_or_none_is_cluster_scoped():
    for namespace in ("", None):
        source = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "namespace": namespace}}
        assert ref_of(source).namespace == ""


def test_str_is_readable():
    assert str(ObjectRef("apps", "Deployment", "kubeflow", "web")) == "Deployment.apps kubeflow/web"
    assert str(ObjectRef("", "Namespace", "", "kubeflow")) == "Namespace kubeflow"


@pytest.mark.parametrize("entry_id", ["", "a", "a_b", "a_b_c"])
def test_parse_id_refuses_too_few_parts(entry_id):
    with pytest.raises(ValueError, match="malformed"):
        parse_id(entry_id)


def test_entry_adds_the_version_to_the_id():
    objects = [obj("apps/v1", "Deployment", "web", "kubeflow"), obj("v1", "Namespace", "kubeflow"),
               obj("kubeflow.org/v1beta1", "Notebook", "nb", "user")]
    assert [entry_of(ref_of(o), version_of(o)) for o in objects] == [
        "kubeflow_web_apps_Deployment_v1", "_kubeflow__Namespace_v1", "user_nb_kubeflow.org_Notebook_v1beta1"]


@pytest.mark.parametrize("ref", [
    ObjectRef("apps", "Deployment", "kubeflow", "web"),
    ObjectRef("", "Namespace", "", "kubeflow"),
    ObjectRef("rbac.authorization.k8s.io", "ClusterRoleBinding", "", "system:_odd__name_"),
])
def test_parse_entry_inverts_entry_of(ref):
    assert parse_entry(entry_of(ref, "v1beta1")) == (ref, "v1beta1")


@pytest.mark.parametrize("entry", ["", "kubeflow_web_apps_Deployment_", "kubeflow_web_apps_Deployment", "a_b_c_d"])
def test_parse_entry_refuses_malformed_entries(entry):
    with pytest.raises(ValueError, match="malformed"):
        parse_entry(entry)


def test_stale_is_previous_minus_current():
    web = ObjectRef("apps", "Deployment", "kubeflow", "web")
    old = ObjectRef("", "ConfigMap", "kubeflow", "old")
    crd = ObjectRef("apiextensions.k8s.io", "CustomResourceDefinition", "", "notebooks.kubeflow.org")
    new = ObjectRef("", "Service", "kubeflow", "new")
    previous = {web: "v1", old: "v1", crd: "v1beta1"}

    assert stale(previous, [web, new]) == {old: "v1", crd: "v1beta1"}
    assert stale(previous, iter([web, old, crd])) == {}
    assert stale(previous, []) == previous
    assert stale({}, [web]) == {}


def test_stale_compares_whole_identity_not_just_name():
    previous = {ObjectRef("apps", "Deployment", "a", "web"): "v1"}
    assert stale(previous, [ObjectRef("apps", "Deployment", "b", "web"),
                            ObjectRef("extensions", "Deployment", "a", "web")]) == previous


_DNS_SUBDOMAIN = st.from_regex(r"\A[a-z0-9]([a-z0-9.-]{0,30}[a-z0-9])?\Z")
_NAME = st.from_regex(r"\A[a-z0-9:_.-]{1,40}\Z")  # object names may hold ':' (RBAC) and '_'
_GROUP = st.one_of(st.just(""), _DNS_SUBDOMAIN)
_KIND = st.from_regex(r"\A[A-Z][A-Za-z0-9]{0,20}\Z")
_NAMESPACE = st.one_of(st.just(""), st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?\Z"))


@given(group=_GROUP, kind=_KIND, namespace=_NAMESPACE, name=_NAME)
def test_any_ref_round_trips_through_its_id(group, kind, namespace, name):
    ref = ObjectRef(group, kind, namespace, name)
    assert parse_id(ref.id) == ref


@given(group=_GROUP, kind=_KIND, namespace=_NAMESPACE, name=_NAME,
       version=st.from_regex(r"\Av[0-9]+([a-z]+[0-9]+)?\Z"))
def test_any_object_round_trips_through_its_inventory_entry(group, kind, namespace, name, version):
    source = obj(f"{group}/{version}" if group else version, kind, name, namespace or None)
    assert parse_entry(entry_of(ref_of(source), version_of(source))) == (ObjectRef(group, kind, namespace, name),
                                                                         version)
