"""Renders in a child process under limits: a bomb, a huge file, a hang, a memory or CPU hog and a crash each fail
that render with the limit named, never the calling process; a real Kubeflow stack still renders."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kfdef_operator.api.kfdef import KfDef, parse_kfdef
from kfdef_operator.build import forkserver, isolated
from kfdef_operator.build.forkserver import ForkServer
from kfdef_operator.build.isolated import IsolatedRender, RenderLimits
from kfdef_operator.build.kustomize import PINNED_VERSION
from kfdef_operator.build.render import RenderError
from kfdef_operator.source.resolve import ResolvedSource
from tests.kube import wait_for
from tests.unit.conftest import STACKS
from tests.unit.test_interrupt import REASON, interrupted_on_a_thread
from tests.unit.test_kustomize import fake_helper


def kfdef_of(path: str = "pkg") -> KfDef:
    return parse_kfdef({"metadata": {"name": "kf", "namespace": "tenant"}, "spec": {
        "repos": [{"name": "manifests", "uri": "/unused"}],
        "applications": [{"name": "app", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": path}}}]}})


def package(tmp_path: Path, kustomization: str | dict, *, legacy: bool = False, **files: str
            ) -> dict[str, ResolvedSource]:
    """A repository with the package ``pkg``: a plain entry point, or kfctl's ``base/`` layout (``legacy``)."""
    root = tmp_path / "repo"
    directory = root / "pkg" / "base" if legacy else root / "pkg"
    directory.mkdir(parents=True)
    (directory / "kustomization.yaml").write_text(
        kustomization if isinstance(kustomization, str) else yaml.safe_dump(kustomization))
    for name, text in files.items():
        (directory / name).write_text(text)
    return {"manifests": ResolvedSource("manifests", str(root), root, "r1")}


CONFIG_MAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '1'}\n"


def small_limits(**changes) -> RenderLimits:
    values = {"wall_seconds": 60.0, "cpu_seconds": 60, "memory_bytes": 1024 ** 3, "file_bytes": 64 * 1024 ** 2}
    return RenderLimits(**{**values, **changes})


@pytest.mark.kustomize
def test_a_render_in_the_child_returns_the_objects_and_progress(tmp_path):
    progress = []
    [app] = IsolatedRender()(kfdef_of(), package(tmp_path, {"resources": ["cm.yaml"]}, **{"cm.yaml": CONFIG_MAP}),
                             tmp_path / "work", progress=progress.append)
    assert (app.name, app.mode, [o["metadata"]["name"] for o in app.objects]) == ("app", "plain", ["c"])
    assert [p.name for p in progress] == ["app"]


@pytest.mark.kustomize
def test_a_nested_bracket_bomb_fails_only_its_render(tmp_path):
    sources = package(tmp_path, "resources: " + "[" * 60_000 + "]" * 60_000 + "\n")
    with pytest.raises(RenderError, match=r"^application 'app': refused to build: manifests:pkg/kustomization.yaml: "
                                          r"cannot be checked: .*nest"):
        IsolatedRender()(kfdef_of(), sources, tmp_path / "work")


@pytest.mark.kustomize
@pytest.mark.parametrize("legacy", [False, True], ids=["built in place", "copied first"])
def test_a_huge_file_fails_with_the_limit_named(tmp_path, legacy):
    sources = package(tmp_path, {"resources": ["huge.yaml"]}, legacy=legacy)
    with open(sources["manifests"].local_path / "pkg" / ("base" if legacy else "") / "huge.yaml", "wb") as huge:
        huge.truncate(300 * 1024 ** 2)  # sparse: no disk used
    expected = (r"cannot copy manifests:pkg/base/huge.yaml: file too large: exceeded the 256 MiB file-size limit "
                r"\(KFDEF_RENDER_FILE_SIZE\)" if legacy else r"refused to build: manifests:pkg/kustomization.yaml: "
                r"resources\[0\] 'huge.yaml' is 314572800 bytes, over the 268435456-byte limit per file")
    with pytest.raises(RenderError, match=f"^application 'app': {expected}$"):
        IsolatedRender()(kfdef_of(), sources, tmp_path / "work")


