"""The heal floor's copies: beside their originals, claimed by nothing of the stack, the original left as it was."""

from __future__ import annotations

import copy

from bench.heal import FLOOR_LABEL, floor_copy, floor_name


def test_a_floor_copy_is_a_new_deployment_no_selector_of_the_stack_matches() -> None:
    live = {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "api", "namespace": "ns-1", "uid": "u-1", "resourceVersion": "7",
                         "labels": {"kfdef.apps.kubeflow.org/instance": "stack"},
                         "annotations": {"kfdef.apps.kubeflow.org/digest": "abc"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "api"}},
                     "template": {"metadata": {"labels": {"app": "api"}}, "spec": {"containers": []}}},
            "status": {"availableReplicas": 2}}
    before = copy.deepcopy(live)
    body = floor_copy(live, "r1")
    assert live == before
    assert body["metadata"] == {"name": floor_name("api"), "namespace": "ns-1", "labels": {FLOOR_LABEL: "r1"}}
    assert body["metadata"]["name"] != "api" and "status" not in body
    assert body["spec"]["selector"]["matchLabels"] == {"app": "api", FLOOR_LABEL: "r1"}
    assert body["spec"]["template"]["metadata"]["labels"] == {"app": "api", FLOOR_LABEL: "r1"}
    assert body["spec"]["replicas"] == 2
