"""The build confinement walker: every kind of reference inside and outside the tree, symlinks, absolute paths,
remote bases refused or allowed, hostile kustomizations, the load restrictor it picks, and Kubeflow's own trees."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from kfdef_operator.build import confinement, safe_yaml
from kfdef_operator.build.confinement import (
    LOAD_RESTRICTIONS_NONE,
    LOAD_RESTRICTIONS_ROOT_ONLY,
    is_remote,
    path_segment,
    walk,
)

REF = "{ref}"

# (name, kustomization with REF where the reference goes, the field a violation names)
FILE_FIELDS = [
    ("resources", {"resources": [REF]}, "resources[0]"),
    ("crds", {"crds": [REF]}, "crds[0]"),
    ("configurations", {"configurations": [REF]}, "configurations[0]"),
    ("patchesStrategicMerge", {"patchesStrategicMerge": [REF]}, "patchesStrategicMerge[0]"),
    ("patchesJson6902", {"patchesJson6902": [{"target": {"kind": "ConfigMap", "name": "c"}, "path": REF}]},
     "patchesJson6902[0].path"),
    ("patches", {"patches": [{"path": REF}]}, "patches[0].path"),
    ("replacements", {"replacements": [{"path": REF}]}, "replacements[0].path"),
    ("openapi", {"openapi": {"path": REF}}, "openapi.path"),
    ("configMapGenerator files", {"configMapGenerator": [{"name": "c", "files": ["ok.txt", f"key={REF}"]}]},
     "configMapGenerator[0].files[1]"),
    ("configMapGenerator envs", {"configMapGenerator": [{"name": "c", "envs": [REF]}]},
     "configMapGenerator[0].envs[0]"),
    ("secretGenerator env", {"secretGenerator": [{"name": "s", "env": REF}]}, "secretGenerator[0].env"),
    ("generators: a ConfigMapGenerator config file", {"generators": ["plugin.yaml"]}, "generators[0]#0.files[0]"),
    ("transformers: an inline PatchTransformer",
     {"transformers": [f"apiVersion: builtin\nkind: PatchTransformer\nmetadata: {{name: p}}\npath: {REF}\n"]},
     "transformers[0]#0.path"),
    ("validators: a ReplacementTransformer config file", {"validators": ["plugin.yaml"]},
     "validators[0]#0.replacements[0].path"),
]
PLUGIN_FILES = {"generators": {"apiVersion": "builtin", "kind": "ConfigMapGenerator", "metadata": {"name": "g"},
                               "files": [REF]},
                "validators": {"apiVersion": "builtin", "kind": "ReplacementTransformer", "metadata": {"name": "r"},
                               "replacements": [{"path": REF}]}}
DIRECTORY_FIELDS = [("resources", "resources[0]"), ("bases", "bases[0]"), ("components", "components[0]")]


def fill(value, ref: str):
    if isinstance(value, str):
        return value.replace(REF, ref)
    if isinstance(value, list):
        return [fill(v, ref) for v in value]
    if isinstance(value, dict):
        return {k: fill(v, ref) for k, v in value.items()}
    return value


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


@pytest.fixture
def tree(tmp_path) -> Path:
    """``tmp/repo`` (the tree a KfDef names) with a file inside, and ``tmp/outside`` holding a secret and a
    kustomization; ``repo/escape`` is a symlink to ``outside``."""
    repo = tmp_path / "repo"
    write(repo / "app" / "inside.yaml", "kind: ConfigMap\nmetadata: {name: c}\n")
    write(repo / "app" / "ok.txt", "ok\n")
    write(repo / "common" / "shared.yaml", "kind: ConfigMap\nmetadata: {name: shared}\n")
    write(tmp_path / "outside" / "secret.txt", "operator secret\n")
    write(tmp_path / "outside" / "kustomization.yaml", {"resources": ["secret.txt"]})
    (repo / "escape").symlink_to(tmp_path / "outside")
    return repo


def kustomization(tree: Path, content: dict, ref: str, field_name: str = "") -> Path:
    app = tree / "app"
    write(app / "kustomization.yaml", fill(content, ref))
    for plugin_field, config in PLUGIN_FILES.items():
        if field_name.startswith(plugin_field):
            write(app / "plugin.yaml", fill(config, ref))
    return app


def check(tree: Path, app: Path, **kwargs) -> confinement.Walk:
    return walk(app, {tree: "manifests:"}, **kwargs)


@pytest.mark.parametrize("name, content, field_name", FILE_FIELDS, ids=[f[0] for f in FILE_FIELDS])
@pytest.mark.parametrize("ref", ["/etc/passwd", "../../outside/secret.txt", "../escape/secret.txt",
                                 "../common/../../outside/secret.txt"],
                         ids=["absolute", "relative", "symlink leaving the tree", "through a sibling"])
def test_each_file_reference_leaving_the_tree_is_refused(tree, name, content, field_name, ref):
    found = check(tree, kustomization(tree, content, ref, field_name))
    assert [(v.kustomization, v.field, v.reference) for v in found.violations] == [
        ("manifests:app/kustomization.yaml", field_name, ref)], found.violations
    assert "leads outside the repository tree the KfDef names" in str(found.violations[0])


@pytest.mark.parametrize("name, content, field_name", FILE_FIELDS, ids=[f[0] for f in FILE_FIELDS])
@pytest.mark.parametrize("ref", ["inside.yaml", "../common/shared.yaml"], ids=["own directory",
                                                                               "elsewhere in the tree"])
def test_each_file_reference_inside_the_tree_is_accepted(tree, name, content, field_name, ref):
    found = check(tree, kustomization(tree, content, ref, field_name))
    assert found.violations == []
    assert found.load_restrictor == (LOAD_RESTRICTIONS_NONE if ref.startswith("..") else LOAD_RESTRICTIONS_ROOT_ONLY)


@pytest.mark.parametrize("field_name, shown", DIRECTORY_FIELDS)
def test_kustomization_directories_are_followed_and_refused_outside(tree, field_name, shown):
    write(tree / "common" / "kustomization.yaml", {"resources": ["shared.yaml"], "configMapGenerator": [
        {"name": "leak", "files": ["/var/run/secrets/kubernetes.io/serviceaccount/token"]}]})
    found = check(tree, kustomization(tree, {field_name: ["../common"]}, ""))
    assert [(v.kustomization, v.field) for v in found.violations] == [
        ("manifests:common/kustomization.yaml", "configMapGenerator[0].files[0]")]  # found transitively
    assert found.kustomizations == 2
    for outside in ("../escape", "../../outside"):
        found = check(tree, kustomization(tree, {field_name: [outside]}, ""))
        assert [(v.field, v.reference) for v in found.violations] == [(shown, outside)]
        assert found.kustomizations == 1  # the outside kustomization is never read


def test_dotdot_after_a_symlink_is_checked_as_the_os_reads_it(tree, tmp_path):
    """``link/../x`` is ``x`` to kustomize's path cleaning but the link target's sibling to the OS."""
    (tmp_path / "outside" / "deeper").mkdir()
    (tree / "app" / "deep-link").symlink_to(tmp_path / "outside" / "deeper")
    found = check(tree, kustomization(tree, {"configMapGenerator": [{"name": "c", "files": [REF]}]},
                                      "deep-link/../secret.txt"))
    assert [v.reference for v in found.violations] == ["deep-link/../secret.txt"]


REMOTE = ["https://raw.githubusercontent.com/org/repo/main/cm.yaml", "http://127.0.0.1:8080/token",
          "HTTP://internal.example/x", "github.com/kubeflow/manifests//apps?ref=v1.2.0",
          "git::https://example.com/repo.git//base", "git@github.com:org/repo.git", "ssh://git@host/repo.git",
          "file:///srv/git/repo.git", "s3::https://bucket/x"]


@pytest.mark.parametrize("ref", REMOTE)
def test_remote_bases_and_urls_are_refused_unless_allowed(tree, ref):
    app = kustomization(tree, {"resources": [REF], "configMapGenerator": [{"name": "c", "files": [f"k={REF}"]}]}, ref)
    found = check(tree, app)
    assert [(v.field, v.reference) for v in found.violations] == [("resources[0]", ref),
                                                                    ("configMapGenerator[0].files[0]", ref)]
    assert "is remote; remote bases and URLs are refused" in str(found.violations[0])
    assert "--no-remote-bases=false" in str(found.violations[0])
    assert check(tree, app, allow_remote=True).violations == []


@pytest.mark.parametrize("reference", ["base", "../base/deploy.yaml", "a:b.yaml", "patch-github.com.yaml",
                                       "dir/git::x"])
def test_local_paths_are_not_taken_for_remote_ones(reference):
    assert not is_remote(reference)


def test_helm_and_directory_plugins_are_refused(tree):
    write(tree / "app" / "plugins" / "kustomization.yaml", {"resources": ["gen.yaml"]})
    found = check(tree, kustomization(tree, {
        "helmCharts": [{"name": "x", "repo": "https://charts.example"}],
        "generators": ["apiVersion: builtin\nkind: HelmChartInflationGenerator\nmetadata: {name: h}\n"],
        "transformers": ["plugins"]}, ""))
    assert [(v.field, v.problem.split(";")[0]) for v in found.violations] == [
        ("helmCharts", "asks for helm, which the operator never runs"),
        ("generators[0]#0", "asks for helm, which the operator never runs"),
        ("transformers[0]", "is a directory")]


def test_inline_patches_are_not_paths_but_cannot_hide_one(tree):
    inline = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n"
    found = check(tree, kustomization(tree, {"patchesStrategicMerge": [inline, "a: b/../../../../../../etc/passwd"]},
                                      ""))
    assert [v.reference for v in found.violations] == ["a: b/../../../../../../etc/passwd"]


def test_hostile_kustomizations_are_refused_not_parsed(tree, monkeypatch):
    write(tree / "app" / "kustomization.yaml", "resources: " + "[" * 60_000 + "]" * 60_000 + "\n")
    [violation] = check(tree, tree / "app").violations
    # libyaml's own nesting cap (1000) or ours (128), whichever its look-ahead meets first
    assert violation.problem.startswith("cannot be checked: ") and "nest" in violation.problem, violation
    write(tree / "app" / "kustomization.yaml", "resources:\n" + "- inside.yaml\n" * 400_000)
    assert "larger than the 4194304-byte limit" in check(tree, tree / "app").violations[0].problem
    monkeypatch.setattr(confinement, "MAX_FILE_BYTES", 3)
    found = check(tree, kustomization(tree, {"resources": ["inside.yaml"]}, ""))
    assert [v.problem for v in found.violations] == ["is 36 bytes, over the 3-byte limit per file"]


def test_cycles_end(tree):
    write(tree / "app" / "kustomization.yaml", {"resources": ["../common"]})
    write(tree / "common" / "kustomization.yaml", {"resources": ["../app"]})
    found = check(tree, tree / "app")
    assert found.violations == [] and found.kustomizations == 2


def test_generated_roots_are_allowed_and_named(tree, tmp_path):
    wrapper = write(tmp_path / "work" / "kustomize" / "app" / "kustomization.yaml",
                    {"resources": [os.path.relpath(tree / "app", tmp_path / "work" / "kustomize" / "app")],
                     "configMapGenerator": [{"name": "x", "files": ["/etc/hostname"]}]}).parent
    write(tree / "app" / "kustomization.yaml", {"resources": ["inside.yaml"]})
    found = walk(wrapper, {tree: "manifests:", wrapper: "(generated for app)/"})
    assert [str(v) for v in found.violations] == [
        "(generated for app)/kustomization.yaml: configMapGenerator[0].files[0] '/etc/hostname' leads outside the "
        "repository tree the KfDef names"]


def test_escaping_symlinks_are_listed(tree):
    (tree / "app" / "inner").symlink_to("../common")
    assert [(p.name, target) for p, target in confinement.escaping_symlinks(tree)] == [
        ("escape", str(tree.parent / "outside"))]


@pytest.mark.parametrize("value", ["", ".", "..", "a/b", "../x", "a\0b"])
def test_path_segments_cannot_traverse(value):
    with pytest.raises(ValueError, match="cannot be used as a file name"):
        path_segment(value)
    assert path_segment("kubeflow") == "kubeflow"


def test_safe_yaml_refuses_deep_nesting_before_composing():
    assert safe_yaml.load("a: [[1]]") == {"a": [[1]]}
    with pytest.raises(safe_yaml.YamlLimitError, match="nested deeper than 3 levels"):
        safe_yaml.load("a: [[[1]]]", max_depth=3)
    assert safe_yaml.nesting_depth({"a": [{"b": 1}]}) == 3


def laughs(levels: int, fan_out: int = 10) -> str:
    """The billion-laughs kustomization: each level a list of ``fan_out`` aliases of the level below."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * fan_out)}]"]
    lines += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * fan_out)}]" for n in range(1, levels)]
    return "\n".join([*lines, f"resources: *l{levels - 1}", ""])


