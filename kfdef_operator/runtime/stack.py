"""One KfDef's stack as the operator knows it: what it wants, what happened, what is wrong.

A :class:`Stack` is the one place every step reports into: the reconcile
pipeline (its step, failure and per-object changes), the healer (heal results
and fights) and teardown. The status writer computes the KfDef's status from
it, so status always says what the stack's results say, for the generation
they belong to.

It is a cache: everything needed to rebuild it lives in the API server (the
KfDef, its status inventory, the stamps on objects) and the sources.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from kfdef_operator.api.types import JSON
from kfdef_operator.runtime import inventory as status_inventory
from kfdef_operator.runtime.identity import StackIdentity
from kfdef_operator.runtime.inventory import InventoryEntry
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.ssa.changeset import Action, Change, ChangeSet
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.webhooks import Webhook, explain


@dataclass(frozen=True)
class Failure:
    """Why a generation could not be applied (or torn down): a condition reason and a message for people."""

    reason: str
    message: str
    retrying: bool


@dataclass(frozen=True)
class Plan:
    """What a stack holds for the generation about to be applied: built whole before the apply (the controller's
    builder), taken in one call (:meth:`Stack.take`)."""

    objects: Mapping[ObjectRef, JSON]            # normalised, namespace resolved, in render order
    #: Served kinds; custom resources of the stack's own CRDs are added once their CRD serves them.
    resources: dict[ObjectRef, Resource]
    application_of: dict[ObjectRef, str]
    applications: list[str]                      # the KfDef's, in its order
    run_once: set[ObjectRef]                     # never re-created once gone
    webhooks: dict[str, Webhook]
    rejected: list[Change]                       # never sent: unserved, out of scope
    #: Fields reported in status besides conditions (sources, reposCache, warnings, upgrades).
    reported: JSON


_versions = itertools.count(1)


class CompactObjects(Mapping[ObjectRef, JSON]):
    """Objects kept as compact JSON and decoded on each read, which returns a fresh copy.

    A stack's desired state lives as long as the stack. As dicts, Kubeflow v1.11.0's 653 objects take 22 MiB and
    35,000 containers that each full garbage collection of the process walks (30 to 40 ms, the tail of the heal
    times); as JSON bytes they take 4.5 MiB and nothing to walk. A read (a heal, a drift check) decodes one object.
    ``version`` tells one desired state from the next (a new render, a new generation).
    """

    __slots__ = ("_encoded", "version")

    def __init__(self, objects: Mapping[ObjectRef, JSON] | None = None) -> None:
        self._encoded = {ref: json.dumps(obj, separators=(",", ":")).encode()
                         for ref, obj in (objects or {}).items()}
        self.version = next(_versions)

    def __getitem__(self, ref: ObjectRef) -> JSON:
        decoded: JSON = json.loads(self._encoded[ref])
        return decoded

    def __contains__(self, ref: object) -> bool:
        return ref in self._encoded

    def __iter__(self) -> Iterator[ObjectRef]:
        return iter(self._encoded)

    def __len__(self) -> int:
        return len(self._encoded)


@dataclass
class Stack:
    """What one KfDef wants and what became of it."""

    owner: Owner
    generation: int
    #: The stack's status as last written (or as found in the API server): the base of every status diff.
    status: JSON = field(default_factory=dict)
    inventory: dict[ObjectRef, InventoryEntry] = field(default_factory=dict)

    # -- the desired state of the generation being (or last) applied --------------------------------
    desired: CompactObjects = field(default_factory=CompactObjects)      # normalised, namespace resolved
    #: (group, kind) of the custom resources that the stack's own CRDs serve.
    crd_kinds: frozenset[tuple[str, str]] = frozenset()
    resources: dict[ObjectRef, Resource] = field(default_factory=dict)
    application_of: dict[ObjectRef, str] = field(default_factory=dict)
    applications: list[str] = field(default_factory=list)
    run_once: set[ObjectRef] = field(default_factory=set)                 # never re-created once gone
    #: The stack's own fail-closed admission webhooks, by name: failed calls to them are named in results.
    webhooks: dict[str, Webhook] = field(default_factory=dict)
    #: Fields the pipeline reports besides conditions (sources, upgrades, reposCache).
    reported: JSON = field(default_factory=dict)
    #: What the prune of this generation kept for holding objects the stack did not create (Namespaces, CRDs), one
    #: note each, named in ``status.warnings``: they are no longer the stack's, so nothing else would tell of them.
    held: list[str] = field(default_factory=list)

    # -- results ----------------------------------------------------------------------------------
    #: The reconcile step shown while a new generation is worked on: (reason, message).
    step: tuple[str, str] | None = None
    failure: Failure | None = None
    applied_generation: int | None = None
    changes: dict[ObjectRef, Change] = field(default_factory=dict)      # per object, updated by heals
    rejected: list[Change] = field(default_factory=list)                # never sent: unserved, out of scope
    problems: dict[str, str] = field(default_factory=dict)              # need a person; keyed by cause
    #: When (monotonic) the resync that the last run scheduled is due; None before the first run since a start.
    #: From then on, objects refused for their content are sent again.
    resync_at: float | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    #: Who the stack's requests act as, settled at the start of every reconcile and teardown (None before).
    identity: StackIdentity | None = None
    suspended: bool = False
    deleting: bool = False
    teardown: tuple[str, bool] | None = None                            # (message, stuck)

    @property
    def key(self) -> tuple[str, str]:
        return self.owner.key

    @property
    def applied(self) -> bool:
        """The current generation's apply finished: its results describe the stack."""
        return self.applied_generation == self.generation and self.step is None and self.failure is None

    def want(self, objects: Mapping[ObjectRef, JSON]) -> None:
        """The desired state of the generation about to be applied."""
        self.desired = CompactObjects(objects)
        self.crd_kinds = frozenset(
            (str(spec.get("group", "")), str((spec.get("names") or {}).get("kind", "")))
            for spec in ((obj.get("spec") or {}) for ref, obj in objects.items()
                         if ref.kind == "CustomResourceDefinition"))

    def take(self, plan: Plan) -> None:
        """The plan of the generation about to be applied: its objects and everything known of them."""
        self.want(plan.objects)
        self.resources = plan.resources
        self.application_of = plan.application_of
        self.applications = plan.applications
        self.run_once = plan.run_once
        self.webhooks = plan.webhooks
        self.rejected = plan.rejected
        self.reported.update(plan.reported)

    def reload(self, status: JSON) -> None:
        """The KfDef's status as read from the API server now (another replica may have written it)."""
        self.status = dict(status)
        self.inventory = status_inventory.decode(self.status)

    def begin(self, generation: int, *, announce: bool) -> None:
        """A reconcile of ``generation`` starts; ``announce`` shows its steps in status (new generations only)."""
        if generation != self.generation:
            self.failure = None
            self.held = []
        self.generation = generation
        self.step = ("Progressing", f"reconciling generation {generation}") if announce else None

    def fail(self, failure: Failure) -> None:
        """The run stopped short: its generation's apply shows the failure; a teardown shows itself stuck."""
        if self.deleting:
            self.teardown = (failure.message, True)
        else:
            self.failure = failure
            self.step = None

    def explained(self, change: Change) -> Change:
        """``change`` as the stack keeps it: without the object the server returned (nothing reads it after the
        apply, and a CRD's can weigh hundreds of KiB), a failed call to one of the stack's own webhooks spelled
        out in its message."""
        message = change.message if change.ok else explain(change.message, self.webhooks)
        return change if message == change.message and change.live is None else replace(change, message=message,
                                                                                          live=None)

    def record_prune(self, changes: ChangeSet) -> None:
        """What a prune of the current generation kept: the notes of the objects it held are kept with those of
        earlier prunes of the generation (each released, so pruned once)."""
        held = [f"{change.ref}: {change.message}" for change in changes if change.action is Action.HELD]
        self.held = [*self.held, *(note for note in held if note not in self.held)]

    def record_apply(self, changes: ChangeSet) -> None:
        """The apply of the current generation finished with these per-object results."""
        self.changes = {change.ref: self.explained(change) for change in changes}
        self.applied_generation = self.generation
        self.step = None
        self.failure = None

    def record_heal(self, change: Change) -> None:
        """A heal's result replaces the object's outcome: a healed object is applied again, a failed one failed.
        What the last apply judged of the fields other managers set on it stays (a heal does not judge them)."""
        if change.ref in self.desired:
            previous = self.changes.get(change.ref)
            if previous is not None and previous.foreign and not change.foreign:
                change = replace(change, foreign=previous.foreign)
            self.changes[change.ref] = self.explained(change)

    def failed_changes(self) -> list[Change]:
        return [*self.rejected, *(c for c in self.changes.values() if c.action.failed)]

    def unchanged_inventory(self) -> bool:
        return all(ref in self.inventory for ref in self.desired)

    def counts(self) -> dict[Action, int]:
        counted: dict[Action, int] = {}
        for change in self.changes.values():
            counted[change.action] = counted.get(change.action, 0) + 1
        return counted
