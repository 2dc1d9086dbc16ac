"""The objects a Ready message lists first: those the stack's own webhooks hold up (a person can act on them)."""

from __future__ import annotations

from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import CompactObjects, Stack
from kfdef_operator.runtime.status import readiness
from kfdef_operator.ssa.health import Health, State
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.live import LiveObject
from kfdef_operator.ssa.webhooks import BLOCKED_BY_OWN_WEBHOOK, Webhook


class Cache:
    """A LiveView over a fixed set of live objects."""

    def __init__(self, objects: dict[ObjectRef, LiveObject]) -> None:
        self.objects = objects

    def get(self, ref: ObjectRef) -> LiveObject | None:
        return self.objects.get(ref)

    def is_watched(self, group: str, kind: str, namespace: str = "") -> bool:
        return True


def live(ref: ObjectRef, message: str) -> LiveObject:
    return LiveObject(ref, "v1", "uid", "1", {"labels": {}, "annotations": {}}, Health(State.PROGRESSING, message))


def test_objects_blocked_by_the_stacks_own_webhook_are_listed_before_those_waiting():
    service = ObjectRef("apiregistration.k8s.io", "APIService", "", "v1beta1.webhook.example.io")
    deployment = ObjectRef("apps", "Deployment", "kubeflow", "app")
    stack = Stack(Owner("kf", "kubeflow", "uid"), 1)
    stack.desired = CompactObjects({service: {}, deployment: {}})
    stack.webhooks = {"pods.example.io": Webhook("MutatingWebhookConfiguration inject", "pods.example.io",
                                                 "service kubeflow/injector")}
    cache = Cache({
        service: live(service, "not Available: failing or missing response from https://10.0.0.1:443"),
        deployment: live(deployment, 'pods not created: Internal error occurred: failed calling webhook '
                                     '"pods.example.io": failed to call webhook: connection refused'),
    })
    _, unhealthy = readiness(stack, cache)
    assert [ref for ref, _ in unhealthy] == [str(deployment), str(service)]
    assert BLOCKED_BY_OWN_WEBHOOK in unhealthy[0][1]
