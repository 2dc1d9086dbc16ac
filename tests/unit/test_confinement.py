"""The walk of a build's kustomizations: every kind of reference inside and outside the tree, symlinks, absolute
paths, remote bases refused or allowed, hostile kustomizations, the load restrictor it picks, and Kubeflow's own
trees. A reference leaving the tree is refused by the render helper where kustomize reads it; the walk names the
kustomization and field that lead there (those tests run the helper: marked ``kustomize``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from kfdef_operator.build import confinement, kustomize, safe_yaml
from kfdef_operator.build.confinement import (
    LOAD_RESTRICTIONS_NONE,
    LOAD_RESTRICTIONS_ROOT_ONLY,
    Violation,
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


def refused(app: Path, roots: dict[Path, str], home: Path) -> Violation | None:
    """What the build of ``app`` is refused for, as the operator says it: the path the render helper refused, named
    by the walk (None when the helper refused nothing; the build must fail all the same)."""
    found = walk(app, roots)
    assert found.violations == []
    with pytest.raises(kustomize.KustomizeError) as failed:
        kustomize.build(app, roots=roots, home=home, load_restrictor=found.load_restrictor)
    assert "operator secret" not in str(failed.value)
    return found.explain(failed.value.refusal.path) if failed.value.refusal else None


@pytest.mark.kustomize
@pytest.mark.parametrize("name, content, field_name", FILE_FIELDS, ids=[f[0] for f in FILE_FIELDS])
@pytest.mark.parametrize("ref", ["/etc/passwd", "../../outside/secret.txt", "../escape/secret.txt",
                                 "../common/../../outside/secret.txt"],
                         ids=["absolute", "relative", "symlink leaving the tree", "through a sibling"])
def test_each_file_reference_leaving_the_tree_is_refused(tree, tmp_path, name, content, field_name, ref):
    violation = refused(kustomization(tree, content, ref, field_name), {tree: "manifests:"}, tmp_path / "home")
    assert violation is not None
    assert (violation.kustomization, violation.field, violation.reference) == (
        "manifests:app/kustomization.yaml", field_name, ref), violation
    assert "leads outside the repository tree the KfDef names" in str(violation)


@pytest.mark.parametrize("name, content, field_name", FILE_FIELDS, ids=[f[0] for f in FILE_FIELDS])
@pytest.mark.parametrize("ref", ["inside.yaml", "../common/shared.yaml"], ids=["own directory",
                                                                               "elsewhere in the tree"])
def test_each_file_reference_inside_the_tree_is_accepted(tree, name, content, field_name, ref):
    found = check(tree, kustomization(tree, content, ref, field_name))
    assert found.violations == []
    assert found.load_restrictor == (LOAD_RESTRICTIONS_NONE if ref.startswith("..") else LOAD_RESTRICTIONS_ROOT_ONLY)


@pytest.mark.kustomize
@pytest.mark.parametrize("field_name, shown", DIRECTORY_FIELDS)
def test_kustomization_directories_are_followed_and_refused_outside(tree, tmp_path, field_name, shown):
    write(tree / "common" / "kustomization.yaml", {"resources": ["shared.yaml"], "configMapGenerator": [
        {"name": "leak", "files": ["/var/run/secrets/kubernetes.io/serviceaccount/token"]}]})
    app = kustomization(tree, {field_name: ["../common"]}, "")
    if field_name == "components":
        write(tree / "common" / "kustomization.yaml", {"kind": "Component", "configMapGenerator": [
            {"name": "leak", "files": ["/var/run/secrets/kubernetes.io/serviceaccount/token"]}]})
    violation = refused(app, {tree: "manifests:"}, tmp_path / "home")
    assert violation is not None
    assert (violation.kustomization, violation.field) == (
        "manifests:common/kustomization.yaml", "configMapGenerator[0].files[0]")  # found transitively
    assert check(tree, app).kustomizations == 2
    for outside in ("../escape", "../../outside"):
        app = kustomization(tree, {field_name: [outside]}, "")
        violation = refused(app, {tree: "manifests:"}, tmp_path / "home")
        assert violation is not None and (violation.field, violation.reference) == (shown, outside)
        assert check(tree, app).kustomizations == 1  # the outside kustomization is never read


@pytest.mark.kustomize
def test_dotdot_after_a_symlink_never_reaches_the_link_targets_parent(tree, tmp_path):
    """``link/../x`` is ``x`` to kustomize's path cleaning but the link target's sibling to the OS: kustomize cleans
    the path before it asks for it, so it asks for ``x`` in the kustomization's own folder (absent here). The helper
    refuses the OS reading too (tools/kfdef-render/internal/confinedfs TestAllowed)."""
    (tmp_path / "outside" / "deeper").mkdir()
    (tree / "app" / "deep-link").symlink_to(tmp_path / "outside" / "deeper")
    app = kustomization(tree, {"configMapGenerator": [{"name": "c", "files": [REF]}]}, "deep-link/../secret.txt")
    found = check(tree, app)
    assert [r.target for r in found.references] == [str(tree / "app" / "secret.txt")]
    with pytest.raises(kustomize.KustomizeError, match="secret.txt") as failed:
        kustomize.build(app, roots={tree: "manifests:"}, home=tmp_path / "home")
    assert "operator secret" not in str(failed.value)


REMOTE = ["https://raw.githubusercontent.com/org/repo/main/cm.yaml", "http://127.0.0.1:8080/token",
          "HTTP://internal.example/x", "github.com/kubeflow/manifests//apps?ref=v1.2.0",
          "git::https://example.com/repo.git//base", "git@github.com:org/repo.git", "ssh://git@host/repo.git",
          "file:///srv/git/repo.git", "s3::https://bucket/x"]


NOT_OVER_HTTP = {"git@github.com:org/repo.git": "ssh", "ssh://git@host/repo.git": "ssh",
                 "file:///srv/git/repo.git": "file://"}


@pytest.mark.parametrize("ref", REMOTE)
def test_remote_bases_and_urls_are_refused_unless_allowed_and_fetched_over_http(tree, ref):
    app = kustomization(tree, {"resources": [REF], "configMapGenerator": [{"name": "c", "files": [f"k={REF}"]}]}, ref)
    found = check(tree, app)
    assert [(v.field, v.reference) for v in found.violations] == [("resources[0]", ref),
                                                                    ("configMapGenerator[0].files[0]", ref)]
    assert "is remote; remote bases and URLs are refused" in str(found.violations[0])
    assert "--no-remote-bases=false" in str(found.violations[0])
    allowed = check(tree, app, allow_remote=True)
    if ref not in NOT_OVER_HTTP:
        assert allowed.violations == []
        return
    assert [(v.field, v.reference) for v in allowed.violations] == [("resources[0]", ref),
                                                                      ("configMapGenerator[0].files[0]", ref)]
    assert NOT_OVER_HTTP[ref] in allowed.violations[0].problem and "https://" in allowed.violations[0].problem


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


@pytest.mark.kustomize
def test_inline_patches_are_not_paths_but_cannot_hide_one(tree, tmp_path):
    inline = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n"
    app = kustomization(tree, {"resources": ["inside.yaml"],
                               "patchesStrategicMerge": [inline, "a: b/../../../../../../etc/passwd"]}, "")
    violation = refused(app, {tree: "manifests:"}, tmp_path / "home")
    assert violation is not None and violation.reference == "a: b/../../../../../../etc/passwd"


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


@pytest.mark.kustomize
def test_generated_roots_are_allowed_and_named(tree, tmp_path):
    wrapper = write(tmp_path / "work" / "kustomize" / "app" / "kustomization.yaml",
                    {"resources": [os.path.relpath(tree / "app", tmp_path / "work" / "kustomize" / "app")],
                     "configMapGenerator": [{"name": "x", "files": ["/etc/hostname"]}]}).parent
    write(tree / "app" / "kustomization.yaml", {"resources": ["inside.yaml"]})
    violation = refused(wrapper, {tree: "manifests:", wrapper: "(generated for app)/"}, tmp_path / "home")
    assert str(violation) == (
        "(generated for app)/kustomization.yaml: configMapGenerator[0].files[0] '/etc/hostname' leads outside the "
        "repository tree the KfDef names")


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
