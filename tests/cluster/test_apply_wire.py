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
