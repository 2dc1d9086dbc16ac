"""Watch events of the operator's objects, routed to the stack that wants the object: its heal, then its status.

The tracker hands every event of a stamped object to :class:`StackEvents` (the composition root wires it), which
finds the stack by the object's instance label and leaves alone the objects of a stack being torn down and those
no stack wants. The healer decides whether the event calls for a heal (:meth:`Healer.observe`, through the
:class:`~kfdef_operator.runtime.heal_policy.HealPolicy`); then the stack's status is refreshed, once it has results
(an object's readiness shows in it). Events stay within runtime from the watch to the heal.
"""

from __future__ import annotations

from collections.abc import Callable

from kfdef_operator.api.types import JSON
from kfdef_operator.runtime.heal import Healer
from kfdef_operator.runtime.heal_policy import HealRequest
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.runtime.tracker import instance_label
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.live import LiveObject


class StackEvents:
    """The tracker's listener: ``labelled(label)`` is the stack whose objects carry an instance label (None: no
    stack served here), ``refresh(stack)`` asks for a status refresh."""

    def __init__(self, labelled: Callable[[str], Stack | None], healer: Healer,
                 refresh: Callable[[Stack], None]) -> None:
        self._labelled = labelled
        self._healer = healer
        self._refresh = refresh

    def __call__(self, event_type: str, ref: ObjectRef, live: LiveObject, obj: JSON | None) -> HealRequest | None:
        """Route one watch event (``obj``: the object it carries); the heal it scheduled, if any."""
        stack = self._labelled(instance_label(live) or "")
        if stack is None or stack.deleting or ref not in stack.desired:
            return None
        request = self._healer.observe(stack, event_type, live, obj)
        if stack.changes:
            self._refresh(stack)
        return request
