"""Typed results of apply, prune and delete: an :class:`Action` per object, gathered in a :class:`ChangeSet`;
:data:`Progress`, how a long apply or teardown reports how far it got."""

from __future__ import annotations

import collections
import enum
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.foreign import Foreign
from kfdef_operator.ssa.inventory import ObjectRef

#: Told (stage, objects done, objects in all) as an apply or a teardown goes.
Progress = Callable[[str, int, int], Awaitable[None]]

REFUSED_NOTE = "refused for its content; sent again at the next resync or when the KfDef or its sources change"
"""Starts the message of an object the API server refused for what it holds (:func:`refusal`). The KfDef's
``status.failures`` keeps the message, so that a run (after a restart too) knows the refusal was reported already."""


class Action(enum.Enum):
    """What happened to one object."""

    CREATED = "created"
    CONFIGURED = "configured"
    UNCHANGED = "unchanged"
    ADOPTED = "adopted"          # existed without an owner: applied, and released rather than deleted later
    SKIPPED = "skipped"          # left alone on purpose (opted out, or run-once and gone)
    CONFLICT = "conflict"        # held by another owner: never touched
    FAILED = "failed"
    DELETED = "deleted"
    RELEASED = "released"        # adopted or opted out: our stamps removed, the object kept
    HELD = "held"                # no longer desired, but holds others' objects: our stamps removed, kept (pruning)
    GONE = "gone"                # asked to delete what was already absent

    @property
    def applied(self) -> bool:
        """The object is in the state the owner asked for (or deliberately left as it is)."""
        return self in _APPLIED

    @property
    def failed(self) -> bool:
        return self in (Action.FAILED, Action.CONFLICT)

    @property
    def wrote(self) -> bool:
        """The action sent a write to the API server."""
        return self in _WRITES


_APPLIED = frozenset({Action.CREATED, Action.CONFIGURED, Action.UNCHANGED, Action.ADOPTED, Action.SKIPPED})
_WRITES = frozenset({Action.CREATED, Action.CONFIGURED, Action.ADOPTED, Action.DELETED, Action.RELEASED, Action.HELD})


def kept_answer(answer: JSON) -> JSON:
    """What a :class:`Change` keeps of the server's answer to a write: kind, apiVersion and metadata (without
    ``managedFields``), and of a CRD its spec without the versions' schemas and its status, which registering its
    kinds and waiting until it is Established read.

    An apply keeps every change until it ends: whole answers of a Kubeflow release (managed fields, status, CRD
    schemas of hundreds of KiB) made the operator's peak memory, which its heap then kept at rest.
    """
    kept: JSON = {"apiVersion": answer.get("apiVersion"), "kind": answer.get("kind"),
                  "metadata": {key: value for key, value in (answer.get("metadata") or {}).items()
                               if key != "managedFields"}}
    if answer.get("kind") == "CustomResourceDefinition":
        spec = answer.get("spec") or {}
        kept["spec"] = {**spec, "versions": [{key: value for key, value in version.items() if key != "schema"}
                                             for version in spec.get("versions") or []]}
        kept["status"] = answer.get("status") or {}
    return kept


@dataclass
class Change:
    """The action taken on one object, why, and the object the server returned (apply only; of a write,
    :func:`kept_answer`)."""

    ref: ObjectRef
    action: Action
    message: str = ""
    live: JSON | None = None
    #: Of an adopted object: the fields other managers set that the owner does not apply and that the object would
    #: lose or change without them (:mod:`~kfdef_operator.ssa.foreign`), as (manager, path).
    foreign: tuple[Foreign, ...] = ()

    @property
    def ok(self) -> bool:
        return self.action.applied

    @property
    def refused(self) -> bool:
        """The API server refused the object for its content: sending it unchanged again cannot help."""
        return self.action is Action.FAILED and self.message.startswith(REFUSED_NOTE)


def refusal(ref: ObjectRef, why: str, live: JSON | None = None) -> Change:
    """The failure of an object the API server refused for its content (``why``: the server's answer); ``live``:
    what a write of it left, when one was made (a CRD whose stored versions could not all be migrated)."""
    return Change(ref, Action.FAILED, f"{REFUSED_NOTE}: {why}", live=live)


@dataclass
class ChangeSet:
    """Changes in the order they were made."""

    changes: list[Change] = field(default_factory=list)

    def __iter__(self) -> Iterator[Change]:
        return iter(self.changes)

    def __len__(self) -> int:
        return len(self.changes)

    def extend(self, changes: Iterable[Change]) -> None:
        self.changes.extend(changes)

    def count(self, *actions: Action) -> int:
        return sum(1 for change in self.changes if change.action in actions)

    @property
    def failures(self) -> list[Change]:
        return [change for change in self.changes if change.action.failed]

    @property
    def written(self) -> list[Change]:
        return [change for change in self.changes if change.action.wrote]

    def summary(self) -> str:
        """``3 created, 580 unchanged, 1 failed``: counts in :class:`Action` order, zeros left out."""
        counts = collections.Counter(change.action for change in self.changes)
        return ", ".join(f"{counts[action]} {action.value}" for action in Action if counts[action]) or "nothing"
