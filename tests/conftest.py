"""Shared fixtures: one real local control plane per test session (started lazily)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kfdef_dev.controlplane import ControlPlane

FIXTURES = Path(__file__).parent / "fixtures"


_FIRST_PROCESS = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    """looptime's pytest plugin patches pytest-asyncio's loops, and with pytest-asyncio absent (it is, here) its
    fixture hook fails the setup of every fixture (looptime 0.9). The tests run virtual-time loops themselves
    (tests/virtual_time.py), so the plugin is left out."""
    config.pluginmanager.set_blocked("looptime_plugin")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failing test's report carries the log tails of the operators it ran (CI shows nothing else): those
    still running (shared fixtures') and those the test started."""
    from tests.operator_process import STARTED

    report = yield
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
