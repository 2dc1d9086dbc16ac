"""The operator's finalizer on a KfDef: added before anything is applied, removed once its stack is torn down."""

from __future__ import annotations

from kfdef_operator.api.names import FINALIZER, kfdef_path
from kfdef_operator.api.types import JSON
from kfdef_operator.controller.failures import Fail
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.ssa.client import KubeApiError, KubeClient


async def ensure_finalizer(kube: KubeClient, stack: Stack, body: JSON) -> None:
    """Hold the KfDef (``body``, as last seen) until its stack is torn down (kfctl's finalizer name)."""
    if FINALIZER in ((body.get("metadata") or {}).get("finalizers") or ()):
        return
    await patch_finalizers(kube, stack, add=True)


async def patch_finalizers(kube: KubeClient, stack: Stack, *, add: bool) -> None:
    """Add or remove our finalizer with a resourceVersion precondition (others' finalizers are kept)."""
    path = kfdef_path(*stack.key)
    for _ in range(5):
        current = await kube.get(path)
        if current is None or current["metadata"].get("uid") != stack.owner.uid:
            return
        finalizers = list(current["metadata"].get("finalizers") or [])
        if (FINALIZER in finalizers) == add:
            return
        finalizers = [*finalizers, FINALIZER] if add else [f for f in finalizers if f != FINALIZER]
        try:
            await kube.request("PATCH", path, content_type="application/merge-patch+json", body={
                "metadata": {"finalizers": finalizers, "resourceVersion": current["metadata"]["resourceVersion"]}})
            return
        except KubeApiError as error:
            if error.status != 409:
                raise
    raise Fail("FinalizerConflict", "the KfDef kept changing while its finalizer was updated; retrying", retry=True)
