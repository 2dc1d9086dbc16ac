"""``kfdef-operator build``: output stream, file or directory, summary, progress, one-line errors and exit codes.

Each friction a new user met is a test here, typed as the user typed it (``cli.main`` with the same arguments,
or the installed ``kfdef-operator`` script in a subprocess where a real process matters).
"""

from __future__ import annotations

import argparse
import io
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kfdef_operator.cli import main as cli
from kfdef_operator.cli import rendering

KFDEFS = Path(__file__).parent.parent / "fixtures" / "kfdefs"


@pytest.fixture
def run(tmp_path, capsys):
    def invoke(*argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv[:1], *argv[1:], "--cache-dir", str(tmp_path / "cache")] if argv[:1] == ("build",)
                        else list(argv))
        out, err = capsys.readouterr()
        return code, out, err
    return invoke


@pytest.mark.kustomize
def test_build_writes_one_yaml_stream_and_a_summary(run):
    code, out, err = run("build", str(KFDEFS / "local-legacy.yaml"))
    assert code == 0, err
    objects = list(yaml.safe_load_all(out))
    assert len(objects) == 23
    assert objects[0] == {"apiVersion": "v1", "kind": "Namespace",
                          "metadata": {"labels": {"istio-injection": "disabled"}, "name": "istio-system"}}
    assert "23 objects in 6 applications" in err and "written to stdout" in err
    assert "jupyter-web-app   legacy        9" in err
    assert "Namespace 3" in err and "istio-system 1" in err
    assert "[1/6]" not in err  # no progress when stderr is not a terminal


