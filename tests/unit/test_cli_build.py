"""``kfdef-operator build``: output stream or directory, summary, progress, one-line errors and exit codes."""

from __future__ import annotations

import argparse
import io
import shutil
from pathlib import Path

import pytest
import yaml

from kfdef_operator.cli import main as cli

KFDEFS = Path(__file__).parent.parent / "fixtures" / "kfdefs"


@pytest.fixture
def run(tmp_path, capsys):
    def invoke(*argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv[:1], *argv[1:], "--cache-dir", str(tmp_path / "cache")] if argv[:1] == ("build",)
                        else list(argv))
        out, err = capsys.readouterr()
        return code, out, err
    return invoke


def test_build_writes_one_yaml_stream_and_a_summary(run):
    code, out, err = run("build", str(KFDEFS / "local-legacy.yaml"))
    assert code == 0, err
    objects = list(yaml.safe_load_all(out))
    assert len(objects) == 23
    assert objects[0] == {"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"labels": {"istio-injection": "disabled"}, "name": "istio-system"}}
    assert "23 objects in 6 applications" in err
    assert "jupyter-web-app   legacy        9" in err
    assert "Namespace 3" in err and "istio-system 1" in err
    assert "[1/6]" not in err  # no progress when stderr is not a terminal


def test_build_to_a_directory_writes_one_file_per_application_in_order(run, tmp_path):
    code, out, err = run("build", str(KFDEFS / "local-stacks.yaml"), "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert out == ""
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["1-istio-stack.yaml", "2-kubeflow-apps.yaml"]
    kinds = [o["kind"] for o in yaml.safe_load_all((tmp_path / "out" / files[1]).read_text())]
    assert sorted(kinds) == ["ConfigMap", "Deployment", "ServiceAccount"]


def test_missing_name_needs_the_name_option(run):
    code, out, err = run("build", str(KFDEFS / "no-name.yaml"))
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and err.startswith("error: invalid KfDef: metadata.name: is required")
    code, _, err = run("build", str(KFDEFS / "no-name.yaml"), "--name", "kubeflow")
    assert code == 0, err


@pytest.mark.parametrize("content, message", [
    (None, "error: cannot read"),
    ("a: [", "is not valid YAML"),
    ("kind: Other\n", "exactly one KfDef document, found 0"),
    ("kind: KfDef\nmetadata: {name: k, namespace: n}\nspec: {repos: [{name: r, uri: 'ftp://x'}]}\n",
     "spec.repos[0].uri: unsupported URI scheme 'ftp'"),
])
def test_bad_input_exits_2_with_one_line(run, tmp_path, content, message):
    path = tmp_path / "kfdef.yaml"
    if content is not None:
        path.write_text(content)
    code, out, err = run("build", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err
    assert "Traceback" not in err


def test_render_failure_exits_1_with_one_line(run, tmp_path):
    obj = yaml.safe_load((KFDEFS / "local-legacy.yaml").read_text())
    obj["spec"]["repos"][0]["uri"] = str(KFDEFS.parent / "manifests")
    obj["spec"]["applications"][2]["kustomizeConfig"]["overlays"] = ["no-such-overlay"]
    path = tmp_path / "kfdef.yaml"
    path.write_text(yaml.safe_dump(obj))
    code, out, err = run("build", str(path))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "error: application 'jupyter-web-app': overlay 'no-such-overlay'" in err


def test_usage_error_is_one_line(run):
    code, _, err = run("build")
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: the following arguments are required")


def test_progress_is_shown_on_a_terminal(tmp_path, monkeypatch, capsys):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert cli.main(["build", str(KFDEFS / "local-stacks.yaml"), "--cache-dir", str(tmp_path)]) == 0
    assert "resolving 1 repo(s)..." in terminal.getvalue()
    assert "[2/2]" in terminal.getvalue()


def test_subcommands_register_through_one_function_each(monkeypatch, capsys):
    def register_hello(subparsers: argparse._SubParsersAction) -> None:
        parser = subparsers.add_parser("hello")
        parser.set_defaults(handler=lambda args: 7)

    monkeypatch.setattr(cli, "SUBCOMMANDS", [*cli.SUBCOMMANDS, register_hello])
    assert cli.main(["hello"]) == 7


def test_default_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cli.default_cache_dir() == tmp_path / "kfdef-operator" / "sources"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cli.default_cache_dir() == Path.home() / ".cache" / "kfdef-operator" / "sources"


def test_relative_repo_paths_are_relative_to_the_kfdef_file(run, tmp_path, monkeypatch):
    shutil.copy(KFDEFS / "no-name.yaml", tmp_path / "kfdef.yaml")
    shutil.copytree(KFDEFS.parent / "manifests" / "argo", tmp_path.parent / "manifests" / "argo", dirs_exist_ok=True)
    monkeypatch.chdir("/")
    code, out, err = run("build", str(tmp_path / "kfdef.yaml"), "--name", "kf")
    assert code == 0, err
    assert any(o["kind"] == "Deployment" for o in yaml.safe_load_all(out))


def test_build_says_which_kustomize_rendered(run):
    code, _, err = run("build", str(KFDEFS / "local-legacy.yaml"))
    assert code == 0, err
    assert "rendered with kustomize v5.8.2 (" in err and "pinned" in err and "remote bases refused" in err


def test_remote_bases_are_refused_unless_the_flag_allows_them(run, tmp_path):
    repo = tmp_path / "repo" / "pkg"
    repo.mkdir(parents=True)
    (repo / "kustomization.yaml").write_text("resources:\n- https://127.0.0.1:9/remote.yaml\n")
    kfdef = tmp_path / "kfdef.yaml"
    kfdef.write_text(yaml.safe_dump({"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef",
                                     "metadata": {"name": "k", "namespace": "n"}, "spec": {
                                         "repos": [{"name": "r", "uri": str(tmp_path / "repo")}],
                                         "applications": [{"name": "a", "kustomizeConfig": {
                                             "repoRef": {"name": "r", "path": "pkg"}}}]}}))
    code, _, err = run("build", str(kfdef))
    assert code == 1 and "resources[0] 'https://127.0.0.1:9/remote.yaml' is remote" in err
    code, _, err = run("build", str(kfdef), "--no-remote-bases=false")
    assert code == 1 and "is remote" not in err and "kustomize build" in err  # kustomize tried, and failed
    code, _, err = run("build", str(kfdef), "--no-remote-bases=maybe")
    assert code == 2 and "'maybe' is not true or false" in err
