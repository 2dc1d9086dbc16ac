"""parse_kfdef: typed result for real-shaped KfDefs, and every problem reported with its field path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kfdef_operator.api.kfdef import (
    Application,
    InvalidKfDef,
    KustomizeConfig,
    Parameter,
    RepoRef,
    parse_kfdef,
    project_of,
    service_account_name,
)
from kfdef_operator.ssa.schema import validate

KFDEFS = Path(__file__).parent.parent / "fixtures" / "kfdefs"


def load(name: str) -> dict:
    return yaml.safe_load((KFDEFS / name).read_text())


def minimal(**spec) -> dict:
    body = {"repos": [{"name": "manifests", "uri": "https://example.org/m.tar.gz"}],
            "applications": [{"name": "argo", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "argo"}}}]}
    body.update(spec)
    return {"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef",
            "metadata": {"name": "kubeflow", "namespace": "kubeflow"}, "spec": body}


def errors_of(obj: dict, **kwargs) -> dict[str, str]:
    with pytest.raises(InvalidKfDef) as caught:
        parse_kfdef(obj, **kwargs)
    return {e.path: e.message for e in caught.value.errors}


def test_v1_0_legacy_kfdef_without_name_parses_with_a_default_name():
    kfdef = parse_kfdef(load("v1.0-k8s-istio.yaml"), default_name="kubeflow")
    assert (kfdef.name, kfdef.namespace, kfdef.version) == ("kubeflow", "kubeflow", "v1.0.2")
    assert not kfdef.uses_stacks
    assert [a.name for a in kfdef.applications][:3] == ["istio-crds", "istio-install", "istio"]
    jupyter = next(a for a in kfdef.applications if a.name == "jupyter-web-app")
    assert jupyter == Application("jupyter-web-app", KustomizeConfig(
        RepoRef("manifests", "jupyter/jupyter-web-app"), ("istio", "application"),
        (Parameter("userid-header", "kubeflow-userid"),)))
    assert kfdef.repo("manifests").uri.endswith("v1.0-branch.tar.gz")


def test_v1_2_stacks_kfdef_keeps_plugins_and_secrets():
    kfdef = parse_kfdef(load("v1.2-stacks.yaml"))
    assert kfdef.uses_stacks
    assert project_of(kfdef) == "example-project"
    assert kfdef.plugins[0].spec["deploymentManagerConfig"]["repoRef"]["path"] == "gcp/deployment_manager_configs"
    assert [(s.name, s.literal_value, s.env_name) for s in kfdef.secrets] == [
        ("client-secret", None, "CLIENT_SECRET"), ("password", "not-a-real-password", None)]


def test_metadata_wins_over_defaults_and_missing_name_is_an_error():
    obj = minimal()
    assert parse_kfdef(obj, default_name="other", default_namespace="other").name == "kubeflow"
    del obj["metadata"]["name"]
    assert "metadata.name" in errors_of(obj)


def test_all_errors_are_reported_at_once_with_paths():
    obj = minimal(
        repos=[{"name": "manifests", "uri": "ftp://example.org/m.tar.gz"}, {"name": "manifests", "uri": "/x"}],
        applications=[
            {"name": "a", "kustomizeConfig": {"repoRef": {"name": "nope", "path": "a"}}},
            {"name": "a", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "../outside"}}},
            {"name": "b"},
            {"name": "c", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "/abs"}}},
            {"name": "d", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": ""}}},
            {"name": "Bad_Name", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "x"},
                                                     "parameters": [{"name": "flag", "value": False}]}},
        ])
    obj["metadata"]["name"] = "Not-A-Label"
    errors = errors_of(obj)
    assert set(errors) == {
        "metadata.name", "spec.repos[0].uri", "spec.repos[1].name",
        "spec.applications[0].kustomizeConfig.repoRef.name", "spec.applications[1].name",
        "spec.applications[1].kustomizeConfig.repoRef.path", "spec.applications[2].kustomizeConfig",
        "spec.applications[3].kustomizeConfig.repoRef.path", "spec.applications[4].kustomizeConfig.repoRef.path",
        "spec.applications[5].name", "spec.applications[5].kustomizeConfig.parameters[0].value"}
    assert "ftp" in errors["spec.repos[0].uri"]
    assert "nope" in errors["spec.applications[0].kustomizeConfig.repoRef.name"]
    assert "quote it" in errors["spec.applications[5].kustomizeConfig.parameters[0].value"]


def test_str_of_invalid_kfdef_is_one_line_listing_path_and_message():
    obj = minimal(applications=[{"name": "x"}, {"name": "x", "kustomizeConfig": {}}])
    with pytest.raises(InvalidKfDef) as caught:
        parse_kfdef(obj)
    text = str(caught.value)
    assert "\n" not in text
    assert text.startswith("invalid KfDef: spec.applications[0].kustomizeConfig: is required")
    assert "spec.applications[1].name: duplicate application name 'x'" in text


@pytest.mark.parametrize("uri", ["https://h/m.tar.gz", "http://127.0.0.1:8/m.tgz", "file:///m.tar.gz", "rel/dir",
                                 "/abs/dir", "git+https://github.com/o/r.git?ref=v1#sub", "git+ssh://git@h/r.git",
                                 "git+file:///srv/repo?ref=main"])
def test_supported_uri_forms(uri):
    assert parse_kfdef(minimal(repos=[{"name": "manifests", "uri": uri}])).repos[0].uri == uri


@pytest.mark.parametrize("uri", ["ftp://h/x", "s3://bucket/x", "git+https:///no-host"])
def test_unsupported_uri_forms(uri):
    assert "spec.repos[0].uri" in errors_of(minimal(repos=[{"name": "manifests", "uri": uri}]))


def test_manifests_repo_is_not_required():
    obj = minimal(repos=[{"name": "mine", "uri": "/srv/m"}],
                  applications=[{"name": "a", "kustomizeConfig": {"repoRef": {"name": "mine", "path": "a"}}}])
    assert parse_kfdef(obj).repos[0].name == "mine"


def test_application_name_optional_in_v1beta1_only():
    obj = minimal(applications=[{"kustomizeConfig": {"repoRef": {"name": "manifests", "path": "jupyter/notebook/"}}}])
    assert "spec.applications[0].name" in errors_of(obj)
    obj["apiVersion"] = "kfdef.apps.kubeflow.org/v1beta1"
    assert parse_kfdef(obj).applications[0].name == "notebook"


def test_numeric_values_are_taken_as_text_and_generation_uid_kept():
    obj = minimal()
    obj["metadata"].update(generation=7, uid="u-1")
    obj["spec"]["applications"][0]["kustomizeConfig"]["parameters"] = [{"name": "replicas", "value": 3}]
    kfdef = parse_kfdef(obj)
    assert kfdef.applications[0].kustomize_config.parameters == (Parameter("replicas", "3"),)
    assert (kfdef.generation, kfdef.uid) == (7, "u-1")


def test_secret_needs_exactly_one_source():
    errors = errors_of(minimal(secrets=[{"name": "s", "secretSource": {}}]))
    assert errors == {"spec.secrets[0].secretSource": "needs exactly one of literalSource or envSource"}


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=3), max_leaves=15)


@settings(max_examples=150, deadline=None)
@given(spec=st.dictionaries(st.sampled_from(["applications", "repos", "plugins", "secrets", "version"]),
                            json_values, max_size=5))
def test_any_json_either_parses_or_raises_invalid_kfdef(spec):
    try:
        parse_kfdef({"metadata": {"name": "k", "namespace": "n"}, "spec": spec})
    except InvalidKfDef as exc:
        assert exc.errors and all(e.path and e.message for e in exc.errors)


# --- CRD --------------------------------------------------------------------------------------------------

CRD = Path(__file__).parent.parent.parent / "crds" / "kfdef.apps.kubeflow.org_kfdefs.yaml"


def schema_problems(obj: dict, schema: dict) -> list[str]:
    """What the API server would refuse (the command line's own check, ``ssa.schema.validate``)."""
    return [f"{path}: {message}" for path, message in validate(obj, schema)]


def all_schemas(schema: dict):
    yield schema
    for child in list(schema.get("properties", {}).values()) + ([schema["items"]] if "items" in schema else []):
        yield from all_schemas(child)


def test_crd_identity_versions_and_columns():
    crd = yaml.safe_load(CRD.read_text())
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["metadata"]["name"] == "kfdefs.kfdef.apps.kubeflow.org"
    assert crd["spec"]["names"] == {"kind": "KfDef", "listKind": "KfDefList", "plural": "kfdefs", "singular": "kfdef"}
    assert crd["spec"]["scope"] == "Namespaced"
    v1, v1beta1 = crd["spec"]["versions"]
    assert (v1["name"], v1["storage"], v1beta1["name"], v1beta1["storage"]) == ("v1", True, "v1beta1", False)
    assert v1["served"] and v1beta1["served"] and v1["subresources"] == {"status": {}}
    columns = [(c["name"], c["type"], c.get("priority", 0)) for c in v1["additionalPrinterColumns"]]
    # Short columns for `kubectl get kfdef`; the long Ready message only with -o wide (priority 1).
    assert columns == [("Ready", "string", 0), ("Status", "string", 0), ("Applied", "integer", 0),
                       ("Total", "integer", 0), ("Age", "date", 0), ("Degraded", "string", 1), ("Message", "string", 1)]
    assert v1["additionalPrinterColumns"] == v1beta1["additionalPrinterColumns"]
    s1, s2 = (v["schema"]["openAPIV3Schema"] for v in (v1, v1beta1))
    app1, app2 = (s["properties"]["spec"]["properties"]["applications"]["items"] for s in (s1, s2))
    assert app1["required"] == ["name"] and "required" not in app2
    del app1["required"]
    assert s1 == s2
    status = s1["properties"]["status"]
    assert not any(s.get("x-kubernetes-preserve-unknown-fields") for s in all_schemas(status))
    assert "required" not in status["properties"]["reposCache"]["items"] or \
        "localPath" not in status["properties"]["reposCache"]["items"]["required"]
    assert status["properties"]["failures"]["maxItems"] == 50
    plugin_spec = s1["properties"]["spec"]["properties"]["plugins"]["items"]["properties"]["spec"]
    assert plugin_spec["x-kubernetes-preserve-unknown-fields"] is True
    assert all("type" in s or s.get("x-kubernetes-preserve-unknown-fields") for s in all_schemas(s1))


@pytest.mark.parametrize("name", sorted(p.name for p in KFDEFS.glob("*.yaml")))
def test_fixture_kfdefs_fit_the_crd_schema_unchanged(name):
    crd = yaml.safe_load(CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema_problems(load(name), schema) == []
    status = {"observedGeneration": 3, "conditions": [{"type": "Ready", "status": "True", "reason": "Applied",
                                                       "message": "ok", "lastTransitionTime": "2024-01-01T00:00:00Z",
                                                       "observedGeneration": 3}],
              "reposCache": [{"name": "manifests"}], "sources": [{"name": "manifests", "uri": "u", "revision": "r"}],
              "summary": {"total": 3, "applied": 3, "ready": 2, "failed": 0, "upgraded": 1},
              "applications": [{"name": "argo", "total": 3, "applied": 3, "ready": 2, "failed": 0}],
              "inventory": {"applications": [{"name": "argo", "objects": ["kubeflow_argo_apps_Deployment_v1"]}],
                            "stale": ["kubeflow_old__Service_v1"], "runOnce": {"kubeflow_init_batch_Job": "sha256:0"}},
              "failures": [{"object": "Deployment/kubeflow/argo", "message": "not ready"}],
              "upgrades": {"count": 1, "kinds": ["CustomResourceDefinition"]}}
    assert schema_problems({**load(name), "status": status}, schema) == []


def test_service_account_name_is_a_name_in_the_kfdefs_own_namespace():
    assert parse_kfdef(minimal()).service_account_name == ""
    assert parse_kfdef(minimal(serviceAccountName="kfdef-deployer")).service_account_name == "kfdef-deployer"
    for other_namespace in ("system:serviceaccount:kube-system:admin", "kube-system/admin", "kube-system:admin"):
        assert "own namespace" in errors_of(minimal(serviceAccountName=other_namespace))["spec.serviceAccountName"]
    for bad in ("Admin", "-x", "a" * 254, "a b", "default\n"):  # the whole string must match, not up to a newline
        assert "not a ServiceAccount name" in errors_of(minimal(serviceAccountName=bad))["spec.serviceAccountName"]
    assert "must be a string" in errors_of(minimal(serviceAccountName=True))["spec.serviceAccountName"]


def test_service_account_name_is_read_from_a_kfdef_that_does_not_parse_otherwise():
    broken = minimal(serviceAccountName="deployer", repos="not a list")
    with pytest.raises(InvalidKfDef):
        parse_kfdef(broken)
    assert service_account_name(broken) == "deployer"
    assert service_account_name({"spec": None}) == ""
    with pytest.raises(InvalidKfDef, match="own namespace"):
        service_account_name(minimal(serviceAccountName="other:deployer"))


def test_spec_fields_the_operator_reads_are_declared_in_both_crd_versions():
    """Undeclared fields are pruned by the API server: the operator would never see them."""
    spec = minimal(serviceAccountName="deployer", force=True, interval="5m")
    kfdef = parse_kfdef(spec)
    assert (kfdef.service_account_name, kfdef.force, kfdef.interval) == ("deployer", True, 300.0)
    for version in yaml.safe_load(CRD.read_text())["spec"]["versions"]:
        assert schema_problems(spec, version["schema"]["openAPIV3Schema"]) == [], version["name"]
