"""Aggregated ClusterRoles: the rules kube-controller-manager writes, and the order they are deleted in (pure).

A ClusterRole with an ``aggregationRule`` gets its ``rules`` from
kube-controller-manager's aggregation controller: the union of the rules of
every ClusterRole its selectors match. Manifests ship such roles with
``rules: []``. Declaring that empty list would make the operator the owner of
``rules`` and reset them on every apply and heal, an endless fight in which
the role's users lose their permissions for a moment each round; so the
rules are never part of what the operator applies or compares.

The controller writes with server-side apply, which *creates* an object that
does not exist. Whenever any ClusterRole changes it re-computes every
aggregated role it still has in its cache, reading the role and then the
roles it draws from, two reads of a cache that moves on in between: if an
aggregated role is deleted and then a role it draws from, a computation that
read the first before its deletion and the second after puts the first role
back, holding nothing but rules and owned by no one (an *echo*,
:func:`is_echo`). Aggregated roles are therefore deleted in levels, each
level gone before the roles its members draw from are deleted
(:func:`deletion_levels`), which leaves the controller's cache the time to
forget them; the echo the controller can still make when it lags behind is
removed after the deletes (``kfdef_operator.ssa.teardown``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kfdef_operator.api.types import JSON

RBAC_GROUP = "rbac.authorization.k8s.io"
#: The field manager of kube-controller-manager's aggregation controller.
AGGREGATION_CONTROLLER = "clusterrole-aggregation-controller"


def is_aggregated(obj: JSON) -> bool:
    """Whether ``obj`` is a ClusterRole whose rules the aggregation controller writes."""
    return (obj.get("kind") == "ClusterRole" and obj.get("apiVersion", "").startswith(RBAC_GROUP + "/")
            and bool(obj.get("aggregationRule")))


def without_controller_rules(obj: JSON) -> JSON:
    """``obj`` (modified in place and returned) without the ``rules`` of an aggregated ClusterRole."""
    if is_aggregated(obj):
        obj.pop("rules", None)
    return obj


def selector_matches(selector: JSON, labels: Mapping[str, str]) -> bool:
    """Whether a label selector (``matchLabels`` and ``matchExpressions``) selects ``labels``.

    An empty selector selects everything, as the aggregation controller reads it.
    """
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def aggregates(role: JSON, other: JSON) -> bool:
    """Whether the aggregated ClusterRole ``role`` draws rules from ``other``."""
    labels = (other.get("metadata") or {}).get("labels") or {}
    return any(selector_matches(selector, labels)
               for selector in (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or [])


def is_echo(obj: JSON) -> bool:
    """Whether ``obj`` is a ClusterRole the aggregation controller re-created after its deletion: no
    ``aggregationRule`` and nobody but that controller among its field managers (it only ever writes rules)."""
    managers = {entry.get("manager") for entry in (obj.get("metadata") or {}).get("managedFields") or []}
    return obj.get("kind") == "ClusterRole" and not obj.get("aggregationRule") and managers == {AGGREGATION_CONTROLLER}


def deletion_levels(roles: Iterable[JSON]) -> list[list[str]]:
    """Names of the aggregated roles among ``roles`` in levels: each role in a level before every aggregated role
    it draws rules from, none of a level drawing from another of it.

    Of roles that draw from each other (a cycle), one goes a level before the other.
    """
    aggregated = {role["metadata"]["name"]: role for role in roles if is_aggregated(role)}
    depth: dict[str, int] = {}
    visiting: set[str] = set()

    def depth_of(name: str) -> int:
        # One level after the deepest role that draws from ``name``.
        if name not in depth:
            visiting.add(name)
            drawers = [other for other, role in aggregated.items()
                       if other != name and other not in visiting and aggregates(role, aggregated[name])]
            depth[name] = max((depth_of(other) + 1 for other in drawers), default=0)
            visiting.discard(name)
        return depth[name]

    levels: list[list[str]] = []
    for name in aggregated:
        level = depth_of(name)
        levels.extend([] for _ in range(level + 1 - len(levels)))
        levels[level].append(name)
    return levels
