"""What the operator's server-side apply puts on the wire, against the real kube-apiserver."""

from __future__ import annotations

import asyncio

import pytest

from kfdef_operator.ssa.client import KubeClient

pytestmark = pytest.mark.cluster

# A Grafana dashboard's emoji (outside the Basic Multilingual Plane), accents, CJK, and the code points a YAML
# parser refuses or folds when they appear literally.
TEXT = "Pipelines \U0001F680\U0001F4CA \u00e9t\u00e9 \u4e2d\u6587 nel\x85 ls\u2028 ps\u2029 del\x7f end"


def test_text_outside_the_basic_multilingual_plane_is_applied_unchanged(kube, control_plane, namespace):
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dashboards", "namespace": namespace},
                  "data": {"dashboard.json": f'{{"title": "{TEXT}"}}', TEXT.split()[0]: TEXT}}

    async def apply() -> tuple[dict, bool]:
        client = await KubeClient.connect(str(control_plane.kubeconfig))
        try:
            return await client.apply(f"/api/v1/namespaces/{namespace}/configmaps/dashboards", config_map,
                                      field_manager="tests")
        finally:
            await client.close()

    applied, created = asyncio.run(apply())
    assert created and applied["data"] == config_map["data"]
    assert kube.get("v1", "ConfigMap", "dashboards", namespace)["data"] == config_map["data"]


def test_watches_do_not_use_up_the_connections_of_requests(control_plane, namespace):
    # One watch per kind a stack holds: with more kinds than the request pool has connections (the benchmark's
    # workload at ten times its size holds 114), requests used to wait for a connection until they timed out.
    async def request_beside_watches() -> dict:
        client = await KubeClient.connect(str(control_plane.kubeconfig), pool_size=2)
        opened = asyncio.Event()
        count = 0

        async def watch() -> None:
            async for _ in client.watch(f"/api/v1/namespaces/{namespace}/configmaps", timeout_seconds=60):
                pass  # the namespace holds no ConfigMap events while the test runs
            raise AssertionError("watch ended early")

        async def watch_opened() -> None:
            nonlocal count
            count += 1
            if count == 3:
                opened.set()
            await watch()

        watches = [asyncio.create_task(watch_opened()) for _ in range(3)]
        try:
            await asyncio.wait_for(opened.wait(), 5)
            await asyncio.sleep(0.5)  # each watch's request is sent by now
            return await asyncio.wait_for(client.request("GET", f"/api/v1/namespaces/{namespace}"), 10)
        finally:
            for task in watches:
                task.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
            await client.close()

    assert asyncio.run(request_beside_watches())["metadata"]["name"] == namespace
