"""The stacks this replica holds: one :class:`Stack` and one :class:`StatusWriter` per KfDef.

:class:`StackRegistry` creates a KfDef's stack on its first run (decoding ``status.inventory`` once) and again
when the KfDef was re-created under the same name; it finds a stack by the instance label of a watched object,
and names the watches the stacks' objects need. (A KfDef's failures are counted by the work queue.)
"""

from __future__ import annotations

from collections.abc import Iterable

from kfdef_operator.api.types import JSON
from kfdef_operator.runtime import inventory
from kfdef_operator.runtime.events import EventRecorder
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.runtime.status import StatusWriter
from kfdef_operator.runtime.tracker import Tracker, WatchTarget
from kfdef_operator.ssa.client import KubeClient
from kfdef_operator.ssa.holdings import is_held_note

Key = tuple[str, str]


class StackRegistry:
    """Stacks and status writers by KfDef (namespace, name); ``scoped``: the operator is namespace-scoped."""

    def __init__(self, kube: KubeClient, tracker: Tracker, events: EventRecorder, *, health_timeout: float,
                 scoped: bool) -> None:
        self._kube = kube
        self._tracker = tracker
        self._events = events
        self._health_timeout = health_timeout
        self._scoped = scoped
        self._inventory_format = inventory.InventoryFormat()  # what the KfDef CRD keeps: one CRD, one answer
        self.stacks: dict[Key, Stack] = {}
        self.writers: dict[Key, StatusWriter] = {}
        self._by_label: dict[str, Key] = {}

    def stack_for(self, body: JSON) -> Stack:
        """The KfDef's stack, created (with its status writer) for a KfDef not seen before or re-created."""
        meta = body["metadata"]
        owner = Owner(meta["name"], meta["namespace"], meta.get("uid", ""))
        stack = self.stacks.get(owner.key)
        if stack is None or stack.owner.uid != owner.uid:
            status = dict(body.get("status") or {})
            generation = meta.get("generation", 0)
            # What a prune of this generation held is no longer in the inventory: only its note tells of it.
            held = [note for note in status.get("warnings") or [] if is_held_note(note)] \
                if status.get("observedGeneration") == generation else []
            stack = Stack(owner=owner, generation=generation, status=status, inventory=inventory.decode(status),
                          held=held)
            self.stacks[owner.key] = stack
            self.writers[owner.key] = StatusWriter(self._kube, stack, self._tracker, self._events,
                                                   health_timeout=self._health_timeout,
                                                   inventory_format=self._inventory_format)
            self._by_label[owner.label] = owner.key
        return stack

    def labelled(self, label: str) -> Stack | None:
        """The stack whose objects carry this instance label."""
        key = self._by_label.get(label)
        return self.stacks.get(key) if key else None

    def release(self, key: Key) -> Stack | None:
        """Drop the KfDef's stack and its status writer (which writes nothing from now on)."""
        stack = self.stacks.pop(key, None)
        writer = self.writers.pop(key, None)
        if writer is not None:
            writer.forget()
        if stack is not None:
            self._by_label.pop(stack.owner.label, None)
        return stack

    def clear(self) -> None:
        """Drop every stack at once; no writer writes from now on."""
        for writer in self.writers.values():
            writer.forget()
        self.stacks.clear()
        self.writers.clear()
        self._by_label.clear()

    def targets(self, stacks: Iterable[Stack]) -> set[WatchTarget]:
        """The watches the stacks' objects need: per kind, or per kind and namespace when namespace-scoped."""
        return {(resource, ref.namespace if self._scoped else "") for stack in stacks
                for ref, resource in stack.resources.items()}
