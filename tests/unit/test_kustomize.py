"""The render helper's runner: which binary (built here, never whatever is on PATH), the scrubbed environment it runs
in, real builds with both load restrictors inside their roots, errors that show no temporary path, the limit hit,
timeouts, parsing its JSON."""

from __future__ import annotations

import base64
import json
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kfdef_operator.build import kustomize
from kfdef_operator.build.kustomize import (
    PINNED_VERSION,
    KustomizeError,
    RenderHelper,
    build,
    find_render_helper,
    parse_output,
)

MANIFESTS = Path(__file__).parent.parent / "fixtures" / "manifests"
REPO = Path(__file__).resolve().parents[2]


def executable(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


def fake_helper(path: Path, build_script: str = "exit 0", version: str = PINNED_VERSION) -> Path:
    """A stand-in binary for testing the runner's own handling: answers ``version`` and runs ``build_script``."""
    return executable(path, f'#!/bin/sh\nif [ "$1" = version ]; then echo {version} kustomize-api=x; exit 0; fi\n'
                            f'{build_script}\n')


def helper_of(path: Path) -> RenderHelper:
    return RenderHelper(path, PINNED_VERSION, "test")


@pytest.fixture
def pinned() -> RenderHelper:
    return find_render_helper()


def test_lookup_takes_the_explicit_helper_then_the_built_one_and_never_path(tmp_path):
    explicit = fake_helper(tmp_path / "custom" / "my-helper", version="v5.4.3")
    cache = tmp_path / "cache"
    cached = fake_helper(cache / "kfdef-operator" / f"kfdef-render-kustomize{PINNED_VERSION[1:]}-abc" / "kfdef-render")
    on_path = fake_helper(tmp_path / "path" / "kustomize").parent
    fake_helper(on_path / "kfdef-render")
    found = find_render_helper({"KFDEF_RENDER_HELPER": str(explicit), "XDG_CACHE_HOME": str(cache),
                                "PATH": str(on_path)})
    assert (found.path, found.version, found.origin) == (explicit, "v5.4.3", "set by KFDEF_RENDER_HELPER")
    assert "the tested version is v5.8.2" in found.describe()
    from_cache = find_render_helper({"XDG_CACHE_HOME": str(cache), "PATH": str(on_path)})
    assert from_cache.path == cached and from_cache.origin == "built by tools/build-render-helper.sh"
    with pytest.raises(KustomizeError, match="no render helper found: set KFDEF_RENDER_HELPER .* on PATH are not used"):
        find_render_helper({"XDG_CACHE_HOME": str(tmp_path / "empty"), "PATH": str(on_path)})
    with pytest.raises(KustomizeError, match="is not an executable file"):
        find_render_helper({"KFDEF_RENDER_HELPER": str(tmp_path / "missing")})
    with pytest.raises(KustomizeError, match="version` exited with 1; is it kfdef-render"):
        find_render_helper({"KFDEF_RENDER_HELPER": str(executable(tmp_path / "kubectl", "#!/bin/sh\nexit 1\n"))})


@pytest.mark.kustomize
def test_the_tests_and_the_operator_use_the_pinned_version(pinned):
    assert pinned.version == PINNED_VERSION, pinned.describe()


@pytest.mark.kustomize
def test_the_helper_is_built_on_the_api_of_the_pinned_kustomize_cli(pinned):
    """tools/kfdef-render and tools/kustomize require the same kustomize API and kyaml, so the helper renders as
    the CLI the tests compare against."""
    def required(module: str) -> dict[str, str]:
        text = (REPO / "tools" / module / "go.mod").read_text()
        return dict(re.findall(r"(sigs\.k8s\.io/kustomize/(?:api|kyaml)) (v\S+)", text))

    assert required("kfdef-render") == required("kustomize") != {}
    words = subprocess.run([str(pinned.path), "version"], capture_output=True, text=True, check=True).stdout.split()
    assert words[1] == f"kustomize-api={required('kustomize')['sigs.k8s.io/kustomize/api']}"


def test_the_helper_gets_none_of_the_operators_environment(tmp_path, monkeypatch):
    """Credentials, kubeconfig, proxies and cloud settings of the operator never reach the helper."""
    secrets = {"KUBECONFIG": "/etc/operator/kubeconfig", "AWS_SECRET_ACCESS_KEY": "aws-secret",
               "HTTPS_PROXY": "http://user:proxy-password@proxy:3128", "GOOGLE_APPLICATION_CREDENTIALS": "/gcp.json",
               "KFDEF_CA_BUNDLE": "/ca.pem", "GIT_ASKPASS": "/bin/askpass", "KUSTOMIZE_PLUGIN_HOME": "/plugins"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    dump_env = ('printf \'{"objects":[{"kind":"ConfigMap","metadata":{"name":"env"},"data":{"env":"%s"}}]}\' '
                '"$(env | base64 -w0)"')
    output = build(tmp_path, roots={tmp_path: "t:"}, helper=helper_of(fake_helper(tmp_path / "k", dump_env)),
                   home=tmp_path / "h")
    [config_map] = output.objects
    seen = dict(line.split("=", 1) for line in base64.b64decode(config_map["data"]["env"]).decode().splitlines())
    assert not set(secrets) & set(seen), f"leaked: {set(secrets) & set(seen)}"
    assert not any(value in text for value in secrets.values() for text in seen.values())
    assert seen["HOME"] == seen["TMPDIR"] == str(tmp_path / "h") and seen["PATH"] == kustomize.MINIMAL_PATH
    assert set(seen) <= {"PATH", "HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "LANG", "GIT_TERMINAL_PROMPT",
                         "GIT_CONFIG_NOSYSTEM", "GOGC", "GOMEMLIMIT", "PWD", "SHLVL", "_"}  # last three: shell
    assert seen["GOGC"] == kustomize.GO_GC_PERCENT


@pytest.mark.parametrize(("render_limit", "expected"), [(1 << 30, kustomize.GO_MEMORY_LIMIT), (1 << 28, 1 << 27)])
def test_go_memory_limit_stays_within_the_render_memory_limit(render_limit, expected):
    """Inside a render (RLIMIT_DATA) the helper's garbage collector keeps its heap under 256 MiB, or under half the
    render's memory limit when that is lower."""
    limited = subprocess.run([sys.executable, "-c", "from kfdef_operator.build import kustomize; "
                              "print(kustomize.scrubbed_environment(__import__('pathlib').Path('/h'))['GOMEMLIMIT'])"],
                             capture_output=True, text=True, check=True,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_DATA, (render_limit, render_limit)))
    assert int(limited.stdout) == expected


@pytest.mark.kustomize
def test_build_returns_objects_of_a_real_kustomization(pinned, tmp_path):
    root = MANIFESTS / "application" / "v3"
    output = build(root, roots={root: "app:"}, helper=pinned, home=tmp_path)
    assert [(o["kind"], o["metadata"]["name"]) for o in output.objects] == [
        ("CustomResourceDefinition", "applications.app.k8s.io"), ("StatefulSet", "application-controller")]
    assert output.confinement.startswith("network refused in process; ")


@pytest.mark.kustomize
def test_root_only_refuses_files_outside_the_folder_none_allows_them_inside_the_roots(pinned, tmp_path):
    stack = MANIFESTS / "stacks" / "generic" / "application" / "kubeflow-apps"
    repo = MANIFESTS  # the stack reads ../../../../apps/...
    with pytest.raises(KustomizeError, match="security; file .* is not in or below"):
        build(stack, roots={repo: "manifests:"}, helper=pinned, home=tmp_path)
    output = build(stack, roots={repo: "manifests:"}, helper=pinned, home=tmp_path,
                   load_restrictor="LoadRestrictionsNone")
    assert next(o for o in output.objects if o["kind"] == "Deployment")["spec"]["replicas"] == 2
    with pytest.raises(KustomizeError) as outside:
        build(stack, roots={stack.parent.parent: "manifests:stacks/generic/"}, helper=pinned, home=tmp_path,
              load_restrictor="LoadRestrictionsNone")
    assert "is outside the tree the KfDef names" in str(outside.value)


@pytest.mark.kustomize
def test_failure_names_the_error_first_by_repository_paths_without_warnings(pinned, tmp_path):
    root = tmp_path / "work" / "repo"
    (root / "app").mkdir(parents=True)
    (root / "app" / "kustomization.yaml").write_text("commonLabels: {a: b}\nresources: [does-not-exist.yaml]\n")
    with pytest.raises(KustomizeError) as caught:
        build(root / "app", roots={root: "manifests:"}, helper=pinned, home=tmp_path / "h", application="broken")
    error = caught.value
    assert error.application == "broken" and error.limit is None
    assert error.stderr_tail.startswith("Error: ") and "does-not-exist.yaml" in error.stderr_tail
    assert "Warning" not in error.stderr_tail and "deprecated" not in error.stderr_tail
    assert str(tmp_path) not in str(error), str(error)
    assert "application 'broken' (manifests:app)" in str(error)


@pytest.mark.parametrize("script, limit", [
    ('echo "fatal error: runtime: out of memory" >&2; exit 2', "memory"),
    (f"kill -{signal.SIGXCPU.name[3:]} $$", "cpu"),
    (f"kill -{signal.SIGXFSZ.name[3:]} $$", "file size"),
])
def test_a_helper_stopped_by_a_resource_limit_says_which(tmp_path, script, limit):
    with pytest.raises(KustomizeError) as caught:
        build(tmp_path, roots={tmp_path: "t:"}, helper=helper_of(fake_helper(tmp_path / "k", script)),
              home=tmp_path / "h")
    assert caught.value.limit == limit


def test_a_failed_build_is_read_from_the_helpers_answer(tmp_path):
    """Exit code 1: the answer says why and which path the boundary refused; exit code 3: kustomize panicked, and
    the message is the panic, not the goroutine dump after it."""
    kustomization = f"{tmp_path}/kustomization.yaml"
    refused = {"confinement": "c", "notes": [], "objects": None, "error": f"{tmp_path}/app/x.yaml: refused",
               "violation": {"op": "ReadFile", "path": "/etc/passwd", "kustomization": kustomization}}
    script = f"echo '{json.dumps(refused)}'; echo 'Error: {tmp_path}/app/x.yaml: refused' >&2; exit 1"
    with pytest.raises(KustomizeError) as caught:
        build(tmp_path, roots={tmp_path: "t:"}, helper=helper_of(fake_helper(tmp_path / "k", script)),
              home=tmp_path / "h")
    assert caught.value.refusal == kustomize.Refusal("ReadFile", "/etc/passwd", kustomization)
    assert caught.value.stderr_tail == "Error: t:app/x.yaml: refused" and str(tmp_path) not in str(caught.value)
    panicked = {"error": "kustomize panicked: runtime error: index out of range [-1]"}
    script = (f"echo '{json.dumps(panicked)}'; printf 'Error: {panicked['error']}\\ngoroutine 1 [running]:\\n"
              "main.main()\\n' >&2; exit 3")
    with pytest.raises(KustomizeError) as caught:
        build(tmp_path, roots={tmp_path: "t:"}, helper=helper_of(fake_helper(tmp_path / "k", script)),
              home=tmp_path / "h")
    assert "exit code 3 (kustomize panicked)" in str(caught.value) and caught.value.refusal is None
    assert caught.value.stderr_tail == f"Error: {panicked['error']}" and "goroutine" not in str(caught.value)


def test_timeout_is_reported(tmp_path):
    slow = fake_helper(tmp_path / "slow-helper", "echo starting >&2\nexec sleep 30")
    with pytest.raises(KustomizeError, match=r"timed out after 0.3s"):
        build(tmp_path, roots={tmp_path: "t:"}, helper=helper_of(slow), home=tmp_path / "h", timeout=0.3)


def test_parse_refuses_non_objects_bad_json_and_deep_nesting():
    assert parse_output('{"confinement":"c","objects":[{"kind":"A"}]}', path=Path(".")).objects == [{"kind": "A"}]
    with pytest.raises(KustomizeError, match="object 1 .* list"):
        parse_output('{"objects":[{"kind":"A"},[1]]}', path=Path("."))
    with pytest.raises(KustomizeError, match="not valid JSON"):
        parse_output("kind: A\n", path=Path("."))
    with pytest.raises(KustomizeError, match="not a JSON object with a list"):
        parse_output("[]", path=Path("."))
    with pytest.raises(KustomizeError, match="nests deeper than 128 levels"):
        parse_output(json.dumps({"objects": [{"kind": "A", "spec": [[[[[[[[]]]]]]]]}]}).replace(
            "[[[[[[[[]]]]]]]]", "[" * 200 + "]" * 200), path=Path("."))


@pytest.mark.kustomize
def test_paths_are_shown_by_the_names_of_their_roots(tmp_path):
    text = f"security: {tmp_path}/copy/app/x.yaml and {tmp_path}/gen/app and /etc/passwd"
    shown = kustomize.show_paths(text, {tmp_path / "copy": "manifests:", tmp_path / "gen": "(generated for app)/"})
    assert shown == "security: manifests:app/x.yaml and (generated for app)/app and /etc/passwd"
    assert os.access(find_render_helper().path, os.X_OK)
