"""The kustomize wrapper: which binary (pinned, never whatever is on PATH), the scrubbed environment it runs in,
real builds with both load restrictors, errors with stderr and the limit hit, timeouts, parsing."""

from __future__ import annotations

import base64
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kfdef_operator.build import kustomize
from kfdef_operator.build.kustomize import (
    PINNED_VERSION,
    KustomizeBinary,
    KustomizeError,
    build,
    find_kustomize,
    parse_objects,
)

MANIFESTS = Path(__file__).parent.parent / "fixtures" / "manifests"


def executable(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


def fake_kustomize(path: Path, build_script: str = "exit 0", version: str = PINNED_VERSION) -> Path:
    """A stand-in binary for testing the wrapper's own handling: answers ``version`` and runs ``build_script``."""
    return executable(path, f'#!/bin/sh\nif [ "$1" = version ]; then echo {version}; exit 0; fi\n{build_script}\n')


def binary_of(path: Path) -> KustomizeBinary:
    return KustomizeBinary(path, PINNED_VERSION, "test")


@pytest.fixture
def pinned() -> KustomizeBinary:
    return find_kustomize()


def test_lookup_takes_the_explicit_binary_then_the_pinned_one_and_never_path(tmp_path):
    explicit = fake_kustomize(tmp_path / "custom" / "my-kustomize", version="v5.4.3")
    bin_dir = fake_kustomize(tmp_path / "k8sbin" / "kustomize").parent
    cache = tmp_path / "cache"
    cached = fake_kustomize(cache / "kfdef-operator" / f"k8sbin-x-kustomize{PINNED_VERSION[1:]}-abc" / "kustomize")
    on_path = fake_kustomize(tmp_path / "path" / "kustomize").parent
    fake_kustomize(on_path / "kubectl")
    found = find_kustomize({"KFDEF_KUSTOMIZE": str(explicit), "KFDEF_K8SBIN": str(bin_dir), "PATH": str(on_path)})
    assert (found.path, found.version, found.origin) == (explicit, "v5.4.3", "set by KFDEF_KUSTOMIZE")
    assert "the tested version is v5.8.2" in found.describe()
    assert find_kustomize({"KFDEF_K8SBIN": str(bin_dir), "XDG_CACHE_HOME": str(cache)}).path == bin_dir / "kustomize"
    from_cache = find_kustomize({"XDG_CACHE_HOME": str(cache), "PATH": str(on_path)})
    assert from_cache.path == cached and from_cache.origin == "pinned, from the control-plane build cache"
    with pytest.raises(KustomizeError, match="no kustomize found: set KFDEF_KUSTOMIZE .* kubectl on PATH are not used"):
        find_kustomize({"XDG_CACHE_HOME": str(tmp_path / "empty"), "PATH": str(on_path)})
    with pytest.raises(KustomizeError, match="is not an executable file"):
        find_kustomize({"KFDEF_KUSTOMIZE": str(tmp_path / "missing")})
    with pytest.raises(KustomizeError, match="version` exited with 1; is it kustomize"):
        find_kustomize({"KFDEF_KUSTOMIZE": str(executable(tmp_path / "kubectl", "#!/bin/sh\nexit 1\n"))})


def test_the_tests_and_the_operator_use_the_pinned_version(pinned):
    assert pinned.version == PINNED_VERSION and "pinned" in pinned.origin, pinned.describe()


def test_kustomize_gets_none_of_the_operators_environment(tmp_path, monkeypatch):
    """Credentials, kubeconfig, proxies and cloud settings of the operator never reach kustomize."""
    secrets = {"KUBECONFIG": "/etc/operator/kubeconfig", "AWS_SECRET_ACCESS_KEY": "aws-secret",
               "HTTPS_PROXY": "http://user:proxy-password@proxy:3128", "GOOGLE_APPLICATION_CREDENTIALS": "/gcp.json",
               "KFDEF_CA_BUNDLE": "/ca.pem", "GIT_ASKPASS": "/bin/askpass", "KUSTOMIZE_PLUGIN_HOME": "/plugins"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    dump_env = 'printf "kind: ConfigMap\\nmetadata: {name: env}\\ndata: {env: %s}\\n" "$(env | base64 -w0)"'
    [config_map] = build(tmp_path, binary=binary_of(fake_kustomize(tmp_path / "k", dump_env)), home=tmp_path / "h")
    seen = dict(line.split("=", 1) for line in base64.b64decode(config_map["data"]["env"]).decode().splitlines())
    assert not set(secrets) & set(seen), f"leaked: {set(secrets) & set(seen)}"
    assert not any(value in text for value in secrets.values() for text in seen.values())
    assert seen["HOME"] == seen["TMPDIR"] == str(tmp_path / "h") and seen["PATH"] == kustomize.MINIMAL_PATH
    assert set(seen) <= {"PATH", "HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "LANG", "GIT_TERMINAL_PROMPT",
                         "GIT_CONFIG_NOSYSTEM", "GOGC", "GOMEMLIMIT", "PWD", "SHLVL", "_"}  # last three: shell
    assert seen["GOGC"] == kustomize.GO_GC_PERCENT


@pytest.mark.parametrize(("render_limit", "expected"), [(1 << 30, kustomize.GO_MEMORY_LIMIT), (1 << 28, 1 << 27)])
def test_go_memory_limit_stays_within_the_render_memory_limit(render_limit, expected):
    """Inside a render (RLIMIT_DATA) kustomize's garbage collector keeps its heap under 256 MiB, or under half the
    render's memory limit when that is lower."""
    limited = subprocess.run([sys.executable, "-c", "from kfdef_operator.build import kustomize; "
                              "print(kustomize.scrubbed_environment(__import__('pathlib').Path('/h'))['GOMEMLIMIT'])"],
                             capture_output=True, text=True, check=True,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_DATA, (render_limit, render_limit)))
    assert int(limited.stdout) == expected


def test_build_returns_objects_of_a_real_kustomization(pinned, tmp_path):
    objects = build(MANIFESTS / "application" / "v3", binary=pinned, home=tmp_path)
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("CustomResourceDefinition", "applications.app.k8s.io"), ("StatefulSet", "application-controller")]


