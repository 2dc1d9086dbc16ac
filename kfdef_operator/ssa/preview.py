"""What applying a set of objects and pruning the stale ones would change, found with server-side dry runs.

:func:`preview` takes the resource manager's own decisions (:attr:`ApplyOptions.dry_run`): conflicts with
another owner, objects a person opted out, adoption of unowned objects, run-once objects kept absent,
re-creation on immutable fields, releases and deletes at prune. Each object the server would store is
compared field by field with the live one, server-managed metadata and status aside (as the heal compares,
:func:`~kfdef_operator.ssa.drift.comparable`): an apply that changes nothing is ``unchanged``, even when the
owner would send it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.apply import ApplyOptions
from kfdef_operator.ssa.changeset import Action, Change
from kfdef_operator.ssa.claims import Ownership
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.ssa.drift import comparable
from kfdef_operator.ssa.inventory import ObjectRef, ref_of
from kfdef_operator.ssa.manager import ResourceManager

ABSENT = "(absent)"
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class FieldChange:
    """One field the apply would change: its path, and its value before and after (:data:`ABSENT` when none)."""

    path: str
    before: Any
    after: Any

    def __str__(self) -> str:
        return f"{self.path}: {_show(self.before)} -> {_show(self.after)}"


@dataclass
class Difference:
    """What would happen to one object: the manager's action, why, and for updates the fields that change."""

    ref: ObjectRef
    action: Action
    message: str = ""
    fields: list[FieldChange] = field(default_factory=list)
    #: The live object carries the owner's digest of this very desired state, yet differs: someone changed it.
    drifted: bool = False

    @property
    def changes_something(self) -> bool:
        """The cluster would change, or the object could not be applied as asked."""
        return self.action not in (Action.UNCHANGED, Action.SKIPPED, Action.GONE)


def field_changes(before: Any, after: Any, path: str = "") -> list[FieldChange]:
    """The leaves that differ between two JSON values (lists of equal length compared item by item)."""
    if isinstance(before, dict) and isinstance(after, dict):
        changes = []
        for key in [*before, *(k for k in after if k not in before)]:
            child = _join(path, key)
            if key not in after:
                changes.append(FieldChange(child, before[key], ABSENT))
            elif key not in before:
                changes.append(FieldChange(child, ABSENT, after[key]))
            else:
                changes.extend(field_changes(before[key], after[key], child))
        return changes
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [change for index, (old, new) in enumerate(zip(before, after, strict=True))
                for change in field_changes(old, new, f"{path}[{index}]")]
    return [] if before == after else [FieldChange(path, before, after)]


def _join(path: str, key: str) -> str:
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _show(value: Any, limit: int = 160) -> str:
    text = value if value is ABSENT else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def preview(manager: ResourceManager, ownership: Ownership, objects: list[tuple[JSON, Resource]],
                  resolve_later: list[JSON], stale: Mapping[ObjectRef, str],
                  options: ApplyOptions = ApplyOptions()) -> list[Difference]:
    """Dry-run the apply of ``objects`` (and ``resolve_later``, as :meth:`ResourceManager.apply_all` takes them)
    and the prune of ``stale``; one :class:`Difference` per object, in apply then prune order."""
    applied = await manager.apply_all(ownership, objects, resolve_later, dataclasses.replace(options, dry_run=True))
    created_namespaces = {c.ref.name for c in applied if c.ref.kind == "Namespace" and c.ref.group == ""
                          and c.action is Action.CREATED}
    resources = {ref_of(obj): resource for obj, resource in objects}
    updates = [c for c in applied if c.action in (Action.CONFIGURED, Action.ADOPTED) and c.live is not None]
    live = await manager.kube.gather_limited([manager.kube.get(resources[c.ref].path_of(c.ref)) for c in updates],
                                             manager.concurrency)
    before = {change.ref: current for change, current in zip(updates, live, strict=True)}
    differences = []
    for change in applied:
        if change.action is Action.FAILED and change.ref.namespace in created_namespaces:
            # A dry run cannot create the namespace first: the server refused the object for its absence.
            differences.append(Difference(change.ref, Action.CREATED, "not checked by the API server: its "
                                                                      "namespace is created by this set"))
        elif change.ref in before:
            differences.append(_update(change, before[change.ref], ownership))
        else:
            differences.append(Difference(change.ref, change.action, change.message))
    pruned = await manager.prune(ownership, stale, dry_run=True, force=options.force)
    differences.extend(Difference(change.ref, change.action, change.message) for change in pruned)
    return differences


def _update(change: Change, live: JSON | BaseException | None, ownership: Ownership) -> Difference:
    if isinstance(live, BaseException) or live is None:
        why = f"could not read the live object: {live}" if live is not None else "the live object went away"
        return Difference(change.ref, change.action, why)
    assert change.live is not None
    fields = field_changes(comparable(live), comparable(change.live))
    if not fields:
        return Difference(change.ref, Action.UNCHANGED, change.message)
    stamped_before = ownership.unchanged(live.get("metadata") or {}, change.live)
    return Difference(change.ref, change.action, change.message, fields, drifted=stamped_before)
