"""Rendering: kfctl's merge rules and params.env rewrite (pure, golden), then real builds of all three modes.

Golden files live in tests/fixtures/golden/; regenerate with KFDEF_UPDATE_GOLDEN=1 after a deliberate change
and review the diff.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from kfdef_operator.api.kfdef import KfDef, Parameter, parse_kfdef
from kfdef_operator.build.confinement import LOAD_RESTRICTIONS_NONE
from kfdef_operator.build.render import (
    NAMESPACE_TRANSFORMER_FILE,
    RenderError,
    drop_numeric_field_specs,
    for_kustomize_v5,
    generate_name_suffix,
    merge_package,
    render,
    rewrite_params_env,
)
from kfdef_operator.source.resolve import ResolvedSource
from tests.kustomize_cli import cli_build

FIXTURES = Path(__file__).parent.parent / "fixtures"
MANIFESTS = FIXTURES / "manifests"
GOLDEN = FIXTURES / "golden"


def check_golden(name: str, data: object) -> None:
    path = GOLDEN / name
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    if os.environ.get("KFDEF_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs from the golden file (KFDEF_UPDATE_GOLDEN=1 to update)"


def kustomization(relative: str) -> dict:
    return yaml.safe_load((MANIFESTS / relative / "kustomization.yaml").read_text())


def kfdef_from(name: str, **changes) -> KfDef:
    obj = yaml.safe_load((FIXTURES / "kfdefs" / name).read_text())
    obj["metadata"].update(changes)
    return parse_kfdef(obj, default_name="kubeflow")


def local_sources() -> dict[str, ResolvedSource]:
    return {"manifests": ResolvedSource("manifests", str(MANIFESTS), MANIFESTS, "test")}


# --- params.env (reference 5.2) ---------------------------------------------------------------------------

def rewrite(text: str, *params: tuple[str, str]) -> str:
    return rewrite_params_env(text, [Parameter(n, v) for n, v in params], app_name="kf", namespace="kubeflow",
                              project="proj", generate_name_suffix="0123abcd")


def test_params_env_rewrite_follows_kfctl():
    text = "a=1\nb=2\nappName=file\nnamespace=\nproject=p0\ngenerateName=\n# comment\n\nnoequals"
    result = rewrite(text, ("a", "x"), ("b", ""), ("generateName", "run-"), ("namespace", "ns"),
                     ("absent", "dropped"), ("noequals", "v"))
    assert result == ("a=x\nb=2\nappName=kf\nnamespace=ns\nproject=proj\ngenerateName=run-0123abcd\n"
                      "# comment\n\nnoequals=v\n")


def test_generate_name_keeps_a_value_already_in_the_file_and_needs_a_parameter():
    assert rewrite("generateName=fixed\n", ("generateName", "run-")) == "generateName=run-\n"
    assert rewrite("generateName=\n") == "generateName=\n"


def test_empty_parameter_falls_back_to_auto_fill_and_empty_file_stays_empty():
    assert rewrite("appName=x\nnamespace=y\n", ("appName", ""), ("namespace", "")) == "appName=kf\nnamespace=kubeflow\n"
    assert rewrite("") == ""


def test_generate_name_suffix_is_stable_per_kfdef_and_application():
    a = kfdef_from("local-legacy.yaml", uid="uid-1")
    assert re.fullmatch(r"[0-9a-f]{8}", generate_name_suffix(a, "argo"))
    assert generate_name_suffix(a, "argo") == generate_name_suffix(kfdef_from("local-legacy.yaml", uid="uid-1"), "argo")
    assert generate_name_suffix(a, "argo") != generate_name_suffix(a, "other")
    assert generate_name_suffix(a, "argo") != generate_name_suffix(kfdef_from("local-legacy.yaml", uid="uid-2"), "argo")


# --- merge (reference 5.1) --------------------------------------------------------------------------------

def test_jupyter_base_with_istio_and_application_overlays_matches_golden():
    merged = merge_package(kustomization("jupyter/jupyter-web-app/base"),
                           [("istio", kustomization("jupyter/jupyter-web-app/overlays/istio")),
                            ("application", kustomization("jupyter/jupyter-web-app/overlays/application"))],
                           [Parameter("userid-header", "kubeflow-userid")], "kubeflow")
    check_golden("jupyter-web-app.kustomization.yaml", {
        "kustomization": merged.kustomization, "json6902_files": merged.json6902_files, "warnings": merged.warnings})
    converted, transformer = for_kustomize_v5(merged.kustomization)
    check_golden("jupyter-web-app.kustomization.v5.yaml", {"kustomization": converted, "transformer": transformer})


def test_merge_rules_for_scalars_maps_and_named_lists():
    first = {"bases": ["../../base"], "namePrefix": "p1-", "commonLabels": {"a": "1", "b": "1"},
             "generatorOptions": {"disableNameSuffixHash": True}, "images": [{"name": "img", "newTag": "1"}],
             "vars": [{"name": "v", "objref": {"kind": "ConfigMap", "name": "a"}}], "crds": ["crd.json"],
             "namespace": "ignored"}
    second = {"bases": ["../../base", "../../../common/base"], "namePrefix": "p2-", "nameSuffix": "-s",
              "commonLabels": {"b": "2"}, "commonAnnotations": {"c": "3"}, "generatorOptions": {"labels": {"x": "y"}},
              "images": [{"name": "img", "newTag": "2"}], "vars": [{"name": "v", "objref": {"kind": "Secret"}}],
              "resources": ["r.yaml", "../../base/extra.yaml"]}
    merged = merge_package({}, [("one", first), ("two", second)], [], "kubeflow")
    k = merged.kustomization
    assert k["bases"] == ["base", "../common/base"]
    assert (k["namePrefix"], k["nameSuffix"]) == ("p1-", "-s")
    assert k["commonLabels"] == {"a": "1", "b": "2"} and k["commonAnnotations"] == {"c": "3"}
    assert k["generatorOptions"] == {"disableNameSuffixHash": True}
    assert k["images"] == [{"name": "img", "newTag": "1"}]
    assert k["vars"] == [{"name": "v", "objref": {"kind": "ConfigMap", "name": "a"}}]
    assert k["crds"] == ["overlays/one/crd.json"]
    assert k["resources"] == ["overlays/two/r.yaml", "base/extra.yaml"]
    assert k["namespace"] == "kubeflow"
    assert len(merged.warnings) == 2 and "image 'img'" in merged.warnings[0]


def test_base_without_bases_is_referenced_and_overlay_without_bases_becomes_a_base():
    merged = merge_package({"resources": ["a.yaml"], "namespace": "own"}, [("extra", {"resources": ["c.yaml"]})],
                           [], "kubeflow")
    assert merged.kustomization == {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                                    "namespace": "kubeflow", "bases": ["base", "overlays/extra"]}


def test_namespace_parameter_wins_over_the_kfdef_namespace():
    merged = merge_package({}, [], [Parameter("namespace", "istio-system")], "kubeflow")
    assert merged.kustomization["namespace"] == "istio-system"


def test_generators_behaviour_and_paths():
    overlay = {"bases": ["../../base"],
               "configMapGenerator": [
                   {"name": "params", "env": "params.env"},
                   {"name": "params", "behavior": "merge", "envs": ["a.env", "../../base/b.env"]},
                   {"name": "created", "behavior": "create", "literals": ["k=v"], "options": {"labels": {"x": "y"}}},
                   {"name": "created", "behavior": "create", "literals": ["k=w"]},
                   {"name": "files", "files": ["one.txt", "key=two.txt"]}],
               "secretGenerator": [{"name": "s", "type": "Opaque", "env": "s.env"}]}
    merged = merge_package({}, [("o", overlay)], [], "ns")
    assert merged.kustomization["configMapGenerator"] == [
        {"name": "params", "env": "overlays/o/params.env", "behavior": "unspecified"},
        {"name": "params", "envs": ["overlays/o/a.env", "base/b.env"], "behavior": "merge"},
        {"name": "created", "literals": ["k=v"], "behavior": "create"},
        {"name": "files", "env": "overlays/o/two.txt", "behavior": "unspecified"}]
    assert merged.kustomization["secretGenerator"] == [
        {"name": "s", "type": "Opaque", "env": "overlays/o/s.env", "behavior": "unspecified"}]
    assert any("'created'" in w for w in merged.warnings)


def test_json6902_patches_are_aggregated_per_target_name_and_kind():
    target = {"group": "apps", "version": "v1", "kind": "Deployment", "name": "d"}
    merged = merge_package({}, [
        ("a", {"bases": [], "patchesJson6902": [{"target": target, "path": "p.yaml"},
                                                {"target": {**target, "kind": "Service"}, "path": "s.yaml"}]}),
        ("b", {"bases": [], "patchesJson6902": [{"target": target, "path": "p.yaml"},
                                                {"target": target, "path": "p.yaml"}]})], [], "ns")
    assert merged.kustomization["patchesJson6902"] == [
        {"target": target, "path": "d-Deployment.yaml"},
        {"target": {**target, "kind": "Service"}, "path": "d-Service.yaml"}]
    assert merged.json6902_files == {"d-Deployment.yaml": ["overlays/a/p.yaml", "overlays/b/p.yaml"],
                                     "d-Service.yaml": ["overlays/a/s.yaml"]}


def test_v5_conversion_moves_bases_after_resources_and_namespace_to_a_transformer():
    converted, transformer = for_kustomize_v5({"namespace": "ns", "resources": ["r"], "bases": ["base"],
                                               "transformers": ["t.yaml"]})
    assert converted == {"resources": ["r", "base"], "transformers": ["t.yaml", NAMESPACE_TRANSFORMER_FILE]}
    assert transformer["metadata"]["namespace"] == "ns"
    assert transformer["fieldSpecs"] == [{"path": "metadata/namespace", "create": True}]
    assert for_kustomize_v5({"resources": ["r"]}) == ({"resources": ["r"]}, None)


def test_numeric_index_field_specs_are_dropped():
    config = {"varReference": [{"path": "spec/containers/0/env/0/value", "kind": "Pod"}, {"path": "data/x"}],
              "nameReference": [{"kind": "Secret", "fieldSpecs": [{"path": "spec/volumes/1/secret"},
                                                                  {"path": "spec/x/name"}]}],
              "other": "kept"}
    cleaned, dropped = drop_numeric_field_specs(config)
    assert cleaned == {"varReference": [{"path": "data/x"}],
                       "nameReference": [{"kind": "Secret", "fieldSpecs": [{"path": "spec/x/name"}]}], "other": "kept"}
    assert dropped == ["spec/containers/0/env/0/value", "spec/volumes/1/secret"]


# --- real builds ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def legacy(tmp_path_factory):
    kfdef = kfdef_from("local-legacy.yaml", uid="5f0c3c4e-golden")
    return kfdef, render(kfdef, local_sources(), tmp_path_factory.mktemp("work"))


def by_kind(app, kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in app.objects if o["kind"] == kind}


@pytest.mark.kustomize
def test_legacy_render_matches_golden_and_keeps_spec_order(legacy):
    kfdef, rendered = legacy
    assert [(a.name, a.mode) for a in rendered] == [
        ("istio-install", "legacy"), ("application", "plain"), ("jupyter-web-app", "legacy"), ("argo", "legacy"),
        ("profiles", "plain"), ("centraldashboard", "legacy")]
    assert all(a.seconds > 0 for a in rendered)
    check_golden("local-legacy.objects.yaml", {a.name: a.objects for a in rendered})


@pytest.mark.kustomize
def test_namespace_objects_of_legacy_packages_keep_their_names(legacy):
    _, rendered = legacy
    istio = rendered[0]
    assert set(by_kind(istio, "Namespace")) == {"istio-system", "knative-serving"}
    gateway = by_kind(istio, "ServiceAccount")["istio-ingressgateway-service-account"]
    assert gateway["metadata"]["namespace"] == "istio-system"


@pytest.mark.kustomize
def test_plain_entry_points_build_exactly_as_kustomize_does(legacy):
    # Nothing added (objects without a namespace get the KfDef's from the operator), v5's namespace meaning.
    _, rendered = legacy
    for app, path in ((rendered[1], "application/v3"), (rendered[4], "profiles/namespaced")):
        assert app.objects == cli_build(MANIFESTS / path)
    assert "namespace" not in by_kind(rendered[1], "StatefulSet")["application-controller"]["metadata"]
    assert set(by_kind(rendered[4], "Namespace")) == {"kubeflow-profiles"}


@pytest.mark.kustomize
def test_a_plain_entry_point_has_the_whole_repository(tmp_path):
    kfdef = write_kfdef({"name": "kubeflow", "kustomizeConfig": {"repoRef": {"name": "manifests",
                                                                              "path": "modern/example"}}})
    [app] = render(kfdef, local_sources(), tmp_path)
    assert app.mode == "plain"
    assert app.objects == cli_build(MANIFESTS / "modern" / "example")
    assert by_kind(app, "ConfigMap")["gateway-config"]["data"]["host"] == "gateway.gateway-system.svc.cluster.local"
    assert set(by_kind(app, "Namespace")) == {"dashboards", "gateway-system"}
    assert not (tmp_path / "kustomize" / "kubeflow").exists(), "built in place, not copied"


@pytest.mark.kustomize
def test_stacks_mode_builds_a_tree_written_for_kustomize_v5_as_v5_does(tmp_path):
    # Its replacements read namespaces, its patches name renamed Namespaces: no v3 rewrite anywhere.
    kfdef = write_kfdef({"name": "kubeflow-apps", "kustomizeConfig": {"repoRef": {"name": "manifests",
                                                                                   "path": "modern/example"}}})
    [app] = render(kfdef, local_sources(), tmp_path)
    assert app.objects == cli_build(MANIFESTS / "modern" / "example", load_restrictor=LOAD_RESTRICTIONS_NONE)
    assert by_kind(app, "ConfigMap")["gateway-config"]["data"]["host"] == "gateway.gateway-system.svc.cluster.local"
    assert not list((tmp_path / "repos").rglob(NAMESPACE_TRANSFORMER_FILE))


@pytest.mark.kustomize
def test_stacks_mode_rewrites_only_the_v3_kustomizations_that_need_it(tmp_path):
    render(kfdef_from("local-stacks.yaml"), local_sources(), tmp_path)
    rewritten = sorted(str(path.parent.relative_to(tmp_path / "repos" / "manifests"))
                       for path in (tmp_path / "repos").rglob(NAMESPACE_TRANSFORMER_FILE))
    # istio-install/base holds Namespaces istio-system and knative-serving; kubeflow-apps' tree holds none.
    assert rewritten == ["istio/istio-install/base"]


@pytest.mark.kustomize
def test_legacy_params_overlays_and_patches_land_in_objects(legacy):
    kfdef, rendered = legacy
    jupyter, argo = rendered[2], rendered[3]
    params = by_kind(jupyter, "ConfigMap")["jupyter-web-app-parameters"]["data"]
    assert params["userid-header"] == "kubeflow-userid" and params["namespace"] == "kubeflow"
    assert params["clusterDomain"] == "cluster.local" and "not-in-params-env" not in params
    deployment = by_kind(jupyter, "Deployment")["jupyter-web-app-deployment"]
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"] == {"sidecar.istio.io/inject": "true"}
    assert template["metadata"]["labels"]["app.kubernetes.io/part-of"] == "kubeflow"
    assert deployment["metadata"]["labels"]["app.kubernetes.io/name"] == "jupyter-web-app"
    container = template["spec"]["containers"][0]
    assert container["image"] == "gcr.io/kubeflow-images-public/jupyter-web-app:v1.0.1"
    assert container["imagePullPolicy"] == "Always"
    assert by_kind(jupyter, "VirtualService")["jupyter-web-app"]["spec"]["http"][0]["route"][0]["destination"][
        "host"] == "jupyter-web-app-service.kubeflow.svc.cluster.local"
    assert any("numeric" in w for w in jupyter.warnings)

    argo_params = by_kind(argo, "ConfigMap")["workflow-controller-parameters"]["data"]
    suffix = generate_name_suffix(kfdef, "argo")
    assert argo_params == {"containerRuntimeExecutor": "pns", "generateName": f"run-{suffix}", "appName": "kubeflow",
                           "namespace": "kubeflow", "project": "", "unrelated": "keep-me"}
    assert "containerRuntimeExecutor: pns" in by_kind(argo,
                                                      "ConfigMap")["workflow-controller-configmap"]["data"]["config"]
    assert by_kind(argo, "Deployment")["workflow-controller"]["metadata"]["annotations"] == {
        "kubeflow.org/run-name": f"run-{suffix}"}
    assert by_kind(argo, "Secret")  # from the istio overlay's secretGenerator


@pytest.mark.kustomize
def test_rerender_is_identical_and_parallelism_does_not_change_results(legacy, tmp_path):
    kfdef, rendered = legacy
    again = render(kfdef, local_sources(), tmp_path, max_workers=1)
    assert [a.objects for a in again] == [a.objects for a in rendered]


@pytest.mark.kustomize
def test_source_cache_is_not_modified(legacy):
    assert "namespace: kubeflow" in (MANIFESTS / "jupyter/jupyter-web-app/base/kustomization.yaml").read_text()
    assert "containers/0/args/1" in (MANIFESTS / "jupyter/jupyter-web-app/base/params.yaml").read_text()
    assert "generateName=\n" in (MANIFESTS / "argo/base/params.env").read_text()


@pytest.mark.kustomize
def test_stacks_mode_wraps_every_application_and_loads_outside_files(tmp_path):
    kfdef = kfdef_from("local-stacks.yaml")
    progress = []
    rendered = render(kfdef, local_sources(), tmp_path, progress=progress.append)
    assert [(a.name, a.mode) for a in rendered] == [("istio-stack", "stacks"), ("kubeflow-apps", "stacks")]
    assert sorted(a.name for a in progress) == ["istio-stack", "kubeflow-apps"]
    wrapper = yaml.safe_load((tmp_path / "kustomize" / "kubeflow-apps" / "kustomization.yaml").read_text())
    assert wrapper["resources"] == ["../../repos/manifests/stacks/generic/application/kubeflow-apps"]
    assert set(by_kind(rendered[0], "Namespace")) == {"istio-system", "knative-serving"}
    apps = rendered[1]
    assert by_kind(apps, "Deployment")["centraldashboard"]["spec"]["replicas"] == 2
    assert {o["metadata"].get("namespace") for o in apps.objects} == {"kubeflow"}


def write_kfdef(app: dict) -> KfDef:
    return parse_kfdef({"metadata": {"name": "kf", "namespace": "kubeflow"},
                        "spec": {"repos": [{"name": "manifests", "uri": "/unused"}], "applications": [app]}})


@pytest.mark.kustomize
def test_overlay_without_bases_includes_the_overlay_dir(tmp_path):
    kfdef = write_kfdef({"name": "dash", "kustomizeConfig": {
        "repoRef": {"name": "manifests", "path": "centraldashboard"}, "overlays": ["extra"]}})
    [app] = render(kfdef, local_sources(), tmp_path)
    assert sorted((o["kind"], o["metadata"]["namespace"]) for o in app.objects) == [
        ("ConfigMap", "kubeflow"), ("Service", "kubeflow")]


@pytest.mark.kustomize
def test_missing_overlay_is_an_error_naming_the_available_ones(tmp_path):
    kfdef = write_kfdef({"name": "jwa", "kustomizeConfig": {
        "repoRef": {"name": "manifests", "path": "jupyter/jupyter-web-app"}, "overlays": ["istio", "gcp"]}})
    with pytest.raises(RenderError, match=r"overlay 'gcp' does not exist .*available: application, istio") as caught:
        render(kfdef, local_sources(), tmp_path)
    assert caught.value.application == "jwa"


@pytest.mark.kustomize
def test_broken_kustomization_surfaces_kustomize_stderr_and_all_failures(tmp_path):
    kfdef = parse_kfdef({"metadata": {"name": "kf", "namespace": "kubeflow"}, "spec": {
        "repos": [{"name": "manifests", "uri": "/unused"}],
        "applications": [{"name": "ok", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "argo"}}},
                         {"name": "broken", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "broken"}}},
                         {"name": "nowhere",
                          "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "no/such"}}}]}})
    with pytest.raises(RenderError) as caught:
        render(kfdef, local_sources(), tmp_path)
    assert caught.value.application == "broken"
    assert "does-not-exist.yaml" in str(caught.value)
    assert "1 more failed: nowhere" in str(caught.value)


@pytest.mark.kustomize
def test_a_kustomization_that_is_not_an_object_is_named_by_its_directory_not_the_render_copy(tmp_path):
    """Issue 39, item 7: the refusal showed the path of the operator's copy in its work directory."""
    (tmp_path / "repo" / "listed" / "base").mkdir(parents=True)
    (tmp_path / "repo" / "listed" / "base" / "kustomization.yaml").write_text("- resources\n")
    kfdef = write_kfdef({"name": "listed", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "listed"}}})
    sources = {"manifests": ResolvedSource("manifests", "/unused", tmp_path / "repo", "test")}
    with pytest.raises(RenderError, match=r"kustomization.yaml in base/ is not a kustomization") as caught:
        render(kfdef, sources, tmp_path / "work")
    assert str(tmp_path) not in str(caught.value)


@pytest.mark.kustomize
def test_package_without_any_kustomization_is_an_error(tmp_path):
    kfdef = write_kfdef({"name": "x", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "stacks"}}})
    with pytest.raises(RenderError, match="neither base/kustomization.yaml nor a kustomization.yaml"):
        render(kfdef, local_sources(), tmp_path)