@pytest.mark.kustomize
def test_build_to_a_directory_writes_one_file_per_application_in_order(run, tmp_path):
    code, out, err = run("build", str(KFDEFS / "local-stacks.yaml"), "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert out == ""
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert files == ["1-istio-stack.yaml", "2-kubeflow-apps.yaml"]
    kinds = [o["kind"] for o in yaml.safe_load_all((tmp_path / "out" / files[1]).read_text())]
    assert sorted(kinds) == ["ConfigMap", "Deployment", "ServiceAccount"]


@pytest.mark.kustomize
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


@pytest.mark.kustomize
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


@pytest.mark.kustomize
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
    assert rendering.default_cache_dir() == tmp_path / "kfdef-operator" / "sources"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert rendering.default_cache_dir() == Path.home() / ".cache" / "kfdef-operator" / "sources"


@pytest.mark.kustomize
def test_relative_repo_paths_are_relative_to_the_kfdef_file(run, tmp_path, monkeypatch):
    shutil.copy(KFDEFS / "no-name.yaml", tmp_path / "kfdef.yaml")
    shutil.copytree(KFDEFS.parent / "manifests" / "argo", tmp_path.parent / "manifests" / "argo", dirs_exist_ok=True)
    monkeypatch.chdir("/")
    code, out, err = run("build", str(tmp_path / "kfdef.yaml"), "--name", "kf")
    assert code == 0, err
    assert any(o["kind"] == "Deployment" for o in yaml.safe_load_all(out))


@pytest.mark.kustomize
def test_build_says_which_kustomize_rendered(run):
    code, _, err = run("build", str(KFDEFS / "local-legacy.yaml"))
    assert code == 0, err
    assert "rendered with kustomize v5.8.2 through kfdef-render (" in err and "remote bases refused" in err
    assert "network refused in process" in err  # how the render helper was confined


@pytest.mark.kustomize
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


# --- as strict as the API server: the CRD's own schema, then the operator's rules -------------------------------

DEMO = Path(__file__).parents[2] / "kfdefs" / "demo" / "kfdef.yaml"


def demo_with(tmp_path: Path, edit) -> Path:
    """The demo KfDef after ``edit(obj)``, next to a copy of its manifests (its repo is a relative path)."""
    obj = yaml.safe_load(DEMO.read_text())
    edit(obj)
    shutil.copytree(DEMO.parent / "manifests", tmp_path / "manifests", dirs_exist_ok=True)
    path = tmp_path / "kfdef.yaml"
    path.write_text(yaml.safe_dump(obj, sort_keys=False))
    return path


def rename(mapping: dict, old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


@pytest.mark.parametrize("edit, message", [
    (lambda o: o.pop("spec"), "spec: Required value"),
    (lambda o: rename(o["spec"], "applications", "aplications"),
     'spec.aplications: unknown field "spec.aplications" (did you mean "applications"?)'),
    (lambda o: rename(o["spec"]["applications"][2]["kustomizeConfig"], "overlays", "overlay"),
     'spec.applications[2].kustomizeConfig.overlay: unknown field "spec.applications[2].kustomizeConfig.overlay" '
     '(did you mean "overlays"?)'),
    (lambda o: o["spec"]["repos"][0].update(branch="main"),
     'spec.repos[0].branch: unknown field "spec.repos[0].branch"'),
    (lambda o: o["spec"]["repos"][0].update(uri=3),
     'spec.repos[0].uri: Invalid value: "integer": must be of type string'),
    (lambda o: o["spec"].update(interval="5 minutes"),
     "spec.interval: Invalid value: \"5 minutes\": should match '^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$'"),
    (lambda o: o["spec"].update(interval="5s"), "spec.interval: 5s is shorter than the minimum of 10s"),
    (lambda o: o["metadata"].update(label={"a": "b"}),
     'metadata.label: unknown field "metadata.label" (did you mean "labels"?)'),
])
def test_what_the_api_server_or_the_operator_refuses_is_refused(run, tmp_path, edit, message):
    code, out, err = run("build", str(demo_with(tmp_path, edit)))
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and err.startswith("error: invalid KfDef: ") and message in err, err


def test_every_problem_is_reported_at_once(run, tmp_path):
    def edit(obj):
        rename(obj["spec"], "repos", "repo")
        obj["spec"]["applications"][0]["name"] = "Not_A_Label"
    code, _, err = run("build", str(demo_with(tmp_path, edit)))
    assert code == 2
    assert 'unknown field "spec.repo"' in err and "'Not_A_Label' is not a DNS-1123 label" in err
    assert "names repo 'manifests', which spec.repos does not list" in err


@pytest.mark.kustomize
def test_missing_namespace_hints_at_the_flag(run, tmp_path):
    path = demo_with(tmp_path, lambda o: o["metadata"].pop("namespace"))
    code, _, err = run("build", str(path))
    assert code == 2 and "metadata.namespace: is required" in err and "or pass --namespace NAMESPACE" in err
    code, out, err = run("build", str(path), "--namespace", "team-a")
    assert code == 0, err
    assert {o["metadata"].get("namespace") for o in yaml.safe_load_all(out)} >= {"team-a"}


@pytest.mark.kustomize
def test_an_empty_application_list_renders_nothing_and_says_so(run, tmp_path):
    code, out, err = run("build", str(demo_with(tmp_path, lambda o: o["spec"].update(applications=[]))))
    assert code == 0 and out == ""
    assert "0 objects in 0 applications" in err and "spec.applications is empty" in err


# --- -o: stdout, a file, a directory; never a traceback ---------------------------------------------------------

@pytest.mark.kustomize
def test_output_to_an_existing_file_or_dev_null_writes_the_stream(run, tmp_path):
    target = tmp_path / "out"
    target.write_text("old content\n")
    code, out, err = run("build", str(DEMO), "-o", str(target))
    assert (code, out) == (0, ""), err
    assert len(list(yaml.safe_load_all(target.read_text()))) == 10 and f"written to {target}" in err
    code, _, err = run("build", str(DEMO), "-o", "/dev/null")
    assert code == 0 and "Traceback" not in err and "written to /dev/null" in err


@pytest.mark.kustomize
def test_output_to_a_new_yaml_path_is_a_file(run, tmp_path):
    code, _, err = run("build", str(DEMO), "-o", str(tmp_path / "rendered.yaml"))
    assert code == 0, err
    assert (tmp_path / "rendered.yaml").is_file()


def test_output_never_overwrites_the_kfdef_file_itself(run, tmp_path):
    path = demo_with(tmp_path, lambda o: None)
    before = path.read_text()
    code, _, err = run("build", str(path), "-o", str(path))
    assert code == 2 and "is the KfDef file itself" in err
    assert path.read_text() == before


@pytest.mark.kustomize
def test_output_directory_holds_exactly_the_last_build(run, tmp_path):
    out = tmp_path / "out"
    assert run("build", str(KFDEFS / "local-legacy.yaml"), "-o", str(out))[0] == 0
    assert len(list(out.iterdir())) == 6
    code, _, err = run("build", str(KFDEFS / "local-stacks.yaml"), "-o", str(out))
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["1-istio-stack.yaml", "2-kubeflow-apps.yaml"]


def test_output_directory_with_other_files_is_refused_and_kept(run, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "1-old.yaml").write_text("mine too")
    code, _, err = run("build", str(DEMO), "-o", str(out))
    assert code == 2 and "refusing to write into a directory holding files build did not write (notes.txt)" in err
    assert sorted(p.name for p in out.iterdir()) == ["1-old.yaml", "notes.txt"]


@pytest.mark.parametrize("target, code, message", [
    ("/etc/hostname/out", 2, "-o /etc/hostname/out: /etc/hostname is not a directory"),
    # these two render before they fail to write
    pytest.param("/proc/version", 1, "cannot write /proc/version: ", marks=pytest.mark.kustomize),
    pytest.param("/dev/full", 1, "cannot write /dev/full: No space left on device", marks=pytest.mark.kustomize),
])
def test_unusable_outputs_are_one_line(run, target, code, message):
    result, out, err = run("build", str(DEMO), "-o", target)
    assert (result, out) == (code, "")
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err and "Traceback" not in err


@pytest.mark.kustomize
def test_a_closed_pipe_ends_quietly():
    # kfdef-operator build kfdefs/demo/kfdef.yaml | head -1
    done = subprocess.run(f"{shlex.quote(sys.executable)} -m kfdef_operator build {DEMO} | head -1", shell=True,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout == "---\n"
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


def test_an_unexpected_error_is_one_line_that_says_it_is_a_bug(run, monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero")
    monkeypatch.setattr("kfdef_operator.cli.build.render_kfdef", broken)
    code, _, err = run("build", str(DEMO))
    assert code == 1 and err.count("\n") == 1
    assert err.startswith("error: unexpected ZeroDivisionError: division by zero (a bug in kfdef-operator")


@pytest.mark.parametrize("command", ["build", "diff", "run", "uninstall"])
def test_every_help_lists_the_exit_codes(command, capsys):
    assert cli.main([command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "exit codes:" in out and "  2    bad input or usage" in out and "  3    diff:" in out

