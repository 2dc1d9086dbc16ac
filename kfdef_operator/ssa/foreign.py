"""Fields of an adopted object that other writers set and the owner does not apply (pure).

Server-side apply takes over the fields the owner declares; an object that existed before keeps every other field
its earlier writers set (a tenant's ``ingress: [{}]`` on a NetworkPolicy the stack renders without one). Those
are read from the object's ``managedFields``:

- :func:`held_by_others`: per field manager, the topmost parts of its field set that the owner's does not hold.
  Entries of a subresource (``status``, ``scale``: a controller's status, an autoscaler's replicas) are not
  counted, nor, in any entry, the status, the metadata besides labels and annotations, the labels and
  annotations in :data:`ROUTINE_KEYS` that the API server, kubectl and kube-controller-manager set on their own,
  and the rules of an aggregated ClusterRole.
  No manager is trusted by its name, which any writer may choose.
- Many of the fields left are the server's defaults, which Kubernetes counts as set by whoever created the
  object (``kubectl create`` of a Deployment holds its ``progressDeadlineSeconds``, ``strategy``, ...). A dry-run
  JSON patch removing every such field (:func:`removal_patch`) shows what the object would become without them:
  the server defaults it again, so :func:`changed_by_removal` keeps only the fields whose value would go or change.
- :func:`takeover_patch` hands the field sets of some managers to the owner (Flux's field-manager cleanup does the
  same: their entries become the owner's apply entry), so that the owner's next apply removes what it does not
  declare, leaving the object with exactly what the owner applies (and the server's defaults).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import groupby

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa import aggregation
from kfdef_operator.ssa.fieldsets import MISSING, FieldPath, describe, locate, outside, pointer, union, value_at

#: One field another manager holds: (the manager's name, the field's path as :func:`~fieldsets.describe` spells it).
Foreign = tuple[str, str]

#: Label and annotation keys written routinely, by whatever manager wrote the object: the Namespace name label the
#: API server adds to every Namespace, kubectl's client-side apply record and rollout restart time, and the
#: Deployment revision kube-controller-manager writes (in a status entry since Kubernetes 1.31, before that not).
ROUTINE_KEYS = frozenset({
    "f:kubernetes.io/metadata.name",
    "f:kubectl.kubernetes.io/last-applied-configuration",
    "f:kubectl.kubernetes.io/restartedAt",
    "f:deployment.kubernetes.io/revision",
})
_MAPS = frozenset({"f:labels", "f:annotations"})


def _routine(path: FieldPath) -> bool:
    if path[0] == "f:status":
        return True
    if path[0] == "f:metadata" and len(path) >= 2 and path[1] not in _MAPS:
        return True  # uid, ownerReferences, finalizers, managedFields...: the object's bookkeeping, not content
    return len(path) >= 2 and path[-2] in _MAPS and path[-1] in ROUTINE_KEYS


def _fields(entry: JSON) -> JSON:
    fields = entry.get("fieldsV1")
    return fields if isinstance(fields, dict) else {}


def _main(entries: Iterable[JSON]) -> list[JSON]:
    """The entries of writes to the object itself, not to a subresource."""
    return [e for e in entries if isinstance(e, dict) and not e.get("subresource")]


def held_by_others(obj: JSON, field_manager: str) -> dict[str, list[FieldPath]]:
    """Per other manager, the fields of ``obj`` (its metadata is enough) that it holds and ``field_manager`` does
    not (the topmost node of each part only it holds), routine ones left out; managers holding none are absent.
    The ``rules`` of an aggregated ClusterRole are routine too: kube-controller-manager writes them, whoever
    else did before (:mod:`~kfdef_operator.ssa.aggregation`)."""
    entries = _main((obj.get("metadata") or {}).get("managedFields") or [])
    ours = union(*(_fields(e) for e in entries if e.get("manager") == field_manager))
    aggregated = aggregation.is_aggregated(obj)

    def routine(path: FieldPath) -> bool:
        return _routine(path) or aggregated and path == ("f:rules",)

    held: dict[str, list[FieldPath]] = {}
    for entry in entries:
        manager = str(entry.get("manager", ""))
        if manager == field_manager:
            continue
        paths = held.setdefault(manager, [])
        paths.extend(p for p in outside(_fields(entry), ours, routine) if p not in paths)
    return {manager: paths for manager, paths in held.items() if paths}


def described(held: Mapping[str, Iterable[FieldPath]]) -> tuple[Foreign, ...]:
    """``held`` as (manager, path) pairs a person reads, sorted."""
    return tuple(sorted({(manager, describe(path)) for manager, paths in held.items() for path in paths}))


def spelled(fields: Iterable[Foreign], *, limit: int = 8, budget: int = 320) -> str:
    """``tenant: spec.egress, spec.ingress; kubectl-edit: metadata.labels.x and 2 more``: sorted (manager, path)
    pairs, at most ``limit`` of them and about ``budget`` characters (each name and path cut at 80: they are
    whatever a writer chose), then how many more."""
    def cut(text: str) -> str:
        return text if len(text) <= 80 else text[:79] + "…"

    pairs = list(fields)
    parts: list[str] = []
    used = shown = 0
    for manager, group in groupby(pairs[:limit], key=lambda pair: pair[0]):
        name, paths = cut(manager), [cut(path) for _, path in group]
        count = len(paths)
        # As many of this manager's paths as the budget leaves room for; the first path shown always is.
        while count and used + len(name) + 2 + len(", ".join(paths[:count])) > budget and (parts or count > 1):
            count -= 1
        if not count:
            break
        parts.append(f"{name}: {', '.join(paths[:count])}")
        used += len(parts[-1]) + 2
        shown += count
        if count < len(paths):
            break
    rest = len(pairs) - shown
    return "; ".join(parts) + (f" and {rest} more" if rest else "")


def _guard(obj: JSON, *, version: bool) -> list[JSON]:
    """JSON patch tests that make a patch apply to this very object only (with ``version``, to this version of
    it only)."""
    meta = obj.get("metadata") or {}
    tests = [{"op": "test", "path": "/metadata/uid", "value": meta.get("uid")}]
    if version:
        tests.append({"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")})
    return tests


def removal_patch(obj: JSON, held: Mapping[str, Iterable[FieldPath]]) -> list[JSON]:
    """A JSON patch removing from ``obj`` every field of ``held`` that is there, for a dry run. Items of a list go
    from the last position to the first, so that each removal leaves the positions of the next valid; a field
    inside another one removed goes with it. Any version of the object will do (a controller's status update right
    after an apply must not fail it); one whose fields moved fails the patch."""
    found = {tuple(tokens) for paths in held.values() for path in paths
             if (tokens := locate(obj, path)) is not None}
    outermost = [tokens for tokens in found if not any(tokens[:n] in found for n in range(1, len(tokens)))]
    outermost.sort(key=lambda tokens: [(0, token, "") if isinstance(token, int) else (1, 0, token)
                                       for token in tokens], reverse=True)
    return [*_guard(obj, version=False), *({"op": "remove", "path": pointer(list(tokens))} for tokens in outermost)]


def changed_by_removal(obj: JSON, without: JSON,
                       held: Mapping[str, Iterable[FieldPath]]) -> dict[str, list[FieldPath]]:
    """The fields of ``held`` whose value in ``obj`` differs from the one in ``without`` (``obj`` with those
    fields removed, as the server answered a dry run of :func:`removal_patch`): gone, or defaulted to another
    value. A field back with the same value is a default the server sets anyway."""
    changed = {manager: [path for path in paths if (before := value_at(obj, path)) is MISSING
                         or value_at(without, path) != before]
               for manager, paths in held.items()}
    return {manager: paths for manager, paths in changed.items() if paths}


def takeover_patch(obj: JSON, field_manager: str, managers: Iterable[str], *, api_version: str,
                   time: str) -> list[JSON]:
    """A JSON patch (of this version of ``obj``) giving every field that ``managers`` hold in writes to the object
    itself to ``field_manager``'s apply entry, their entries removed: the owner's next apply then removes each of
    those fields it does not declare, as it removes what it stopped declaring. Subresource entries stay."""
    taken = set(managers) - {field_manager}
    entries = (obj.get("metadata") or {}).get("managedFields") or []
    kept: list[JSON] = []
    moved: list[JSON] = []
    ours: JSON | None = None
    for entry in entries:
        if entry.get("subresource") or entry.get("manager") not in taken:
            if entry.get("manager") == field_manager and entry.get("operation") == "Apply" and not entry.get(
                    "subresource"):
                ours = entry
            kept.append(entry)
        else:
            moved.append(_fields(entry))
    if ours is None:
        ours = {"manager": field_manager, "operation": "Apply", "apiVersion": api_version, "fieldsType": "FieldsV1",
                "fieldsV1": {}}
        kept.append(ours)
    index = next(i for i, entry in enumerate(kept) if entry is ours)
    kept[index] = {**ours, "time": time, "fieldsV1": union(_fields(ours), *moved)}
    return [*_guard(obj, version=True), {"op": "replace", "path": "/metadata/managedFields", "value": kept}]
