"""The tests' own client (tests/kube.py) finds a kind by its API group alone.

CI saw kube-apiserver list ``telemetry.istio.io/v1`` in ``/apis`` while ``/apis/telemetry.istio.io/v1`` answered 404,
and the lookup of a core kind fail with it: the library asked every listed group for its ``v1`` resources. A small
HTTP server plays that API server here: discovery documents only, the broken group included.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import pytest

from tests.kube import Kube

DISCOVERY = {
    "/version": {"major": "1", "minor": "36", "gitVersion": "v1.36.4"},
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
        {"name": "configmaps", "namespaced": True, "kind": "ConfigMap", "verbs": ["get", "list"]}]},
    "/apis": {"kind": "APIGroupList", "groups": [
        {"name": group, "versions": [{"groupVersion": f"{group}/v1", "version": "v1"}],
         "preferredVersion": {"groupVersion": f"{group}/v1", "version": "v1"}}
        for group in ("telemetry.istio.io", "apps")]},
    "/apis/apps/v1": {"kind": "APIResourceList", "groupVersion": "apps/v1", "resources": [
        {"name": "deployments", "namespaced": True, "kind": "Deployment", "verbs": ["get", "list"]}]},
}


class DiscoveryOnly(BaseHTTPRequestHandler):
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (the http.server API)
        path = self.path.split("?")[0]
        self.asked.append(path)
        body = DISCOVERY.get(path)
        self.send_response(200 if body is not None else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body if body is not None else {"kind": "Status", "code": 404}).encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def kube(tmp_path: Path) -> Iterator[Kube]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), DiscoveryOnly)
    Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    DiscoveryOnly.asked = []
    client = Kube(kubeconfig)
    try:
        yield client
    finally:
        client.close()
        server.shutdown()
        server.server_close()


def test_a_core_kind_is_found_while_a_listed_group_answers_404(kube: Kube):
    assert kube.resource("v1", "ConfigMap").name == "configmaps"
    assert "/apis/telemetry.istio.io/v1" not in DiscoveryOnly.asked


def test_a_grouped_kind_is_looked_up_in_its_group_only(kube: Kube):
    assert kube.resource("apps/v1", "Deployment").name == "deployments"
    assert "/apis/telemetry.istio.io/v1" not in DiscoveryOnly.asked
