"""Admission webhooks among a set of objects, and what a failed call to one of them means (pure).

When kube-apiserver cannot call a fail-closed webhook it refuses the request with a message such as::

    500 InternalError: Internal error occurred: failed calling webhook "sidecar-injector.istio.io": failed to
    call webhook: Post "https://istio-sidecar-injector.istio-system.svc:443/inject?timeout=30s": dial tcp
    10.0.0.168:443: connect: network is unreachable

A stack that brings its own webhooks blocks its own objects this way until the webhooks' pods serve (for ever in
a cluster whose pods do not really run). :func:`explain` names the webhook's configuration and Service, so the
person on call sees which backend to look at.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kfdef_operator.api.types import JSON

_WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
_CALL_FAILED = re.compile(r'(?:\d{3} \w+: )?(?:Internal error occurred: )?failed calling webhook "(?P<name>[^"]+)": '
                          r'(?:failed to call webhook: )?(?:\w+ "[^"]*": )?(?P<cause>.*)', re.DOTALL)
# A webhook served through an APIService: service default/kubernetes, path /apis/<group>/<version>/...
_AGGREGATED_PATH = re.compile(r"^/apis/(?P<group>[^/]+)/(?P<version>[^/]+)")


@dataclass(frozen=True)
class Webhook:
    """One webhook of a webhook configuration, and where kube-apiserver sends its calls."""

    configuration: str  # "<kind> <name>"
    name: str
    target: str         # "service <ns>/<name>" (and the APIService it leads to), or "<url>"


#: How a message names a call its own stack's webhook refused (see :func:`explain`).
BLOCKED_BY_OWN_WEBHOOK = "blocked by the stack's own webhook"


def _target(client_config: JSON) -> str:
    service = client_config.get("service")
    if not service:
        return str(client_config.get("url", "its URL"))
    target = f"service {service.get('namespace')}/{service.get('name')}"
    via = _AGGREGATED_PATH.match(service.get("path") or "")
    if (service.get("namespace"), service.get("name")) == ("default", "kubernetes") and via:
        target += f" (kube-apiserver itself, through APIService {via['version']}.{via['group']})"
    return target


def default_policy(configuration: JSON) -> str:
    """The failure policy of a webhook that sets none: Fail in admissionregistration v1, Ignore in v1beta1."""
    return "Ignore" if configuration.get("apiVersion", "").endswith("/v1beta1") else "Fail"


def webhooks_of(objects: Iterable[JSON]) -> dict[str, Webhook]:
    """The fail-closed webhooks of the webhook configurations among ``objects``, by webhook name.

    Fail-open webhooks (``failurePolicy: Ignore``) are left out: a failed call to them blocks nothing.
    """
    found = {}
    for obj in objects:
        if obj.get("kind") not in _WEBHOOK_KINDS:
            continue
        for webhook in obj.get("webhooks") or []:
            if webhook.get("failurePolicy", default_policy(obj)) == "Fail" and webhook.get("name"):
                found[webhook["name"]] = Webhook(f"{obj['kind']} {obj['metadata']['name']}", webhook["name"],
                                                 _target(webhook.get("clientConfig") or {}))
    return found


def explain(message: str, webhooks: Mapping[str, Webhook]) -> str:
    """``message`` with a failed call to one of ``webhooks`` spelled out; any other message unchanged."""
    failed = _CALL_FAILED.search(message)
    webhook = webhooks.get(failed["name"]) if failed else None
    if failed is None or webhook is None:
        return message
    cause = failed["cause"].strip()
    return (f"{message[:failed.start()]}{BLOCKED_BY_OWN_WEBHOOK} {webhook.configuration}/{webhook.name}: "
            f"kube-apiserver cannot call its {webhook.target} ({cause}); no ready backend serves it in this "
            "cluster yet")