@pytest.mark.kustomize
def test_rendered_objects_over_the_file_size_limit_fail_with_the_limit_named(tmp_path):
    """Small files, a large answer: one 100 kB file put into ConfigMaps five times."""
    generators = [{"name": f"c{i}", "files": ["blob.txt"]} for i in range(5)]
    sources = package(tmp_path, {"configMapGenerator": generators}, **{"blob.txt": "x" * 100_000})
    with pytest.raises(RenderError, match=r"^render of KfDef tenant/kf failed: the rendered objects exceeded the "
                                          r"262144 bytes file-size limit \(KFDEF_RENDER_FILE_SIZE\)$"):
        IsolatedRender(limits=small_limits(file_bytes=256 * 1024))(kfdef_of(), sources, tmp_path / "work")


def test_a_hang_is_killed_at_the_wall_time_limit_with_everything_it_started(tmp_path, monkeypatch):
    pid_file = tmp_path / "grandchild.pid"
    hang = fake_helper(tmp_path / "hang", f"sleep 600 & echo $! > {pid_file}\nexec sleep 600")
    monkeypatch.setenv("KFDEF_RENDER_HELPER", str(hang))
    started = time.monotonic()
    with pytest.raises(RenderError, match=r"^render of KfDef tenant/kf killed: exceeded the 2 s wall-time limit "
                                          r"\(KFDEF_RENDER_TIMEOUT\)$"):
        IsolatedRender(limits=small_limits(wall_seconds=2))(kfdef_of(), package(tmp_path, {}), tmp_path / "work")
    assert time.monotonic() - started < 10
    grandchild = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        for _ in range(100):  # killed with its process group; reaped by init shortly after
            os.kill(grandchild, 0)
            time.sleep(0.05)


def test_an_interrupted_render_is_killed_at_once_with_everything_it_started(tmp_path, monkeypatch):
    """Issue 39, item 1: a deleted or changed KfDef's render ran on to its wall-time limit."""
    pid_file = tmp_path / "grandchild.pid"
    monkeypatch.setenv("KFDEF_RENDER_HELPER", str(fake_helper(tmp_path / "hang", f"sleep 600 & echo $! > {pid_file}"
                                                                                 "\nexec sleep 600")))
    raised, took = interrupted_on_a_thread(
        lambda interrupt: IsolatedRender(limits=small_limits())(kfdef_of(), package(tmp_path, {}), tmp_path / "work",
                                                                interrupt=interrupt),
        ready=lambda: pid_file.exists() and bool(pid_file.read_text().strip()))
    assert [str(e) for e in raised] == [f"render of KfDef tenant/kf killed: interrupted: {REASON}"] and took < 5
    with pytest.raises(ProcessLookupError):
        for _ in range(100):
            os.kill(int(pid_file.read_text()), 0)
            time.sleep(0.05)


@pytest.mark.kustomize
def test_a_memory_bomb_fails_with_the_memory_limit_named(tmp_path):
    """The real kustomize asked to put one 1 MiB file into a ConfigMap 400 times."""
    files = [f"k{i}=blob.txt" for i in range(400)]
    sources = package(tmp_path, {"configMapGenerator": [{"name": "bomb", "files": files}]},
                      **{"blob.txt": "x" * 1024 ** 2})
    with pytest.raises(RenderError, match=r"application 'app': kustomize build .* \(out of memory\)\nfatal error: "
                                          r".*: exceeded the 256 MiB memory limit per process \(KFDEF_RENDER_MEMORY\)"):
        IsolatedRender(limits=small_limits(memory_bytes=256 * 1024 ** 2))(kfdef_of(), sources, tmp_path / "work")


