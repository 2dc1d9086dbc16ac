"""One KfDef's slow sources or leftovers cost the others nothing: time, threads, liveness or disk.

Fetch and render run on the operator's own bounded work pool and every fetch ends at its deadline, so sources
trickling one byte a second delay other KfDefs by one deadline at most, and never their heals (which need no
fetch). What a deleted KfDef left in the work directory goes with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from kfdef_dev.manifests import tarball
from tests.cluster.conftest import KFDEF_API, wait_condition_reason
from tests.kube import wait_for
from tests.operator_process import OperatorProcess
from tests.reliability.support import OPERATOR_ENV, TarballServer, condition, delete_kfdefs, wait_ready
from tests.unit.test_kustomize import fake_helper

pytestmark = pytest.mark.cluster

SLOW_SOURCES = 6  # the default executor of a 2-CPU machine has 6 threads: what fetches used to share
FETCH_TIMEOUT = 10


def test_slow_sources_do_not_stop_another_kfdef(operator, control_plane, kube, kfdef_namespace, new_stack, tmp_path,
                                                reliability):
    """Six sources trickling one byte a second: another KfDef still becomes Ready and heals"""
    server = TarballServer()
    slow_stack, healthy_stack = new_stack(with_webhook=False), new_stack(with_webhook=False)
    routes = [server.serve(f"/slow-{i}.tar.gz", tarball(slow_stack.root), mode="trickle") for i in range(SLOW_SOURCES)]
    server.serve("/healthy.tar.gz", tarball(healthy_stack.root))
    # This scenario's own operator (the package's one is paused): a short deadline, the default pool size.
    operator.stop()
    isolated = OperatorProcess(control_plane.kubeconfig, tmp_path / "operator", extra_args=("--work-threads", "4"),
                               env={**OPERATOR_ENV, "KFDEF_FETCH_TIMEOUT": f"{FETCH_TIMEOUT}s"})
    isolated.start()
    probes: list[str | None] = []
    try:
        for i in range(SLOW_SOURCES):
            kube.apply(slow_stack.kfdef(f"slow-{i}", kfdef_namespace, uri=server.url(f"/slow-{i}.tar.gz")))
        wait_for(lambda: sum(bool(r.hits) for r in routes) >= 4, timeout=30, what="the slow downloads started")

        created = time.monotonic()
        kube.apply(healthy_stack.kfdef("healthy", kfdef_namespace, uri=server.url("/healthy.tar.gz")))

        def ready_while_probing():
            probes.append(isolated.http_get("/healthz"))
            return condition(kube.get(KFDEF_API, "KfDef", "healthy", kfdef_namespace), "Ready").get("status") == "True"
        wait_for(ready_while_probing, timeout=FETCH_TIMEOUT + 50, what="the healthy KfDef Ready next to slow ones")
        ready_after = time.monotonic() - created

        old = kube.get("apps/v1", "Deployment", "operator", healthy_stack.namespace)
        kube.delete("apps/v1", "Deployment", "operator", healthy_stack.namespace)
        deleted = time.monotonic()

        def healed():
            probes.append(isolated.http_get("/healthz"))
            new = kube.get("apps/v1", "Deployment", "operator", healthy_stack.namespace)
            return new is not None and new["metadata"]["uid"] != old["metadata"]["uid"]
        wait_for(healed, timeout=10, what="the deleted Deployment re-created while slow fetches run")
        heal_after = time.monotonic() - deleted
        assert any(r.hits and time.monotonic() - r.hits[-1] < FETCH_TIMEOUT for r in routes), \
            "the slow fetches were no longer running during the heal"

        obj = wait_condition_reason(kube, "slow-0", kfdef_namespace, "Degraded", "True", "SourceFailed",
                                    timeout=FETCH_TIMEOUT + 30)
        message = condition(obj, "Degraded")["message"]
        assert f"not fetched within the {FETCH_TIMEOUT} s deadline (KFDEF_FETCH_TIMEOUT)" in message, message
        assert all(p == "ok\n" for p in probes), f"/healthz answered {set(probes)} while the pool was busy"
        reliability.figure("s from the healthy KfDef's creation to Ready", round(ready_after, 1))
        reliability.figure("s from Deployment deleted to re-created", round(heal_after, 2))
        reliability.figure("/healthz probes", f"{len(probes)}, all 200")
        reliability.note(f"{SLOW_SOURCES} KfDefs trickling 1 byte/s, KFDEF_FETCH_TIMEOUT={FETCH_TIMEOUT}s, "
                         "--work-threads 4")
        delete_kfdefs(kube, kfdef_namespace)
    finally:
        isolated.stop()
        server.close()
        operator.start()


def test_a_deleted_kfdef_leaves_nothing_in_the_work_directory(operator, kube, kfdef_namespace, new_stack,
                                                             reliability):
    """A KfDef deleted: its render directory and cached render are removed"""
    stack = new_stack(with_webhook=False)
    kube.apply(stack.kfdef("disk", kfdef_namespace))
    wait_ready(kube, "disk", kfdef_namespace)
    work_dir = operator.work_dir / "cache"
    render_dir = work_dir / "render" / kfdef_namespace / "disk"
    cached = work_dir / "rendered" / f"{kfdef_namespace}_disk.json"
    assert render_dir.is_dir() and cached.is_file(), "the render directory and cached render were not where expected"
    size = sum(p.stat().st_size for p in render_dir.rglob("*") if p.is_file()) + cached.stat().st_size
    kube.delete(KFDEF_API, "KfDef", "disk", kfdef_namespace)
    kube.wait_gone(KFDEF_API, "KfDef", "disk", kfdef_namespace, timeout=60)
    assert not render_dir.exists(), f"{render_dir} is still there after its KfDef was deleted"
    assert not cached.exists(), f"{cached} is still there after its KfDef was deleted"
    reliability.figure("bytes removed", size)


def test_a_kfdef_deleted_while_it_renders_goes_at_once_and_its_render_is_killed(operator, control_plane, kube,
                                                                                kfdef_namespace, new_stack, tmp_path,
                                                                                reliability):
    """A KfDef deleted while its render runs: the render is killed and the KfDef gone within seconds"""
    stack = new_stack(with_webhook=False)
    pid_file = tmp_path / "render.pid"
    operator.stop()
    process = OperatorProcess(control_plane.kubeconfig, tmp_path / "operator", env={
        **OPERATOR_ENV, "KFDEF_RENDER_HELPER": str(fake_helper(tmp_path / "slow-helper",
                                                               f"echo $$ > {pid_file}; exec sleep 600"))})
    process.start()
    try:
        kube.apply(stack.kfdef("rendering", kfdef_namespace))
        wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), timeout=30, what="the render to start")
        helper = int(pid_file.read_text())
        deleted = time.monotonic()
        kube.delete(KFDEF_API, "KfDef", "rendering", kfdef_namespace)
        kube.wait_gone(KFDEF_API, "KfDef", "rendering", kfdef_namespace, timeout=30)
        gone_after = time.monotonic() - deleted

        def helper_gone() -> bool:
            try:
                os.kill(helper, 0)
            except ProcessLookupError:
                return True
            return False
        wait_for(helper_gone, timeout=10, what="the render helper killed")
    finally:
        process.stop()
        operator.start()
    reliability.figure("s from the deletion to the KfDef gone", round(gone_after, 2))


GRACE_S = 30  # deploy/operator/deployment.yaml's terminationGracePeriodSeconds


@pytest.mark.parametrize("state", ["fetch stalled", "render running", "API server gone", "FIFO in a local source"])
def test_sigterm_ends_the_operator_within_its_grace_period(state, operator, control_plane, kube, kfdef_namespace,
                                                           new_stack, tmp_path, reliability):
    """SIGTERM while a fetch waits on a stalled source, while a render runs, with the API server gone, or after a
    KfDef named a local directory holding a FIFO (issue 39, item 4: its hashing blocked a work thread for ever)"""
    server = TarballServer()
    stack = new_stack(with_webhook=False)
    env = {**OPERATOR_ENV, "KFDEF_FETCH_TIMEOUT": "600s", "KFDEF_FETCH_READ_TIMEOUT": "600s"}
    if state == "render running":
        started = tmp_path / "render-started"
        env["KFDEF_RENDER_HELPER"] = str(fake_helper(tmp_path / "slow-helper", f"touch {started}; exec sleep 600"))
    operator.stop()
    process = OperatorProcess(control_plane.kubeconfig, tmp_path / "operator", env=env)
    process.start()
    apiserver_stopped = False
    try:
        if state == "fetch stalled":
            route = server.serve("/stalled.tar.gz", tarball(stack.root), mode="slow")
            kube.apply(stack.kfdef("stalled", kfdef_namespace, uri=server.url("/stalled.tar.gz")))
            wait_for(lambda: route.hits, timeout=30, what="the fetch to reach the stalled server")
        elif state == "render running":
            server.serve("/m.tar.gz", tarball(stack.root))
            kube.apply(stack.kfdef("rendering", kfdef_namespace, uri=server.url("/m.tar.gz")))
            wait_for(started.exists, timeout=30, what="the render to start")
        elif state == "FIFO in a local source":
            os.mkfifo(stack.root / "pipe")
            kube.apply(stack.kfdef("fifo", kfdef_namespace))
            refused = wait_condition_reason(kube, "fifo", kfdef_namespace, "Degraded", "True", "SourceFailed",
                                            timeout=30)
            assert "pipe is a named pipe (FIFO)" in condition(refused, "Degraded")["message"]
        else:
            server.serve("/m.tar.gz", tarball(stack.root))
            kube.apply(stack.kfdef("ready", kfdef_namespace, uri=server.url("/m.tar.gz")))
            wait_ready(kube, "ready", kfdef_namespace, timeout=90)
            control_plane.stop_apiserver()
            apiserver_stopped = True
        assert process.popen is not None
        signalled = time.monotonic()
        process.popen.send_signal(signal.SIGTERM)
        try:
            code = process.popen.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {GRACE_S} s after SIGTERM ({state}):\n{process.log_tail(40)}")
        took = time.monotonic() - signalled
        assert code == 0, f"exited with {code}:\n{process.log_tail(40)}"
        assert took < GRACE_S / 2, f"took {took:.1f} s to stop"
        reliability.figure("s from SIGTERM to exit", round(took, 2))
    finally:
        server.release.set()
        server.close()
        process.stop()
        if apiserver_stopped:
            control_plane.start_apiserver()
        operator.start()
        delete_kfdefs(kube, kfdef_namespace)
