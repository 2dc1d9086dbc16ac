"""The kustomize wrapper: binary lookup order, real builds, errors with stderr, timeouts, parsing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kfdef_operator.build import kustomize
from kfdef_operator.build.kustomize import KustomizeError, build, kustomize_command, parse_objects

MANIFESTS = Path(__file__).parent.parent / "fixtures" / "manifests"


def executable(path: Path, body: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


def test_lookup_prefers_env_then_kustomize_then_kubectl(tmp_path):
    explicit = executable(tmp_path / "custom" / "my-kustomize")
    kust = executable(tmp_path / "bin1" / "kustomize")
    kubectl = executable(tmp_path / "bin2" / "kubectl")
    path = f"{kust.parent}:{kubectl.parent}"
    assert kustomize_command({"KFDEF_KUSTOMIZE": str(explicit), "PATH": path}) == [str(explicit), "build"]
    assert kustomize_command({"PATH": path}) == [str(kust), "build"]
    assert kustomize_command({"PATH": str(kubectl.parent)}) == [str(kubectl), "kustomize"]
    with pytest.raises(KustomizeError, match="no kustomize found"):
        kustomize_command({"PATH": str(tmp_path / "empty")})
    with pytest.raises(KustomizeError, match="not an executable"):
        kustomize_command({"KFDEF_KUSTOMIZE": str(tmp_path / "missing"), "PATH": path})


def test_build_returns_objects_of_a_real_kustomization():
    objects = build(MANIFESTS / "application" / "v3")
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("CustomResourceDefinition", "applications.app.k8s.io"), ("StatefulSet", "application-controller")]


def test_load_restrictor_none_allows_files_outside_the_root():
    stack = MANIFESTS / "stacks" / "generic" / "application" / "kubeflow-apps"
    with pytest.raises(KustomizeError):
        build(stack)
    deployment = next(o for o in build(stack, load_restrictor_none=True) if o["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2


def test_failure_carries_stderr_tail_and_application(tmp_path):
    with pytest.raises(KustomizeError) as caught:
        build(MANIFESTS / "broken" / "base", application="broken")
    assert caught.value.application == "broken"
    assert "does-not-exist.yaml" in caught.value.stderr_tail
    assert "application 'broken'" in str(caught.value)


def test_timeout_is_reported(tmp_path, monkeypatch):
    slow = executable(tmp_path / "slow-kustomize", "#!/bin/sh\necho starting >&2\nexec sleep 30\n")
    monkeypatch.setenv("KFDEF_KUSTOMIZE", str(slow))
    with pytest.raises(KustomizeError, match=r"timed out after 0.3s"):
        build(tmp_path, timeout=0.3)


def test_parse_skips_empty_documents_and_refuses_non_objects():
    assert parse_objects("---\n---\nkind: A\n---\n\n", path=Path(".")) == [{"kind": "A"}]
    with pytest.raises(KustomizeError, match="document 1 .* list"):
        parse_objects("kind: A\n---\n- 1\n", path=Path("."))
    with pytest.raises(KustomizeError, match="not valid YAML"):
        parse_objects("a: [\n", path=Path("."))


def test_uses_libyaml_loader_when_available():
    import yaml

    assert kustomize.SafeLoader is getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    assert os.access(kustomize_command()[0], os.X_OK)
