"""Webhook configurations admissionregistration.k8s.io/v1beta1 -> v1 (pure).

Per webhook when absent: ``admissionReviewVersions: [v1beta1]``, ``failurePolicy: Ignore``, ``matchPolicy: Exact``,
``timeoutSeconds: 30``. v1 accepts only ``sideEffects: None|NoneOnDryRun``; ``Unknown``, ``Some`` or absent (v1beta1
default ``Unknown``) become ``None``. That cannot keep the old behaviour exactly (dry-run requests used to be refused
instead of reaching the webhook), so each such webhook is named in the notes. v1 requires unique webhook names within
a configuration: a repeated name gets ``-2``, ``-3``, ... on its first label (every webhook is still called).
"""

from __future__ import annotations

from kfdef_operator.upgrade.conversion import JsonObject, fill_missing

# v1beta1 defaults that admissionregistration/v1 changed or removed.
_V1BETA1_WEBHOOK_DEFAULTS = {"admissionReviewVersions": ["v1beta1"], "failurePolicy": "Ignore",
                             "matchPolicy": "Exact", "timeoutSeconds": 30}
_V1_SIDE_EFFECTS = ("None", "NoneOnDryRun")


def convert_webhook_configuration(obj: JsonObject) -> tuple[str, ...]:
    """admissionregistration.k8s.io/v1beta1 into v1, keeping the v1beta1 defaults v1 changed."""
    notes = _make_webhook_names_unique(obj.get("webhooks") or [])
    for webhook in obj.get("webhooks") or []:
        fill_missing(webhook, _V1BETA1_WEBHOOK_DEFAULTS)
        side_effects = webhook.get("sideEffects", "Unknown")
        if side_effects not in _V1_SIDE_EFFECTS:
            webhook["sideEffects"] = "None"
            notes.append(f"webhook {webhook.get('name')}: sideEffects {side_effects} is not accepted by v1, set to "
                         "None: dry-run requests now reach this webhook instead of being refused")
    return tuple(notes)


_DNS_LABEL_MAX = 63


def _make_webhook_names_unique(webhooks: list[JsonObject]) -> list[str]:
    """Renames the second and later webhooks sharing a name (v1beta1 allowed that, v1 refuses it).

    Renaming keeps the behaviour: the server still calls every webhook. The first label gets ``-2``, ``-3``, ...
    (shortened to stay a DNS label), so the name remains the fully qualified name v1 requires and is the same on
    every render.
    """
    taken = {webhook.get("name") for webhook in webhooks}
    seen: set[object] = set()
    notes = []
    for webhook in webhooks:
        name = webhook.get("name")
        if name not in seen:
            seen.add(name)
            continue
        first, dot, rest = str(name).partition(".")
        number = 2
        while (candidate := f"{first[:_DNS_LABEL_MAX - len(str(number)) - 1]}-{number}{dot}{rest}") in taken:
            number += 1
        webhook["name"] = candidate
        taken.add(candidate)
        notes.append(f"webhook {name}: repeated name, this one renamed to {candidate} (v1 requires unique "
                     "names; every webhook is still called)")
    return notes
