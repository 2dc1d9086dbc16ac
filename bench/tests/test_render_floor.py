"""The render floor builds the trees the operator's render builds, to the same objects, with the kustomize CLI."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from bench import baselines
from bench.workload import generate
from kfdef_dev.controlplane import find_bin_dir
from kfdef_operator.build.confinement import LOAD_RESTRICTIONS_NONE, LOAD_RESTRICTIONS_ROOT_ONLY

pytestmark = pytest.mark.kustomize


def _kustomize(tree: baselines.KustomizeTree) -> list[dict]:
    output = subprocess.run([str(find_bin_dir() / "kustomize"), "build", f"--load-restrictor={tree.load_restrictor}",
                             str(tree.path)], capture_output=True, check=True).stdout
    return [doc for doc in yaml.safe_load_all(output) if doc]


def test_legacy_and_plain_trees(tmp_path: Path) -> None:
    workload = generate(tmp_path / "repos", scale=0.05)
    plain = workload.root / "example"  # a plain entry point reaching outside its folder through a kustomization
    plain.mkdir()
    (plain / "kustomization.yaml").write_text("resources:\n- ../common/namespaces/base\n- config.yaml\n")
    (plain / "config.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: plain\n  namespace: a\n")
    kfdef = workload.kfdef("stack", "bench", "http://127.0.0.1:9/unused.tar.gz")
    kfdef["spec"]["applications"].append({"name": "example", "kustomizeConfig": {
        "repoRef": {"name": "manifests", "path": "example"}}})

    rendered, trees = baselines.render_in_place(kfdef, workload.root, tmp_path / "trees")

    assert [app.mode for app in rendered] == ["legacy"] * (len(rendered) - 1) + ["plain"]
    assert trees[-1] == baselines.KustomizeTree(plain.resolve(), LOAD_RESTRICTIONS_ROOT_ONLY)
    assert {tree.load_restrictor for tree in trees[:-1]} == {LOAD_RESTRICTIONS_NONE}
    for app, tree in zip(rendered, trees, strict=True):
        assert _kustomize(tree) == app.objects, app.name
    assert baselines.kustomize_alone(trees) > 0
