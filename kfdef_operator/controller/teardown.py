"""A deleted KfDef's stack torn down: its objects deleted in reverse waves, adopted ones released.

:class:`Teardown` acts as the stack's identity through :meth:`ResourceManager.teardown` and returns a
:class:`~kfdef_operator.controller.outcome.RunOutcome`: what will not go yet (retried with a backoff), or the
stack released once its inventory is empty, which the reconciler reports by removing the finalizer; a KfDef
deleted with ``--cascade=orphan``, or whose ServiceAccount is gone, is released without deleting anything.
"""

from __future__ import annotations

from kfdef_operator.api.kfdef import InvalidKfDef, service_account_name
from kfdef_operator.api.names import FINALIZER
from kfdef_operator.api.types import JSON
from kfdef_operator.controller.failures import Fail
from kfdef_operator.controller.outcome import Event, Retry, RunOutcome, StatusWrite, WriteStatus
from kfdef_operator.runtime import conditions as cond
from kfdef_operator.runtime.heal import Healer
from kfdef_operator.runtime.identity import Identities, StackIdentity
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.ssa.changeset import Action

#: Added by the API server when a KfDef is deleted with propagationPolicy Orphan (kubectl --cascade=orphan).
ORPHAN_FINALIZER = "orphan"


class Teardown:
    """Tears stacks down as their identities; ``wave_timeout`` bounds the wait for each wave of deletions."""

    def __init__(self, identities: Identities, healer: Healer, *, wave_timeout: float) -> None:
        self._identities = identities
        self._healer = healer
        self._wave_timeout = wave_timeout

    async def run(self, stack: Stack, body: JSON, write_status: WriteStatus) -> RunOutcome:
        """Delete everything the KfDef created (in reverse dependency order), keep what it adopted: the outcome says
        whether the stack is released (its finalizer removed) or the teardown retried.

        The finalizer stays until the inventory is empty, so nothing is ever orphaned, with two exceptions:
        a KfDef deleted with ``--cascade=orphan`` (Kubernetes' own ``orphan`` finalizer, which also makes the
        garbage collector drop the ownerReferences) is let go without touching its objects, and so is one whose
        ServiceAccount is gone (nothing may be deleted with another identity; deleting a namespace removes its
        ServiceAccounts and KfDefs together), though the garbage collector still deletes its dependents. A suspended
        KfDef is torn down like any other: deleting it is its owner's explicit request. ``write_status`` tells how
        many objects are being deleted before the waves start.
        """
        stack.deleting = True
        await self._healer.forget(stack)
        finalizers = body["metadata"].get("finalizers") or []
        if FINALIZER not in finalizers:
            return RunOutcome(StatusWrite.NONE)
        if stack.inventory and ORPHAN_FINALIZER in finalizers:
            orphaned = Event("Normal", "Orphaned", f"the KfDef was deleted with --cascade=orphan: its "
                                                   f"{len(stack.inventory)} objects were left in place")
            stack.inventory.clear()
            return RunOutcome(StatusWrite.NONE, (orphaned,), released=True)
        if not stack.inventory:
            return RunOutcome(StatusWrite.NONE, released=True)
        identity = self._identity(stack, body)
        missing = await self._identities.unavailable(identity)
        if missing is not None:
            orphaned = self._orphaned(stack, missing)
            stack.inventory.clear()
            return RunOutcome(StatusWrite.NONE, (orphaned,), released=True)
        stack.teardown = (f"deleting {len(stack.inventory)} objects", False)
        await write_status()
        result = await self._identities.manager(identity).teardown(
            stack.owner, {r: e.version for r, e in stack.inventory.items()}, wave_timeout=self._wave_timeout)
        for change in result.changes:
            stack.inventory.pop(change.ref, None)
        if not result.done:
            message = f"{cond.counted(len(result.remaining), 'object')} not deleted yet: " + cond.list_objects(
                f"{ref} ({why})" for ref, why in result.remaining)
            stack.teardown = (message, True)
            return RunOutcome(events=(Event("Warning", "TeardownStuck", message),), next_run=Retry(5.0, cap=120.0))
        deleted = Event("Normal", "Deleted", f"deleted {result.changes.count(Action.DELETED, Action.GONE)} objects, "
                                             f"released {result.changes.count(Action.RELEASED)} that were not the "
                                             "stack's to delete")
        return RunOutcome(events=(deleted,), released=True)

    def _identity(self, stack: Stack, body: JSON) -> StackIdentity:
        """Who deletes the stack (:class:`Fail` when ``spec.serviceAccountName`` is invalid)."""
        try:
            stack.identity = self._identities.of(stack.owner.namespace, service_account_name(body))
        except InvalidKfDef as error:
            raise Fail("InvalidSpec", f"{error}; the stack is deleted once spec.serviceAccountName is corrected",
                       retry=False) from None
        return stack.identity

    @staticmethod
    def _orphaned(stack: Stack, missing: str) -> Event:
        """What becomes of the stack's objects when its ServiceAccount is gone (``missing`` says which)."""
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
        return Event("Warning", "Orphaned", message)
