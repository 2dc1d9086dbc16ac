"""A deleted KfDef's stack torn down: its objects deleted in reverse waves, adopted ones released, finalizer removed.

:class:`Teardown` acts as the stack's identity through :meth:`ResourceManager.teardown`, reports what will not go
(retried with a backoff), and removes the finalizer only once the inventory is empty; a KfDef deleted with
``--cascade=orphan``, or whose ServiceAccount is gone, is let go without deleting anything.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from kfdef_operator.api.kfdef import InvalidKfDef, service_account_name
from kfdef_operator.api.names import FINALIZER
from kfdef_operator.api.types import JSON
from kfdef_operator.controller.failures import Fail
from kfdef_operator.controller.finalizer import patch_finalizers
from kfdef_operator.controller.registry import Key, StackRegistry
from kfdef_operator.runtime import conditions as cond
from kfdef_operator.runtime.events import EventRecorder
from kfdef_operator.runtime.heal import Healer
from kfdef_operator.runtime.identity import Identities, StackIdentity
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.ssa.changeset import Action
from kfdef_operator.ssa.client import KubeClient

#: Added by the API server when a KfDef is deleted with propagationPolicy Orphan (kubectl --cascade=orphan).
ORPHAN_FINALIZER = "orphan"


class Teardown:
    """Tears stacks down; ``forget`` drops everything held for a KfDef once its finalizer is removed."""

    def __init__(self, kube: KubeClient, registry: StackRegistry, identities: Identities, events: EventRecorder,
                 healer: Healer, forget: Callable[[Key], Awaitable[None]], *, wave_timeout: float) -> None:
        self._kube = kube
        self._registry = registry
        self._identities = identities
        self._events = events
        self._healer = healer
        self._forget = forget
        self._wave_timeout = wave_timeout

    async def run(self, stack: Stack, body: JSON) -> float | None:
        """Delete everything the KfDef created (in reverse dependency order), keep what it adopted.

        The finalizer stays until the inventory is empty, so nothing is ever orphaned, with two exceptions:
        a KfDef deleted with ``--cascade=orphan`` (Kubernetes' own ``orphan`` finalizer, which also makes the
        garbage collector drop the ownerReferences) is let go without touching its objects, and so is one whose
        ServiceAccount is gone (nothing may be deleted with another identity; deleting a namespace removes its
        ServiceAccounts and KfDefs together), though the garbage collector still deletes its dependents. A suspended
        KfDef is torn down like any other: deleting it is its
        owner's explicit request.
        """
        writer = self._registry.writers[stack.key]
        stack.deleting = True
        await self._healer.forget(stack)
        finalizers = body["metadata"].get("finalizers") or []
        if FINALIZER not in finalizers:
            return None
        if stack.inventory and ORPHAN_FINALIZER in finalizers:
            await self._events.record(stack.owner, "Normal", "Orphaned",
                                      f"the KfDef was deleted with --cascade=orphan: its {len(stack.inventory)} "
                                      "objects were left in place")
            stack.inventory.clear()
        identity = await self._identity(stack, body) if stack.inventory else None
        if identity is not None:
            stack.teardown = (f"deleting {len(stack.inventory)} objects", False)
            await writer.update()
            result = await self._identities.manager(identity).teardown(
                stack.owner, {r: e.version for r, e in stack.inventory.items()}, wave_timeout=self._wave_timeout)
            for change in result.changes:
                stack.inventory.pop(change.ref, None)
            if not result.done:
                message = f"{cond.counted(len(result.remaining), 'object')} not deleted yet: " + cond.list_objects(
                    f"{ref} ({why})" for ref, why in result.remaining)
                stack.teardown = (message, True)
                await writer.update()
                await self._events.record(stack.owner, "Warning", "TeardownStuck", message)
                return self._registry.retry_delay(stack.key, base=5.0, cap=120.0)
            await self._events.record(stack.owner, "Normal", "Deleted",
                                      f"deleted {result.changes.count(Action.DELETED, Action.GONE)} objects, released "
                                      f"{result.changes.count(Action.RELEASED)} that were not the stack's to delete")
            await writer.update()
        await patch_finalizers(self._kube, stack, add=False)
        await self._forget(stack.key)
        return None

    async def _identity(self, stack: Stack, body: JSON) -> StackIdentity | None:
        """Who deletes the stack; None when its ServiceAccount is gone (the operator then deletes nothing)."""
        try:
            identity = self._identities.of(stack.owner.namespace, service_account_name(body))
        except InvalidKfDef as error:
            raise Fail("InvalidSpec", f"{error}; the stack is deleted once spec.serviceAccountName is corrected",
                       retry=False) from None
        stack.identity = identity
        missing = await self._identities.unavailable(identity)
        if missing is None:
            return identity
        namespace = stack.owner.namespace
        here = [str(ref) for ref in stack.inventory if ref.namespace == namespace]
        elsewhere = [str(ref) for ref in stack.inventory if ref.namespace != namespace]
        # The operator deletes nothing, but those it created in the KfDef's namespace name the KfDef in their
        # ownerReferences: Kubernetes' garbage collector deletes them with it (adopted ones have no such
        # reference and stay). Said as it happens, so that nobody is told they were kept.
        message = f"{missing}, so the operator deletes none of its objects"
        if here:
            message += (f"; in {namespace}, the garbage collector deletes those the stack created (they name the "
                        f"KfDef as owner) and keeps adopted ones: {cond.list_objects(here)}")
        if elsewhere:
            message += f"; left in place: {cond.list_objects(elsewhere)}"
        await self._events.record(stack.owner, "Warning", "Orphaned", message)
        stack.inventory.clear()
        return None