def test_a_cpu_hog_fails_with_the_cpu_limit_named(tmp_path, monkeypatch):
    monkeypatch.setenv("KFDEF_RENDER_HELPER", str(fake_helper(tmp_path / "spin", "while :; do :; done")))
    with pytest.raises(RenderError, match=r"killed by SIGXCPU.*: exceeded the 1 s CPU-time limit per process "
                                          r"\(KFDEF_RENDER_CPU_SECONDS\)"):
        IsolatedRender(limits=small_limits(cpu_seconds=1))(kfdef_of(), package(tmp_path, {}), tmp_path / "work")


def test_a_crash_of_the_render_process_fails_only_that_render(tmp_path, monkeypatch):
    monkeypatch.setenv("KFDEF_RENDER_HELPER", str(fake_helper(tmp_path / "crash", "kill -SEGV $PPID; sleep 5")))
    with pytest.raises(RenderError, match=r"^render of KfDef tenant/kf failed: the render process crashed with "
                                          r"SIGSEGV"):
        IsolatedRender()(kfdef_of(), package(tmp_path, {}), tmp_path / "work")


def test_the_render_process_has_none_of_the_operators_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    monkeypatch.setenv("KUBECONFIG", "/etc/operator/kubeconfig")
    seen = tmp_path / "parent-environ"
    spy = fake_helper(tmp_path / "spy", f"cat /proc/$PPID/environ > {seen}; echo '{{\"objects\":[]}}'")
    monkeypatch.setenv("KFDEF_RENDER_HELPER", str(spy))
    IsolatedRender()(kfdef_of(), package(tmp_path, {}), tmp_path / "work")
    environ = dict(item.split("=", 1) for item in seen.read_text().split("\0") if item)
    assert set(environ) == {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE"}


@pytest.mark.parametrize("variable, value", [("KFDEF_RENDER_MEMORY", "lots"), ("KFDEF_RENDER_TIMEOUT", "-1")])
def test_bad_limit_settings_are_named(variable, value):
    with pytest.raises(ValueError, match=variable):
        RenderLimits.from_env({variable: value})
    assert RenderLimits.from_env({"KFDEF_RENDER_MEMORY": "512Mi"}).memory_bytes == 512 * 1024 ** 2


@pytest.mark.kustomize
def test_kubeflow_v1_2_still_renders_isolated(kubeflow_v1_2_source, tmp_path):
    """kfctl's v1.2.0 stacks KfDef (its repo unpacked from the release tarball), rendered as the operator does."""
    body = yaml.safe_load((STACKS / "kfdefs" / "kfctl_k8s_istio.v1.2.0.yaml").read_text())
    body["metadata"]["name"] = "kubeflow"
    rendered = IsolatedRender()(parse_kfdef(body), {"manifests": kubeflow_v1_2_source}, tmp_path / "work")
    assert len(rendered) == 16 and sum(len(a.objects) for a in rendered) == 565
    assert PINNED_VERSION == "v5.8.2"



def test_the_render_process_imports_nothing_of_fetching():
    """Every render starts a Python process: its imports are on the critical path of every render (the fetch
    layer's HTTP and git clients cost about half a second of CPU there, for nothing)."""
    probe = ("import sys, kfdef_operator.build.isolated; "
             "print(' '.join(m for m in ('requests', 'git', 'kfdef_operator.source.resolve') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}).stdout
    assert loaded.split() == []


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_renders_are_forked_by_one_fork_server_not_started_as_interpreters(tmp_path, monkeypatch):
    """A new interpreter per render cost about 0.2 s of CPU in imports; each render is now a fork of one server."""
    parents = tmp_path / "parents"
    spy = fake_helper(tmp_path / "spy", f"cut -d' ' -f4 /proc/$PPID/stat >> {parents}; echo '{{\"objects\":[]}}'")
    monkeypatch.setenv("KFDEF_RENDER_HELPER", str(spy))
    for attempt in range(3):
        IsolatedRender()(kfdef_of(), package(tmp_path / str(attempt), {}), tmp_path / "work")
    [server] = set(parents.read_text().split())
    assert int(server) == isolated._FORK_SERVER.pid != os.getpid()
    assert "kfdef_operator.build.forkserver" in Path(f"/proc/{server}/cmdline").read_text()


def test_a_render_fails_clearly_when_the_fork_server_dies_and_the_next_render_starts_a_new_one(tmp_path,
                                                                                              monkeypatch):
    """The helper kills the fork server (only if its render's parent is one): that render fails, naming the server;
    the render process dies with the server; the next render works."""
    render_pid = tmp_path / "render.pid"
    killer = fake_helper(tmp_path / "killer", f"""echo $PPID > {render_pid}
server=$(cut -d' ' -f4 /proc/$PPID/stat)
if tr '\\0' ' ' < /proc/$server/cmdline | grep -q kfdef_operator.build.forkserver; then kill -KILL $server; fi
sleep 1; echo '{{"objects":[]}}'""")
    monkeypatch.setenv("KFDEF_RENDER_HELPER", str(killer))
    with pytest.raises(RenderError, match=r"^render of KfDef tenant/kf failed: the render fork server stopped during "
                                          r"the render"):
        IsolatedRender()(kfdef_of(), package(tmp_path / "a", {}), tmp_path / "work")
    wait_for(lambda: _gone(int(render_pid.read_text())), timeout=10, what="the render process gone with the server")
    monkeypatch.setenv("KFDEF_RENDER_HELPER", str(fake_helper(tmp_path / "ok", "echo '{\"objects\":[]}'")))
    [app] = IsolatedRender()(kfdef_of(), package(tmp_path / "b", {}), tmp_path / "work")
    assert app.objects == []


def test_the_fork_server_stops_when_no_render_came_for_its_idle_time(tmp_path, monkeypatch):
    monkeypatch.setattr(isolated, "_FORK_SERVER", ForkServer(isolated._environment(tmp_path), isolated.RENDER_ENTRY,
                                                                idle_seconds=0.3))
    monkeypatch.setenv("KFDEF_RENDER_HELPER", str(fake_helper(tmp_path / "ok", "echo '{\"objects\":[]}'")))
    IsolatedRender()(kfdef_of(), package(tmp_path, {}), tmp_path / "work")
    server = isolated._FORK_SERVER.pid
    assert server is not None
    wait_for(lambda: isolated._FORK_SERVER.pid is None and _gone(server), timeout=10, what="the idle server gone")


def test_a_render_the_fork_server_cannot_watch_is_stopped_and_the_reason_answered(tmp_path, monkeypatch):
    """Without pidfd_open (Linux before 5.3) the server could not see a forked render end: it stops that render at
    once and answers why, instead of leaving it running unwatched."""
    forked, fork = [], os.fork

    def recording_fork() -> int:
        pid = fork()
        if pid:
            forked.append(pid)
        return pid

    def no_pidfd(pid: int) -> int:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(os, "fork", recording_fork)
    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    operator_end, server_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    stdio = [os.open(os.devnull, os.O_RDWR) for _ in range(3)]
    children: dict[int, int] = {}
    try:  # the render's cwd is missing, so a render left running would only exit by itself
        forkserver._spawn(server_end, {"spawn": 7, "cwd": str(tmp_path / "missing"), "env": {}}, stdio, children,
                          lambda: 0)
        answer = json.loads(operator_end.recv(65536))
    finally:
        for descriptor in stdio:
            os.close(descriptor)
        operator_end.close()
        server_end.close()
    assert answer["spawned"] == 7 and "pid" not in answer
    assert "pidfd_open failed" in answer["error"] and "needs Linux 5.3 or later" in answer["error"]
    assert children == {}
    [pid] = forked
    with pytest.raises(ChildProcessError):  # reaped by the server already, not left behind
        os.waitpid(pid, os.WNOHANG)