@pytest.mark.timeout(30)  # before the limit, the !!binary check walked all 10^10 nodes (issue 39, item 1)
def test_a_kustomization_whose_aliases_expand_to_billions_of_nodes_is_refused_at_once(tree):
    bomb = laughs(10)
    assert len(bomb) < 1024
    write(tree / "app" / "kustomization.yaml", bomb)
    [violation] = check(tree, tree / "app").violations
    assert violation.problem.startswith("cannot be checked: its aliases stand for more than 100000 nodes"), violation
    assert safe_yaml.load(laughs(4))["resources"][9][9][9][9] == "lol"  # 10^4 nodes through aliases: fine
    # laughs(3): l1's ten aliases stand for 10 x 11 nodes, l2's for 10 x 111, resources' for l2's 1,111
    safe_yaml.check_limits(laughs(3), max_aliased=110 + 1110 + 1111)
    with pytest.raises(safe_yaml.YamlLimitError, match="aliases stand for more than 2330 nodes"):
        safe_yaml.check_limits(laughs(3), max_aliased=2330)


def test_anchors_are_per_document():
    documents = safe_yaml.load_all("a: &x [1, 2]\nb: *x\n---\nc: &x 3\nd: *x\n")
    assert documents == [{"a": [1, 2], "b": [1, 2]}, {"c": 3, "d": 3}]


