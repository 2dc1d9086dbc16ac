"""Which watch events of a stack's objects the healer compares with the desired state (Healer.observe).

A comparison decodes, stamps and walks the desired object (a CRD's schema is hundreds of KiB); a release's first
apply brings several events per object (a CRD's creation, NamesAccepted, Established), so a comparison per event
cost seconds of the event loop. An object found in line is not compared again until its generation, labels,
annotations or identity change.
"""

from __future__ import annotations

import asyncio

import pytest

from kfdef_operator.runtime import heal
from kfdef_operator.runtime.heal import Healer
from kfdef_operator.runtime.ownership import KEPT_ANNOTATIONS, KEPT_LABELS, Owner
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.ssa.changeset import Action, Change
from kfdef_operator.ssa.inventory import ref_of
from kfdef_operator.ssa.live import summarize

OWNER = Owner("kf", "kubeflow", "kfdef-uid")
CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
       "metadata": {"name": "widgets.example.io"},
       "spec": {"group": "example.io", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets"},
                "versions": [{"name": "v1", "served": True, "storage": True}]}}
REF = ref_of(CRD)


def live_copy(*, uid: str = "crd-uid", generation: int = 1, conditions: tuple[str, ...] = (),
              group: str = "example.io") -> dict:
    """The CRD as a watch event shows it: stamped, with the server's fields and some status conditions."""
    obj = OWNER.stamp(CRD, namespaced=False, adopted=False)
    obj = {**obj, "spec": {**obj["spec"], "group": group},
           "metadata": {**obj["metadata"], "uid": uid, "generation": generation, "resourceVersion": "7"},
           "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}
    return obj


@pytest.fixture
def compared(monkeypatch) -> list[dict]:
    """The live objects the healer compares with the desired state, in order."""
    seen: list[dict] = []
    real = heal.drifted

    def counting(desired: dict, live: dict) -> bool:
        seen.append(live)
        return real(desired, live)

    monkeypatch.setattr(heal, "drifted", counting)
    return seen


def run(stack: Stack, events: list[tuple[str, dict]]) -> Healer:
    """Hand the events to a healer of ``stack``; returns it with its pending heals (workers cancelled)."""
    async def scenario() -> Healer:
        healer = Healer(lambda _: None, None, None, {stack.key: stack}, lambda _: None)  # type: ignore[arg-type]
        for event_type, obj in events:
            healer.observe(stack, event_type, REF, summarize(obj, labels=KEPT_LABELS, annotations=KEPT_ANNOTATIONS),
                           obj)
        pending = {key: dict(refs) for key, refs in healer._pending.items()}
        healer.halt()
        healer._pending.update(pending)
        return healer

    return asyncio.run(scenario())


def new_stack() -> Stack:
    stack = Stack(OWNER, 1)
    stack.want({REF: CRD})
    return stack


def test_status_updates_during_the_first_apply_are_not_compared_again(compared):
    run(new_stack(), [("ADDED", live_copy()),
                      ("MODIFIED", live_copy(conditions=("NamesAccepted",))),
                      ("MODIFIED", live_copy(conditions=("NamesAccepted", "Established")))])
    assert len(compared) == 1


def test_a_new_generation_is_compared_again(compared):
    run(new_stack(), [("ADDED", live_copy()), ("MODIFIED", live_copy(generation=2))])
    assert len(compared) == 2


def test_a_drift_found_during_the_first_apply_is_kept_for_after_it(compared):
    stack = new_stack()
    healer = run(stack, [("ADDED", live_copy(group="other.io")), ("MODIFIED", live_copy(group="other.io"))])
    assert len(compared) == 2  # a drifted object is never taken as in line
    assert healer._deferred[stack.key] == {REF}


def test_an_object_created_again_with_the_same_stamps_is_compared_again(compared):
    # Deleted and created again (another uid) while the watch was down, by someone copying the stamps, with another
    # spec at generation 1: the relisting shows it as a change.
    stack = new_stack()
    stack.record_apply([Change(REF, Action.CREATED)])
    healer = run(stack, [("ADDED", live_copy()), ("MODIFIED", live_copy(uid="another-uid", group="other.io"))])
    assert len(compared) == 2
    assert healer._pending[stack.key][REF].cause == heal.DRIFT
