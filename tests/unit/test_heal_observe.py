"""Which watch events of a stack's objects the healer compares with the desired state (Healer.observe).

A comparison decodes, stamps and walks the desired object (a CRD's schema is hundreds of KiB); a release's first
apply brings several events per object (a CRD's creation, NamesAccepted, Established), so a comparison per event
cost seconds of the event loop. An object found in line is not compared again until its generation, labels,
annotations or identity change. Nor is an event carrying the very version an apply of the operator's own answered
with (:class:`OwnWrites`): a release's first apply brings one per object, and it shows nothing anyone else changed.
"""

from __future__ import annotations

import asyncio

import pytest

from kfdef_operator.runtime import heal
from kfdef_operator.runtime.heal import Healer
from kfdef_operator.runtime.ownership import KEPT_ANNOTATIONS, KEPT_LABELS, Owner
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.ssa.access import ApiAccess
from kfdef_operator.ssa.apply import Applier
from kfdef_operator.ssa.changeset import Action, Change
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.ssa.inventory import ref_of
from kfdef_operator.ssa.live import OwnWrites, summarize

OWNER = Owner("kf", "kubeflow", "kfdef-uid")
CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
       "metadata": {"name": "widgets.example.io"},
       "spec": {"group": "example.io", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets"},
                "versions": [{"name": "v1", "served": True, "storage": True}]}}
REF = ref_of(CRD)


def live_copy(*, uid: str = "crd-uid", generation: int = 1, conditions: tuple[str, ...] = (),
              group: str = "example.io", resource_version: str = "7") -> dict:
    """The CRD as a watch event shows it: stamped, with the server's fields and some status conditions."""
    obj = OWNER.stamp(CRD, namespaced=False, adopted=False)
    obj = {**obj, "spec": {**obj["spec"], "group": group},
           "metadata": {**obj["metadata"], "uid": uid, "generation": generation,
                                     "resourceVersion": resource_version},
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


def run(stack: Stack, events: list[tuple[str, dict]], own_writes: OwnWrites | None = None) -> Healer:
    """Hand the events to a healer of ``stack``; returns it with its pending heals (workers cancelled)."""
    async def scenario() -> Healer:
        healer = Healer(lambda _: None, None, None, {stack.key: stack}, lambda _: None,  # type: ignore[arg-type]
                        own_writes)
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


def written(*versions: str) -> OwnWrites:
    """What the operator's applies of the CRD answered with, in order."""
    own = OwnWrites()
    for version in versions:
        own.wrote(REF, {"metadata": {"resourceVersion": version}})
    return own


@pytest.mark.parametrize("applied", [False, True], ids=["during the first apply", "after it"])
def test_the_version_an_apply_produced_is_not_compared(compared, applied):
    stack = new_stack()
    if applied:
        stack.record_apply([Change(REF, Action.CREATED)])
    healer = run(stack, [("ADDED", live_copy(resource_version="7")),
                         ("MODIFIED", live_copy(resource_version="8", conditions=("Established",)))], written("7"))
    assert compared == []  # nor the status update after it: same generation as a version found in line
    assert not healer._pending.get(stack.key) and not healer._deferred.get(stack.key)


@pytest.mark.parametrize("applied", [False, True], ids=["during the first apply", "after it"])
def test_a_version_someone_else_produced_is_compared(compared, applied):
    stack = new_stack()
    if applied:
        stack.record_apply([Change(REF, Action.CREATED)])
    healer = run(stack, [("MODIFIED", live_copy(resource_version="9", group="other.io"))], written("7"))
    assert len(compared) == 1
    if applied:
        assert healer._pending[stack.key][REF].cause == heal.DRIFT
    else:
        assert healer._deferred[stack.key] == {REF}


def test_only_the_last_write_counts_and_only_once():
    own = written("7", "8")
    assert not own.produced(REF, "7")  # overwritten by a later write: an older version is no answer of ours
    assert own.produced(REF, "8")
    assert not own.produced(REF, "8")  # asked for its one event; a relisting of it is compared again
    assert not own.produced(REF, "")


class _Kube:
    """Answers every apply with the object at resourceVersion 42."""

    async def apply(self, path: str, desired: dict, *, field_manager: str, dry_run: bool = False):
        return {**desired, "metadata": {**desired["metadata"], "resourceVersion": "42"}}, True


@pytest.mark.parametrize("dry_run", [False, True])
def test_applies_note_their_answer_and_dry_runs_do_not(dry_run):
    own = OwnWrites()
    access = ApiAccess(_Kube(), None, None, 1, None)  # type: ignore[arg-type]
    applier = Applier(access, None, None, None, own)  # type: ignore[arg-type]
    resource = Resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False)
    asyncio.run(applier.server_side_apply(REF, CRD, resource, "kfdef-operator", dry_run=dry_run))
    assert own.produced(REF, "42") is not dry_run
