"""What a kwok-run cluster cannot serve in a release, and thin wrapper kustomizations that leave it out.

kube-apiserver calls admission webhooks, and proxies APIServices, through Services whose backends are the stack's
own pods. kwok only pretends those pods run: nothing listens behind the Service IPs (and in the loopback-only
network namespace a dial fails at once with "network is unreachable"). So a *fail-closed* webhook of the stack
blocks every request it intercepts (including the pods of the stack's own Deployments), and an APIService backed
by a Service never becomes Available. Fail-open webhooks (``failurePolicy: Ignore``) cost a failed dial and block
nothing; they stay.

:func:`write_wrappers` writes, next to a release tree, one wrapper kustomization per application that builds the
application as it is and deletes those objects with ``$patch: delete`` patches (plus any repairs given), and
returns the KfDef pointing at the wrappers: the release as a cluster whose webhooks cannot be served can run it.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kfdef_operator.ssa.aggregation import selector_matches
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.webhooks import webhooks_of

JSON = dict[str, Any]
WRAPPERS = "kfdef-test"
_WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@dataclass(frozen=True)
class Excluded:
    """An object a kwok-run cluster cannot serve, and why."""

    api_version: str
    kind: str
    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name} ({self.why})"


def unservable(objects: Iterable[JSON]) -> list[Excluded]:
    """The fail-closed webhook configurations and the Service-backed APIServices among ``objects``."""
    found = []
    for obj in objects:
        kind, name = obj.get("kind"), obj["metadata"]["name"]
        if kind in _WEBHOOK_KINDS:
            closed = list(webhooks_of([obj]))
            if closed:
                found.append(Excluded(obj["apiVersion"], kind, name, "fail-closed webhooks " + ", ".join(closed)))
        elif kind == "APIService" and (obj.get("spec") or {}).get("service"):
            service = obj["spec"]["service"]
            found.append(Excluded(obj["apiVersion"], kind, name,
                                  f"served by Service {service.get('namespace')}/{service.get('name')}"))
    return found


def _literal(name: str) -> str:
    """A kustomize target name (a regular expression, anchored) matching exactly ``name``."""
    return "".join("\\" + c if c in ".$()*+?[]{}^|\\" else c for c in name)


def wrapper(package: str, excluded: Iterable[Excluded], repairs: Iterable[JSON] = ()) -> JSON:
    """A kustomization at ``<WRAPPERS>/<app>/`` building ``package`` (a repo path) without ``excluded``."""
    patches = [{"target": {"kind": e.kind, "name": _literal(e.name)},
                "patch": yaml.safe_dump({"$patch": "delete", "apiVersion": e.api_version, "kind": e.kind,
                                         "metadata": {"name": e.name}})} for e in excluded]
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [os.path.join("..", "..", package)], "patches": [*patches, *repairs]}


def write_wrappers(kfdef: JSON, tree: Path, rendered: dict[str, list[JSON]],
                   repairs: dict[str, list[JSON]] | None = None) -> tuple[JSON, list[Excluded]]:
    """Wrappers in ``tree`` for every application that holds something unservable (or has repairs).

    ``rendered`` maps application names to their rendered objects. Returns the KfDef with those applications'
    paths pointing at their wrappers and every repo at ``tree``, and everything left out.
    """
    kfdef = copy.deepcopy(kfdef)
    left_out: list[Excluded] = []
    for application in kfdef["spec"]["applications"]:
        name = application["name"]
        excluded = unservable(rendered[name])
        fixes = (repairs or {}).get(name, [])
        if not excluded and not fixes:
            continue
        ref = application["kustomizeConfig"]["repoRef"]
        directory = tree / WRAPPERS / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "kustomization.yaml").write_text(yaml.safe_dump(wrapper(ref["path"], excluded, fixes)))
        ref["path"] = f"{WRAPPERS}/{name}"
        left_out += excluded
    for repo in kfdef["spec"]["repos"]:
        repo["uri"] = tree.as_uri()
    return kfdef, left_out


def _rule_intercepts(rule: JSON, operation: str, group: str, plural: str, namespaced: bool) -> bool:
    operations, groups = rule.get("operations") or [], rule.get("apiGroups") or []
    resources = rule.get("resources") or []
    scope = rule.get("scope", "*")
    return ((operation in operations or "*" in operations) and (group in groups or "*" in groups)
            and (plural in resources or "*" in resources or "*/*" in resources)
            and scope in ("*", "Namespaced" if namespaced else "Cluster"))


@dataclass(frozen=True)
class Intercepted:
    """An object of the stack that one of its own fail-closed webhooks intercepts."""

    obj: JSON
    namespaced: bool
    webhook: str

    @property
    def namespace(self) -> str | None:
        return self.obj["metadata"].get("namespace") if self.namespaced else None


def intercepted(objects: Iterable[JSON], resource_of: Callable[[JSON], tuple[str, bool]],
                operation: str = "CREATE") -> dict[str, Intercepted]:
    """Which of ``objects`` a fail-closed webhook among them intercepts on ``operation``, by ``str(ObjectRef)``.

    ``resource_of(obj)`` gives an object's resource (plural) and whether it is namespaced. Selectors are matched
    against the labels of the objects and of the Namespaces among ``objects``; webhooks with ``matchConditions``
    (CEL, not evaluated here) are left out.
    """
    objects = list(objects)
    namespace_labels = {obj["metadata"]["name"]: obj["metadata"].get("labels") or {}
                        for obj in objects if obj["kind"] == "Namespace"}
    webhooks = [webhook for obj in objects if obj["kind"] in _WEBHOOK_KINDS for webhook in obj.get("webhooks") or []
                if webhook["name"] in webhooks_of([obj]) and not webhook.get("matchConditions")]
    found = {}
    for obj in objects:
        group = obj["apiVersion"].rpartition("/")[0]
        plural, namespaced = resource_of(obj)
        meta = obj["metadata"]
        for webhook in webhooks:
            if not any(_rule_intercepts(rule, operation, group, plural, namespaced)
                       for rule in webhook.get("rules") or []):
                continue
            if namespaced and not selector_matches(webhook.get("namespaceSelector") or {},
                                                   namespace_labels.get(meta.get("namespace"), {})):
                continue
            if selector_matches(webhook.get("objectSelector") or {}, meta.get("labels") or {}):
                ref = ObjectRef(group, obj["kind"], meta.get("namespace", "") if namespaced else "", meta["name"])
                found[str(ref)] = Intercepted(obj, namespaced, webhook["name"])
                break
    return found
