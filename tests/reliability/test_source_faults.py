"""The manifest source fails: the KfDef says what is wrong, retries with backoff, and recovers by itself.

A local HTTP server on 127.0.0.1 serves each stack as a .tar.gz; its behaviour is switched per path while the
operator fetches (the package's operator reads with a 2 s timeout, ``KFDEF_FETCH_READ_TIMEOUT``). Recovery is
checked without touching the KfDef: same generation, Ready again.
"""

from __future__ import annotations

import time

import pytest

from kfdef_dev.manifests import tarball
from tests.cluster.conftest import KFDEF_API, kfdef_status, wait_condition_reason
from tests.kube import wait_for
from tests.reliability.support import TarballServer, condition, delete_kfdefs, kfdef, refusing_socket, wait_ready

pytestmark = pytest.mark.cluster

# fault -> (what the server does, words the Degraded message must contain)
FAULTS = {
    "HTTP 500": ("500", "HTTP 500"),
    "HTTP 404": ("404", "HTTP 404"),
    "connection refused": ("refused", "Connection refused"),
    "read timeout": ("slow", "timed out"),
    "truncated tarball": ("truncated", "damaged"),
}


@pytest.fixture
def server():
    server = TarballServer()
    yield server
    server.close()


def test_source_faults_are_reported_retried_and_recovered(operator, kube, kfdef_namespace, new_stack, server,
                                                          reliability):
    """Every fault at once, each on its own KfDef; then the source comes back"""
    refused = refusing_socket()  # held, not listening, until the source "comes back" on it
    refused_port = refused.getsockname()[1]
    stacks, routes = {}, {}
    for index, (fault, (mode, _)) in enumerate(FAULTS.items()):
        stack = new_stack(with_webhook=False)
        name = f"source-{index}"
        path = f"/{name}.tar.gz"
        if mode == "refused":
            uri = f"http://127.0.0.1:{refused_port}{path}"
        else:
            routes[fault] = server.serve(path, tarball(stack.root), mode)
            uri = server.url(path)
        stacks[fault] = (name, stack, uri)
        kube.apply(stack.kfdef(name, kfdef_namespace, uri=uri))

    generations, degraded_after = {}, {}
    started = time.monotonic()
    for fault, (name, _, _) in stacks.items():
        obj = wait_condition_reason(kube, name, kfdef_namespace, "Degraded", "True", "SourceFailed", timeout=90)
        degraded_after[fault] = time.monotonic() - started
        message = condition(obj, "Degraded")["message"]
        assert "'manifests'" in message and FAULTS[fault][1] in message, f"{fault}: {message}"
        assert "Retrying with backoff" in message, message
        assert condition(obj, "Ready")["status"] == "False"
        generations[fault] = obj["metadata"]["generation"]
    # Transient faults were retried inside the fetch with a doubling pause (1 s, 2 s, 4 s) before giving up.
    hits = routes["HTTP 500"].hits
    assert len(hits) >= 4, hits
    gaps = [b - a for a, b in zip(hits, hits[1:4], strict=False)]
    assert gaps[0] >= 0.9 and gaps[1] >= 1.9 and gaps[2] >= 3.9, f"no backoff between attempts: {gaps}"
    assert len(routes["HTTP 404"].hits) == 1 or routes["HTTP 404"].hits[1] - routes["HTTP 404"].hits[0] >= 4.5, \
        "a 404 is not retried within a fetch, only by the operator's backoff"

    # The source comes back: nothing is done to the KfDefs.
    recovered = TarballServer(refused)
    try:
        name, stack, _ = stacks["connection refused"]
        recovered.serve(f"/{name}.tar.gz", tarball(stack.root))
        for route in routes.values():
            route.mode = "ok"
        server.release.set()
        back = time.monotonic()
        recovery = {}
        for fault, (name, _, _) in stacks.items():
            obj = wait_ready(kube, name, kfdef_namespace, timeout=120)
            recovery[fault] = time.monotonic() - back
            assert obj["metadata"]["generation"] == generations[fault], "the KfDef was not touched"
            assert condition(obj, "Degraded")["status"] == "False"
            assert kfdef_status(kube, name, kfdef_namespace)["sources"][0]["revision"].startswith("sha256:")
    finally:
        recovered.close()
    delete_kfdefs(kube, kfdef_namespace)
    for fault in FAULTS:
        row = reliability.scenario(f"source fault: {fault}")
        row.figures = {"s until Degraded=SourceFailed": round(degraded_after[fault], 1),
                       "s from recovery to Ready": round(recovery[fault], 1)}


def test_a_changed_source_is_applied_on_the_next_reconcile(operator, kube, kfdef_namespace, new_stack, server,
                                                          reliability):
    """The served archive changes between reconciles: the new revision is applied"""
    stack = new_stack(with_webhook=False)
    route = server.serve("/changing.tar.gz", tarball(stack.root))
    kfdef_body = stack.kfdef("changing", kfdef_namespace, uri=server.url("/changing.tar.gz"))
    kube.apply(kfdef_body)
    first = wait_ready(kube, "changing", kfdef_namespace)["status"]["sources"][0]["revision"]

    manifest = stack.root / "app" / "base" / "04-deployment.yaml"
    manifest.write_text(manifest.read_text().replace("example.invalid/app:1", "example.invalid/app:2"))
    route.body = tarball(stack.root)
    kfdef_body["spec"]["version"] = "v2"  # any edit makes the operator reconcile (sources are not polled)
    kube.apply(kfdef_body)

    def changed():
        obj = kfdef(kube, "changing", kfdef_namespace)
        status = (obj or {}).get("status") or {}
        return (condition(obj, "Ready").get("status") == "True" and status.get("observedGeneration") == 2
                and status["sources"][0]["revision"] != first)
    wait_for(changed, timeout=60, what="the new revision applied")
    deployment = kube.get("apps/v1", "Deployment", "operator", stack.namespace)
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "example.invalid/app:2"
    assert kube.get(KFDEF_API, "KfDef", "changing", kfdef_namespace)["status"]["sources"][0]["uri"] == \
        server.url("/changing.tar.gz")
    reliability.figure("revisions applied", 2)
