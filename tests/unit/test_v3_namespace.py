"""Where a copied kustomization gets kustomize v3's meaning of ``namespace:`` (needed and safe)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kfdef_operator.build.v3_namespace import KustomizationTree, to_rewrite, written_for_v3


def write(root: Path, files: dict[str, object]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else yaml.safe_dump_all(content))


def namespace(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def decide(root: Path, directory: str = "app") -> bool:
    tree = KustomizationTree(root)
    return (root / directory).resolve() in to_rewrite(tree, tree.reachable([root / directory]))


SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}


@pytest.mark.parametrize(("files", "expected"), [
    # Needed: a Namespace of another name passes through, here from a folder two levels down.
    ({"app/kustomization.yaml": [{"namespace": "kubeflow", "resources": ["../base"]}],
      "base/kustomization.yaml": [{"resources": ["../deeper"]}],
      "deeper/kustomization.yaml": [{"resources": ["ns.yaml"]}], "deeper/ns.yaml": [namespace("knative-serving")]},
     True),
    # Not needed: the only Namespace already has the kustomization's name, or there is none.
    ({"app/kustomization.yaml": [{"namespace": "kubeflow", "resources": ["ns.yaml", "svc.yaml"]}],
      "app/ns.yaml": [namespace("kubeflow")], "app/svc.yaml": [SERVICE]}, False),
    # Not safe: a json6902 target that names the namespace would no longer match.
    ({"app/kustomization.yaml": [{"namespace": "kubeflow", "resources": ["ns.yaml"],
                                  "patchesJson6902": [{"target": {"kind": "Service", "namespace": "kubeflow"}}]}],
      "app/ns.yaml": [namespace("other")]}, False),
    # Unknown (remote, or outside the tree) counts as possibly holding a Namespace: converted as before.
    ({"app/kustomization.yaml": [{"namespace": "kubeflow", "resources": ["github.com/org/repo//base?ref=v1"]}]},
     True),
    ({"app/kustomization.yaml": [{"namespace": "kubeflow", "resources": ["../../elsewhere"]}]}, True),
    # Nothing to convert without a namespace.
    ({"app/kustomization.yaml": [{"resources": ["ns.yaml"]}], "app/ns.yaml": [namespace("other")]}, False),
])
def test_conversion_only_where_needed_and_safe(tmp_path, files, expected):
    write(tmp_path, files)
    assert decide(tmp_path) is expected


def test_a_cycle_reads_as_unknown(tmp_path):
    write(tmp_path, {"app/kustomization.yaml": [{"namespace": "kubeflow", "resources": ["../loop"]}],
                     "loop/kustomization.yaml": [{"resources": ["../app"]}]})
    assert decide(tmp_path) is True


@pytest.mark.parametrize(("field", "value"), [
    ("replacements", [{"source": {"kind": "Service"}}]), ("components", ["../c"]), ("labels", [{"pairs": {}}]),
    ("sortOptions", {"order": "legacy"}), ("kind", "Component")])
def test_a_tree_using_anything_newer_than_kustomize_3_2_was_written_for_v5(field, value):
    v3_era = [{"namespace": "kubeflow", "resources": ["a.yaml"], "patches": [{"path": "p.yaml"}], "vars": []}]
    assert written_for_v3(v3_era)
    assert not written_for_v3(v3_era + [{"resources": ["b.yaml"], field: value}])


def test_only_what_the_entry_points_read_decides_the_era_and_gets_rewritten(tmp_path):
    write(tmp_path, {"app/kustomization.yaml": [{"namespace": "kubeflow", "resources": ["../base"]}],
                     "base/kustomization.yaml": [{"namespace": "istio-system", "resources": ["ns.yaml"]}],
                     "base/ns.yaml": [namespace("knative-serving")],
                     "modern/kustomization.yaml": [{"namespace": "x", "replacements": [], "resources": ["ns.yaml"]}],
                     "modern/ns.yaml": [namespace("y")]})
    tree = KustomizationTree(tmp_path)
    assert [path.name for path in tree.reachable([tmp_path / "app"])] == ["app", "base"]
    assert [path.name for path in to_rewrite(tree, tree.reachable([tmp_path / "app"]))] == ["app", "base"]
    assert to_rewrite(tree, tree.everywhere()) == []
    assert to_rewrite(tree, tree.reachable([tmp_path / "modern"])) == []