def test_root_only_refuses_files_outside_the_root_and_none_allows_them(pinned, tmp_path):
    stack = MANIFESTS / "stacks" / "generic" / "application" / "kubeflow-apps"
    with pytest.raises(KustomizeError, match="security; file .* is not in or below"):
        build(stack, binary=pinned, home=tmp_path)
    objects = build(stack, binary=pinned, home=tmp_path, load_restrictor="LoadRestrictionsNone")
    assert next(o for o in objects if o["kind"] == "Deployment")["spec"]["replicas"] == 2


def test_failure_carries_stderr_tail_and_application(pinned, tmp_path):
    with pytest.raises(KustomizeError) as caught:
        build(MANIFESTS / "broken" / "base", binary=pinned, home=tmp_path, application="broken")
    assert caught.value.application == "broken" and caught.value.limit is None
    assert "does-not-exist.yaml" in caught.value.stderr_tail
    assert "application 'broken'" in str(caught.value)


@pytest.mark.parametrize("script, limit", [
    ('echo "fatal error: runtime: out of memory" >&2; exit 2', "memory"),
    (f"kill -{signal.SIGXCPU.name[3:]} $$", "cpu"),
    (f"kill -{signal.SIGXFSZ.name[3:]} $$", "file size"),
])
def test_a_kustomize_stopped_by_a_resource_limit_says_which(tmp_path, script, limit):
    with pytest.raises(KustomizeError) as caught:
        build(tmp_path, binary=binary_of(fake_kustomize(tmp_path / "k", script)), home=tmp_path / "h")
    assert caught.value.limit == limit


def test_timeout_is_reported(tmp_path):
    slow = fake_kustomize(tmp_path / "slow-kustomize", "echo starting >&2\nexec sleep 30")
    with pytest.raises(KustomizeError, match=r"timed out after 0.3s"):
        build(tmp_path, binary=binary_of(slow), home=tmp_path / "h", timeout=0.3)


def test_parse_skips_empty_documents_and_refuses_non_objects_and_deep_nesting():
    assert parse_objects("---\n---\nkind: A\n---\n\n", path=Path(".")) == [{"kind": "A"}]
    with pytest.raises(KustomizeError, match="document 1 .* list"):
        parse_objects("kind: A\n---\n- 1\n", path=Path("."))
    with pytest.raises(KustomizeError, match="not valid YAML"):
        parse_objects("a: [\n", path=Path("."))
    with pytest.raises(KustomizeError, match="nests deeper than 128 levels"):
        parse_objects("kind: A\nspec: " + "[" * 200 + "]" * 200 + "\n", path=Path("."))


def test_uses_libyaml_loader_when_available():
    import yaml

    assert kustomize.SafeLoader is getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    assert os.access(find_kustomize().path, os.X_OK)
