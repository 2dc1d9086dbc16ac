"""Shared fixtures: one real local control plane per test session (started lazily); the marks saying what a test
needs, and the guard that makes a test fail when it uses a Go-built binary without saying so."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kfdef_dev.controlplane import ControlPlane

FIXTURES = Path(__file__).parent / "fixtures"

#: Fixtures that start a control plane (every fixture reaching the cluster depends on one of them).
CLUSTER_FIXTURES = frozenset({"control_plane", "plane"})
#: Fixtures that unpack the Kubeflow release archives (tests/unit/conftest.py, tests/releases/conftest.py).
STACKS_FIXTURES = frozenset({"kubeflow_v1_2_source", "release_trees"})
#: How the tests and the product find the Go-built binaries (tools/build-*.sh), besides their cache.
GO_BINARY_SETTINGS = ("KFDEF_K8SBIN", "KFDEF_RENDER_HELPER", "KFDEF_OLM_VALIDATE", "KFDEF_PROMTOOL", "KFDEF_OLM_BIN")
#: The longest test file (the releases deployed on a cluster), started first.
LONGEST = "tests/releases/test_on_cluster.py"


def _go_binary_dirs(environ: dict[str, str]) -> set[Path]:
    """Where the Go-built binaries are: the build cache and the directories the settings name (`make` puts the
    control plane's on PATH)."""
    cache = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kfdef-operator"
    named = [Path(environ[name]) for name in GO_BINARY_SETTINGS if environ.get(name)]
    return {cache, *(path if path.is_dir() else path.parent for path in named)}


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks derived from the fixtures a test uses, so that a new test cannot forget them. A control plane is made
    of Go-built binaries, so ``cluster`` implies ``kustomize``: ``-m "not kustomize"`` needs no Go build at all."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & CLUSTER_FIXTURES:
            item.add_marker(pytest.mark.cluster)
        if used & STACKS_FIXTURES:
            item.add_marker(pytest.mark.stacks)
        if item.get_closest_marker("cluster"):
            item.add_marker(pytest.mark.kustomize)
    # `make test` runs two pytest-xdist workers, a file at a time each (--dist loadfile): the longest file first, so
    # that it does not start last.
    items.sort(key=lambda item: not item.nodeid.startswith(LONGEST))


@pytest.fixture(scope="session")
def _empty_cache_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache-without-go-binaries")


@pytest.fixture(autouse=True)
def _go_binaries_only_when_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test not marked ``kustomize`` runs with every Go-built binary out of reach (no setting, no cache, not on
    PATH), even where they are built: one that needs them fails in every run, rather than only where they are
    missing (`make check` on a fresh clone)."""
    if request.node.get_closest_marker("kustomize"):
        return
    hidden = _go_binary_dirs(dict(os.environ))
    for name in GO_BINARY_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(request.getfixturevalue("_empty_cache_home")))
    monkeypatch.setenv("PATH", os.pathsep.join(
        entry for entry in os.environ.get("PATH", "").split(os.pathsep)
        if not any(Path(entry) == d or d in Path(entry).parents for d in hidden)))


_FIRST_PROCESS = pytest.StashKey[int]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failing test's report carries the log tails of the operators it ran (CI shows nothing else): those
    still running (shared fixtures') and those the test started; an unmarked one's says the binaries were hidden."""
    from tests.operator_process import STARTED

    report = yield
    if report.failed and not item.get_closest_marker("kustomize"):
        report.sections.append(("Go-built binaries hidden", "this test is not marked `kustomize` (nor `cluster`), so "
                                "it ran without the render helper, kustomize, olm-validate and the control plane: "
                                "if it needs one of them, mark it"))
    if report.when == "setup":
        item.stash[_FIRST_PROCESS] = len(STARTED)
    elif report.when == "call" and report.failed:
        first = item.stash.get(_FIRST_PROCESS, len(STARTED))
        for index, process in enumerate(STARTED):
            if index >= first or process.popen is not None:
                report.sections.append((f"operator log {process.log_path}", process.log_tail(80)))
    return report


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """The embedded control plane: etcd, kube-apiserver, KCM, scheduler and kwok on 127.0.0.1."""
    plane = ControlPlane()
    plane.start()
    os.environ["KUBECONFIG"] = str(plane.kubeconfig)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane):
    """A synchronous admin client (kubernetes.client.ApiClient) for test set-up and assertions."""
    from tests.kube import Kube

    kube = Kube(control_plane.kubeconfig)
    yield kube
    kube.close()


@pytest.fixture
def namespace(kube) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (without waiting)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube.create_namespace(name)
    yield name
    kube.delete_namespace(name)


@pytest.fixture
def no_other_operator() -> Iterator[None]:
    """Pause every operator process still running (a shared fixture's) for the test, which starts its own: two
    operators reconciling one KfDef would race each other's status."""
    from tests.operator_process import STARTED

    paused = [process for process in STARTED if process.popen is not None]
    for process in paused:
        process.stop()
    try:
        yield
    finally:
        for process in paused:
            process.start()
