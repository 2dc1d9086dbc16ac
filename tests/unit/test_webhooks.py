"""Failed calls to a stack's own webhooks are named with their configuration and Service (messages as seen on
kube-apiserver 1.36 with Kubeflow v1.2.0 deployed on kwok)."""

from __future__ import annotations

from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import CompactObjects, Stack
from kfdef_operator.ssa.changeset import Action, Change, ChangeSet
from kfdef_operator.ssa.health import assess
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.webhooks import explain, webhooks_of

ISTIO_DOWN = ('Internal error occurred: failed calling webhook "sidecar-injector.istio.io": failed to call webhook: '
              'Post "https://istio-sidecar-injector.istio-system.svc:443/inject?timeout=30s": dial tcp '
              '10.0.0.168:443: connect: network is unreachable')
CERT_MANAGER_DOWN = ('heal failed: 500 InternalError: Internal error occurred: failed calling webhook '
                     '"webhook.cert-manager.io": failed to call webhook: the server is currently unable to handle '
                     'the request')


def configuration(kind: str, name: str, *webhooks: dict, api_version: str = "admissionregistration.k8s.io/v1") -> dict:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "webhooks": list(webhooks)}


def webhook(name: str, service: tuple[str, str, str] | None = None, **fields: object) -> dict:
    config = ({"service": {"namespace": service[0], "name": service[1], "path": service[2]}} if service
              else {"url": "https://hooks.example.org/validate"})
    return {"name": name, "clientConfig": config, **fields}


STACK = [
    configuration("MutatingWebhookConfiguration", "istio-sidecar-injector",
                  webhook("sidecar-injector.istio.io", ("istio-system", "istio-sidecar-injector", "/inject"),
                          failurePolicy="Fail")),
    # cert-manager 0.x served its webhook through an APIService behind kube-apiserver's own Service.
    configuration("MutatingWebhookConfiguration", "cert-manager-webhook",
                  webhook("webhook.cert-manager.io", ("default", "kubernetes",
                                                      "/apis/webhook.cert-manager.io/v1beta1/mutations"))),
    configuration("MutatingWebhookConfiguration", "cache-webhook-kubeflow",
                  webhook("cache-server.kubeflow.svc", ("kubeflow", "cache-server", "/mutate"),
                          failurePolicy="Ignore")),
    configuration("ValidatingWebhookConfiguration", "old", webhook("old.example.org"),
                  api_version="admissionregistration.k8s.io/v1beta1"),
]


def test_a_failed_call_to_the_stacks_own_webhook_names_its_configuration_and_service():
    assert explain(ISTIO_DOWN, webhooks_of(STACK)) == (
        "blocked by the stack's own webhook MutatingWebhookConfiguration istio-sidecar-injector/"
        "sidecar-injector.istio.io: kube-apiserver cannot call its service istio-system/istio-sidecar-injector "
        "(dial tcp 10.0.0.168:443: connect: network is unreachable); no ready backend serves it in this cluster yet")


def test_a_webhook_served_through_an_apiservice_names_the_apiservice():
    assert explain(CERT_MANAGER_DOWN, webhooks_of(STACK)) == (
        "heal failed: blocked by the stack's own webhook MutatingWebhookConfiguration cert-manager-webhook/"
        "webhook.cert-manager.io: kube-apiserver cannot call its service default/kubernetes (kube-apiserver "
        "itself, through APIService v1beta1.webhook.cert-manager.io) (the server is currently unable to handle the "
        "request); no ready backend serves it in this cluster yet")


def test_only_fail_closed_webhooks_are_the_stacks_blockers():
    # Ignore is explicit for the cache webhook, and v1beta1's default for the old one.
    assert set(webhooks_of(STACK)) == {"sidecar-injector.istio.io", "webhook.cert-manager.io"}


def test_other_messages_are_left_as_they_are():
    webhooks = webhooks_of(STACK)
    someone_elses = ISTIO_DOWN.replace("sidecar-injector.istio.io", "policy.example.org")
    denied = 'admission webhook "sidecar-injector.istio.io" denied the request: no'
    invalid = '422 Invalid: Profile.kubeflow.org "$(profile-name)" is invalid: metadata.name: Invalid value'
    for message in (someone_elses, denied, invalid):
        assert explain(message, webhooks) == message


def test_the_stack_explains_failed_applies_and_heals():
    stack = Stack(owner=Owner("kf", "kubeflow", "u"), generation=1)
    stack.webhooks = webhooks_of(STACK)
    ref = ObjectRef("cert-manager.io", "Certificate", "kubeflow", "admission-webhook-cert")
    other = ObjectRef("", "ConfigMap", "kubeflow", "c")
    stack.desired = CompactObjects({ref: {}, other: {}})
    stack.record_apply(ChangeSet([Change(ref, Action.FAILED, CERT_MANAGER_DOWN), Change(other, Action.CREATED)]))
    assert stack.changes[ref].message.startswith("heal failed: blocked by the stack's own webhook "
                                                 "MutatingWebhookConfiguration cert-manager-webhook/")
    assert stack.changes[other].action is Action.CREATED
    stack.record_heal(Change(other, Action.FAILED, f"heal failed: 500 InternalError: {ISTIO_DOWN}"))
    assert "istio-sidecar-injector/sidecar-injector.istio.io" in stack.changes[other].message


def test_a_deployment_whose_pods_cannot_be_created_says_why():
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "generation": 1},
                  "spec": {"replicas": 1},
                  "status": {"observedGeneration": 1, "replicas": 0, "conditions": [
                      {"type": "Available", "status": "False"},
                      {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": ISTIO_DOWN}]}}
    health = assess(deployment)
    assert not health.ready
    assert health.message == f"pods not created: {ISTIO_DOWN}"
    assert "istio-system/istio-sidecar-injector" in explain(health.message, webhooks_of(STACK))