# --- Kubeflow's own trees ------------------------------------------------------------------------------------------

KUBEFLOW_V1_2 = ["namespaces/base", "application/v3", "stacks/kubernetes/application/istio-1-3-1-stack",
                 "stacks/kubernetes/application/cluster-local-gateway-1-3-1", "istio/istio/base",
                 "stacks/kubernetes/application/cert-manager-crds",
                 "stacks/kubernetes/application/cert-manager-kube-system-resources",
                 "stacks/kubernetes/application/cert-manager",
                 "stacks/kubernetes/application/add-anonymous-user-filter",
                 "metacontroller/base", "admission-webhook/bootstrap/overlays/application",
                 "stacks/kubernetes/application/spark-operator", "stacks/kubernetes", "knative/installs/generic",
                 "kfserving/installs/generic", "stacks/kubernetes/application/spartakus"]


def test_kubeflow_v1_2_stacks_pass_and_need_the_permissive_restrictor_only_where_they_leave_their_directory(
        kubeflow_v1_2):
    restrictors = {}
    for path in KUBEFLOW_V1_2:
        found = walk(kubeflow_v1_2 / path, {kubeflow_v1_2: "manifests:"})
        assert found.violations == [], (path, found.violations)
        restrictors[path] = found.load_restrictor
    assert restrictors["stacks/kubernetes"] == LOAD_RESTRICTIONS_NONE  # kfctl's stacks: files all over the repo
    assert restrictors["namespaces/base"] == LOAD_RESTRICTIONS_ROOT_ONLY
    assert walk(kubeflow_v1_2 / "stacks/kubernetes", {kubeflow_v1_2: "m:"}).kustomizations == 58
