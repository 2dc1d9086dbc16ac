"""Deletions that do not finish are reported during teardown, and the teardown completes once they can.

Two blockers: a finalizer someone else put on an owned ConfigMap, and a custom resource (of a CRD that is not part
of the stack) with a finalizer inside the stack's Namespace, which keeps that Namespace Terminating. The package's
operator waits ``KFDEF_TEARDOWN_WAVE_TIMEOUT`` = 6 s per teardown wave (production: 60 s) before reporting.
"""

from __future__ import annotations

import time

import pytest

from kfdef_operator.runtime.inventory import read as read_inventory
from tests.cluster.conftest import KFDEF_API, wait_condition_reason
from tests.kube import wait_for
from tests.reliability.support import OPERATOR_ENV, condition, instance_label, labelled_objects, stack_kinds
from tests.stacks import crd

pytestmark = pytest.mark.cluster

HOLD = "example.com/hold"
WAVE_TIMEOUT_S = float(OPERATOR_ENV["KFDEF_TEARDOWN_WAVE_TIMEOUT"])


def test_stuck_deletions_are_reported_and_teardown_finishes_when_they_clear(operator, kube, kfdef_namespace,
                                                                            new_stack, reliability):
    """A finalizer on an owned ConfigMap and a Namespace kept Terminating by a foreign custom resource"""
    stack = new_stack(with_webhook=False)
    kube.apply(stack.kfdef("stuck", kfdef_namespace))
    kube.wait_condition(KFDEF_API, "KfDef", "stuck", "Ready", namespace=kfdef_namespace, timeout=120)
    ns = stack.namespace
    kube.core.patch_namespaced_config_map("app-parameters", ns, {"metadata": {"finalizers": [HOLD]}})
    lock_crd = crd(f"lock-{stack.suffix}.example.org", "Lock")
    kube.apply(lock_crd)
    kube.wait_condition("apiextensions.k8s.io/v1", "CustomResourceDefinition", lock_crd["metadata"]["name"],
                        "Established", timeout=30)
    lock_api = f"lock-{stack.suffix}.example.org/v1"
    kube.apply({"apiVersion": lock_api, "kind": "Lock", "metadata": {"name": "held", "namespace": ns,
                                                                     "finalizers": [HOLD]}})
    try:
        started = time.monotonic()
        kube.delete(KFDEF_API, "KfDef", "stuck", kfdef_namespace)
        # Waves: custom resources, the rest, then CRDs and Namespaces; each waits at most WAVE_TIMEOUT_S.
        obj = wait_condition_reason(kube, "stuck", kfdef_namespace, "Degraded", "True", "TeardownStuck",
                                    timeout=3 * WAVE_TIMEOUT_S + 20)
        reported_after = time.monotonic() - started
        message = condition(obj, "Degraded")["message"]
        assert f"ConfigMap {ns}/app-parameters" in message and HOLD in message, message
        assert f"Namespace {ns}" in message and f"finalizers remaining: {HOLD}" in message, message
        assert obj["metadata"]["finalizers"] == ["kfdef-finalizer.kfdef.apps.kubeflow.org"], "finalizer released early"
        inventory = {held.ref.id for held in read_inventory(obj["status"])}
        assert {f"{ns}_app-parameters__ConfigMap", f"_{ns}__Namespace"} <= inventory, inventory
        wait_for(lambda: any(e.reason == "TeardownStuck" and "app-parameters" in e.message for e in
                             kube.core.list_namespaced_event(kfdef_namespace,
                                                             field_selector="involvedObject.name=stuck")
                             .items), timeout=15, what="a TeardownStuck Event")
    finally:
        kube.core.patch_namespaced_config_map("app-parameters", ns, {"metadata": {"finalizers": None}})
        kube.resource(lock_api, "Lock").patch(name="held", namespace=ns, body={"metadata": {"finalizers": None}},
                                              content_type="application/merge-patch+json")
    cleared = time.monotonic()
    kube.wait_gone(KFDEF_API, "KfDef", "stuck", kfdef_namespace, timeout=150)
    finished_after = time.monotonic() - cleared
    kube.wait_gone("v1", "Namespace", ns, timeout=60)
    assert labelled_objects(kube, stack_kinds(stack), instance_label("stuck", kfdef_namespace)) == []
    kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", lock_crd["metadata"]["name"])
    reliability.figure("wave timeout s", WAVE_TIMEOUT_S)
    reliability.figure("s from delete to Degraded=TeardownStuck", round(reported_after, 1))
    reliability.figure("s from finalizers removed to KfDef gone", round(finished_after, 1))
