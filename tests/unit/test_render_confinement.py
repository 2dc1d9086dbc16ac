"""Renders read and write only inside the tree the KfDef names: the operator's own files stay out of the objects,
the legacy renderer's generated files stay in the package copy, remote content is refused (issue 12, items 2 and 3,
at the level of ``render``; ``tests/reliability/test_build_trust.py`` runs the same attacks against the operator)."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest
import yaml

from kfdef_operator.api.kfdef import KfDef, parse_kfdef
from kfdef_operator.build.egress import RemoteBases
from kfdef_operator.build.render import RenderError, aggregated_patch_file, render
from kfdef_operator.source.network import NetworkPolicy
from kfdef_operator.source.resolve import ResolvedSource

pytestmark = pytest.mark.kustomize  # every test renders through the render helper


SECRET = "operator-secret-4242"


def write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def kfdef_of(path: str = "pkg", stacks: bool = False, overlays: tuple[str, ...] = ()) -> KfDef:
    apps = [{"name": "app", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": path},
                                                "overlays": list(overlays)}}]
    if stacks:
        apps.append({"name": "kubeflow-apps", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": path}}})
    return parse_kfdef({"metadata": {"name": "kf", "namespace": "kubeflow"},
                        "spec": {"repos": [{"name": "manifests", "uri": "/unused"}], "applications": apps}})


@pytest.fixture
def repo(tmp_path) -> Path:
    """A v1.0-style package ``pkg/base`` with one ConfigMap, and an operator secret next to (not in) the repo."""
    root = tmp_path / "repo"
    write(root / "pkg" / "base" / "cm.yaml", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
                                              "data": {"a": "1"}})
    write(tmp_path / "secret.txt", SECRET + "\n")
    return root


def sources(root: Path) -> dict[str, ResolvedSource]:
    return {"manifests": ResolvedSource("manifests", str(root), root, "r1")}


def base(root: Path, **fields) -> None:
    write(root / "pkg" / "base" / "kustomization.yaml",
          {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": ["cm.yaml"],
           **fields})


def rendered_text(rendered) -> str:
    return json.dumps([a.objects for a in rendered])


@pytest.mark.parametrize("generator", ["configMapGenerator", "secretGenerator"])
@pytest.mark.parametrize("source", ["files", "envs"])
def test_generators_cannot_read_the_operators_files(repo, tmp_path, generator, source):
    secret = str(tmp_path / "secret.txt")
    base(repo, **{generator: [{"name": "leak", source: [f"token={secret}" if source == "files" else secret]}]})
    with pytest.raises(RenderError) as caught:
        render(kfdef_of(), sources(repo), tmp_path / "work")
    assert f"{generator}[0].{source}[0] '{secret}' leads outside the repository tree" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_absolute_patch_paths_and_configurations_are_refused_and_left_alone(repo, tmp_path):
    config = write(tmp_path / "operator-config.yaml", {"varReference": [{"path": "spec/containers/0/args/1"}]})
    before = config.read_text()
    for fields in ({"patchesStrategicMerge": [str(tmp_path / "secret.txt")]},
                   {"patchesJson6902": [{"target": {"kind": "ConfigMap", "name": "cm"},
                                         "path": str(tmp_path / "secret.txt")}]},
                   {"configurations": [str(config)]}):
        base(repo, **fields)
        with pytest.raises(RenderError, match="leads outside") as caught:
            render(kfdef_of(), sources(repo), tmp_path / "work")
        assert SECRET not in str(caught.value)
    assert config.read_text() == before  # the v5 clean-up of configurations never wrote it


def test_a_json6902_target_name_cannot_write_outside_the_package(repo, tmp_path):
    """kfctl's aggregated patch file ``<name>-<Kind>.yaml`` with a name of ``../`` steps."""
    victim = tmp_path / "work" / "victim"
    base(repo)
    write(repo / "pkg" / "overlays" / "x" / "patch.yaml", "- op: add\n  path: /data/b\n  value: '2'\n")
    name = "../../victim/evil"
    write(repo / "pkg" / "overlays" / "x" / "kustomization.yaml", {"bases": ["../../base"], "patchesJson6902": [
        {"target": {"version": "v1", "kind": "ConfigMap", "name": name}, "path": "patch.yaml"}]})
    render(kfdef_of(overlays=("x",)), sources(repo), tmp_path / "work")  # the patch matches no object: ignored
    assert not victim.exists() and not list(tmp_path.rglob("evil-ConfigMap.yaml"))
    assert (tmp_path / "work" / "kustomize" / "app" / aggregated_patch_file(f"{name}-ConfigMap")).is_file()
    assert aggregated_patch_file("cm-ConfigMap") == "cm-ConfigMap.yaml"  # kfctl's name when it is a plain one
    assert aggregated_patch_file("..-ConfigMap").startswith("json6902-")


@pytest.mark.parametrize("stacks", [False, True], ids=["legacy package", "stacks repository"])
def test_symlinks_leaving_the_tree_fail_the_render(repo, tmp_path, stacks):
    (repo / "pkg" / "base" / "token").symlink_to(tmp_path / "secret.txt")
    base(repo, configMapGenerator=[{"name": "leak", "files": ["token"]}])
    with pytest.raises(RenderError, match=r"symlinks lead outside the tree the KfDef names: manifests:pkg/base/token")\
            as caught:
        render(kfdef_of("pkg/base" if stacks else "pkg", stacks=stacks), sources(repo), tmp_path / "work")
    assert str(caught.value).startswith("repo 'manifests': " if stacks else "application 'app': ")


def test_symlinks_inside_the_tree_still_work(repo, tmp_path):
    write(repo / "pkg" / "shared" / "value.txt", "shared\n")
    (repo / "pkg" / "base" / "value.txt").symlink_to("../shared/value.txt")
    base(repo, configMapGenerator=[{"name": "linked", "files": ["value.txt"]}])
    [app] = render(kfdef_of(), sources(repo), tmp_path / "work")
    assert any(o["kind"] == "ConfigMap" and o["data"] == {"value.txt": "shared\n"} for o in app.objects)


def test_remote_bases_are_refused_by_default_and_reach_kustomize_when_allowed(repo, tmp_path):
    base(repo, resources=["cm.yaml", "https://127.0.0.1:9/base.yaml"])
    with pytest.raises(RenderError, match="resources\\[1\\] 'https://127.0.0.1:9/base.yaml' is remote"):
        render(kfdef_of(), sources(repo), tmp_path / "work")
    loopback = RemoteBases(NetworkPolicy(allowed=(ipaddress.ip_network("127.0.0.1/32"),)))
    with pytest.raises(RenderError) as caught:
        render(kfdef_of(), sources(repo), tmp_path / "work", remote_bases=loopback)
    assert "is remote" not in str(caught.value) and "kustomize build" in str(caught.value)  # kustomize tried


def test_stacks_outside_their_package_but_inside_the_repo_still_build(repo, tmp_path):
    write(repo / "common" / "patch.yaml", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"},
                                           "data": {"a": "patched"}})
    base(repo, patchesStrategicMerge=["../../common/patch.yaml"])
    rendered = render(kfdef_of("pkg/base", stacks=True), sources(repo), tmp_path / "work")
    assert '"a": "patched"' in rendered_text(rendered)
