"""The heal policy (HealPolicy), without I/O: which watch events of a stack's objects call for a heal, which are
compared with the desired state, how a fight holds heals back, what a failed heal waits for, and which objects
come back with their parent.

A comparison decodes, stamps and walks the desired object (a CRD's schema is hundreds of KiB); a release's first
apply brings several events per object (a CRD's creation, NamesAccepted, Established), so a comparison per event
cost seconds of the event loop. An object found in line is not compared again until its generation, labels,
annotations or identity change. Nor is an event carrying the very version an apply of the operator's own answered
with (:class:`OwnWrites`): a release's first apply brings one per object, and it shows nothing anyone else changed.
"""

from __future__ import annotations

import asyncio

import pytest

from kfdef_operator.api.names import RECONCILE_ANNOTATION, RECONCILE_DISABLED
from kfdef_operator.runtime import heal_policy
from kfdef_operator.runtime.heal_policy import (
    DELETED,
    DRIFT,
    FIGHT_THRESHOLD,
    FIGHT_WINDOW_S,
    HealPolicy,
    HealRequest,
    Setback,
)
from kfdef_operator.runtime.ownership import KEPT_ANNOTATIONS, KEPT_LABELS, Owner
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.ssa.access import ApiAccess
from kfdef_operator.ssa.apply import Applier
from kfdef_operator.ssa.changeset import Action, Change
from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.ssa.inventory import ObjectRef, ref_of
from kfdef_operator.ssa.live import LiveObject, OwnWrites, summarize

OWNER = Owner("kf", "kubeflow", "kfdef-uid")
CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
       "metadata": {"name": "widgets.example.io"},
       "spec": {"group": "example.io", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets"},
                "versions": [{"name": "v1", "served": True, "storage": True}]}}
REF = ref_of(CRD)
NOW = 10_000.0


def live_copy(*, uid: str = "crd-uid", generation: int = 1, conditions: tuple[str, ...] = (),
              group: str = "example.io", resource_version: str = "7") -> dict:
    """The CRD as a watch event shows it: stamped, with the server's fields and some status conditions."""
    obj = OWNER.stamp(CRD, namespaced=False, adopted=False)
    obj = {**obj, "spec": {**obj["spec"], "group": group},
           "metadata": {**obj["metadata"], "uid": uid, "generation": generation,
                                     "resourceVersion": resource_version},
           "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]}}
    return obj


def summary(obj: dict) -> LiveObject:
    return summarize(obj, labels=KEPT_LABELS, annotations=KEPT_ANNOTATIONS)


@pytest.fixture
def compared(monkeypatch) -> list[dict]:
    """The live objects the policy compares with the desired state, in order."""
    seen: list[dict] = []
    real = heal_policy.drifted

    def counting(desired: dict, live: dict) -> bool:
        seen.append(live)
        return real(desired, live)

    monkeypatch.setattr(heal_policy, "drifted", counting)
    return seen


def decide(policy: HealPolicy, stack: Stack, events: list[tuple[str, dict]], now: float = NOW) -> list[HealRequest]:
    """The requests the events call for, in order."""
    requests = [policy.decide(stack, event_type, summary(obj), obj, now=now) for event_type, obj in events]
    return [request for request in requests if request is not None]


def new_stack(*objects: dict) -> Stack:
    stack = Stack(OWNER, 1)
    stack.want({ref_of(obj): obj for obj in objects or (CRD,)})
    return stack


def applied_stack(*objects: dict) -> Stack:
    """A stack whose first apply has ended, every object created."""
    stack = new_stack(*objects)
    stack.record_apply([Change(ref, Action.CREATED) for ref in stack.desired])
    return stack


# -- which events are compared -------------------------------------------------------------------------------------

def test_status_updates_during_the_first_apply_are_not_compared_again(compared):
    requests = decide(HealPolicy(), new_stack(), [
        ("ADDED", live_copy()), ("MODIFIED", live_copy(conditions=("NamesAccepted",))),
        ("MODIFIED", live_copy(conditions=("NamesAccepted", "Established")))])
    assert len(compared) == 1
    assert requests == []


def test_a_new_generation_is_compared_again(compared):
    decide(HealPolicy(), new_stack(), [("ADDED", live_copy()), ("MODIFIED", live_copy(generation=2))])
    assert len(compared) == 2


def test_a_drift_found_during_the_first_apply_is_checked_once_it_is_over(compared):
    policy, stack = HealPolicy(), new_stack()
    drifted = live_copy(group="other.io")
    requests = decide(policy, stack, [("ADDED", drifted), ("MODIFIED", drifted)])
    assert len(compared) == 2  # a drifted object is never taken as in line
    assert requests == []
    stack.record_apply([Change(REF, Action.UNCHANGED)])
    assert policy.applied(stack, now=NOW + 5) == [HealRequest(REF, DRIFT, NOW + 5)]
    assert policy.applied(stack, now=NOW + 6) == [], "checked once"


def test_an_object_created_again_with_the_same_stamps_is_compared_again(compared):
    # Deleted and created again (another uid) while the watch was down, by someone copying the stamps, with another
    # spec at generation 1: the relisting shows it as a change.
    requests = decide(HealPolicy(), applied_stack(), [
        ("ADDED", live_copy()), ("MODIFIED", live_copy(uid="another-uid", group="other.io"))])
    assert len(compared) == 2
    assert requests == [HealRequest(REF, DRIFT, NOW)]


def written(*versions: str) -> OwnWrites:
    """What the operator's applies of the CRD answered with, in order."""
    own = OwnWrites()
    for version in versions:
        own.wrote(REF, {"metadata": {"resourceVersion": version}})
    return own


@pytest.mark.parametrize("applied", [False, True], ids=["during the first apply", "after it"])
def test_the_version_an_apply_produced_is_not_compared(compared, applied):
    policy = HealPolicy(written("7"))
    stack = applied_stack() if applied else new_stack()
    requests = decide(policy, stack, [("ADDED", live_copy(resource_version="7")),
                                      ("MODIFIED", live_copy(resource_version="8", conditions=("Established",)))])
    assert compared == []  # nor the status update after it: same generation as a version found in line
    assert requests == [] and policy.applied(stack, now=NOW) == []


@pytest.mark.parametrize("applied", [False, True], ids=["during the first apply", "after it"])
def test_a_version_someone_else_produced_is_compared(compared, applied):
    policy = HealPolicy(written("7"))
    stack = applied_stack() if applied else new_stack()
    requests = decide(policy, stack, [("MODIFIED", live_copy(resource_version="9", group="other.io"))])
    assert len(compared) == 1
    if not applied:
        assert requests == []
        stack.record_apply([Change(REF, Action.UNCHANGED)])
        requests = policy.applied(stack, now=NOW)
    assert requests == [HealRequest(REF, DRIFT, NOW)]


def test_a_drift_the_server_disproved_is_not_suspected_again_for_the_same_version(compared):
    policy, stack = HealPolicy(), applied_stack()
    drifted = live_copy(group="other.io")
    assert decide(policy, stack, [("SYNC", drifted)]) == [HealRequest(REF, DRIFT, NOW)]
    policy.disproved(REF, drifted)  # the dry run showed only the server's defaults differ
    assert decide(policy, stack, [("SYNC", drifted)]) == []
    assert decide(policy, stack, [("MODIFIED", live_copy(group="other.io", generation=2))]) != []


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


# -- deletions -----------------------------------------------------------------------------------------------------

CONFIG = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "apps"},
          "data": {"mode": "on"}}
CONFIG_REF = ref_of(CONFIG)


def deleted(obj: dict = CONFIG, **annotations: str) -> dict:
    """What a DELETED event of the stack's object carries."""
    stamped = OWNER.stamp(obj, namespaced=True, adopted=False)
    return {**stamped, "metadata": {**stamped["metadata"], "uid": "its-uid",
                                    "annotations": {**stamped["metadata"]["annotations"], **annotations}}}


def test_a_deleted_object_is_put_back_once_the_first_apply_is_over_naming_the_uid_it_had():
    assert decide(HealPolicy(), new_stack(CONFIG), [("DELETED", deleted())]) == [], "the first apply creates it"
    assert decide(HealPolicy(), applied_stack(CONFIG), [("DELETED", deleted())]) == [
        HealRequest(CONFIG_REF, DELETED, NOW, uid="its-uid")]


def test_an_object_an_apply_deletes_to_create_again_is_not_healed_but_a_later_deletion_is():
    """An immutable field changed: the apply deletes the object and creates it itself; a heal would race it (a
    release's upgrade re-creates dozens of Deployments)."""
    own_writes = OwnWrites()
    policy = HealPolicy(own_writes)
    own_writes.recreating(CONFIG_REF, "its-uid")
    assert decide(policy, applied_stack(CONFIG), [("DELETED", deleted())]) == []
    assert decide(policy, applied_stack(CONFIG), [("DELETED", deleted())]) == [
        HealRequest(CONFIG_REF, DELETED, NOW, uid="its-uid")], "the next deletion is someone else's"
    own_writes.recreating(CONFIG_REF, "an-earlier-uid")
    assert decide(policy, applied_stack(CONFIG), [("DELETED", deleted())]) == [
        HealRequest(CONFIG_REF, DELETED, NOW, uid="its-uid")], "another object of that name than the one deleted"


def test_no_heal_for_a_run_once_object_an_opted_out_one_or_a_suspended_or_deleting_stack():
    run_once = applied_stack(CONFIG)
    run_once.run_once = {CONFIG_REF}
    suspended, deleting = applied_stack(CONFIG), applied_stack(CONFIG)
    suspended.suspended, deleting.deleting = True, True
    for stack in (run_once, suspended, deleting):
        assert decide(HealPolicy(), stack, [("DELETED", deleted())]) == []
    opted_out = deleted(**{RECONCILE_ANNOTATION: RECONCILE_DISABLED})
    assert decide(HealPolicy(), applied_stack(CONFIG), [("DELETED", opted_out)]) == []


# -- fights --------------------------------------------------------------------------------------------------------

def test_an_object_healed_again_and_again_is_held_back_and_named_until_a_window_passes_without_a_heal():
    policy, stack = HealPolicy(), applied_stack(CONFIG)
    for heal in range(FIGHT_THRESHOLD):
        assert decide(policy, stack, [("DELETED", deleted())], now=NOW + heal)[0].held_back == 0.0
        policy.healed(CONFIG_REF, now=NOW + heal)
    (request,) = decide(policy, stack, [("DELETED", deleted())], now=NOW + FIGHT_THRESHOLD)
    assert request.held_back == 1.0 and request.due == NOW + FIGHT_THRESHOLD + 1.0
    (problem,) = stack.problems.values()
    assert "was healed 3 times in 60s: something keeps deleting or changing it; backing off 1s" in problem
    assert not policy.fight_over(stack, CONFIG_REF, now=NOW + FIGHT_WINDOW_S - 1)
    assert policy.fight_over(stack, CONFIG_REF, now=NOW + FIGHT_THRESHOLD + 1.0 + FIGHT_WINDOW_S)
    assert stack.problems == {}


def test_a_failed_heal_is_retried_after_half_a_second_doubling_to_a_minute():
    request = HealRequest(CONFIG_REF, DELETED, NOW)
    delays = []
    for _ in range(9):
        delays.append(request.retry_delay)
        request = request.retried()
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0]


# -- failures and parents ------------------------------------------------------------------------------------------

NAMESPACE = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}
WIDGETS = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "ws.g.io"}, "spec": {"group": "g.io", "names": {"kind": "W", "plural": "ws"}}}


def api_error(status: int, message: str) -> KubeApiError:
    return KubeApiError(status, "POST", "/api/v1/namespaces/apps/configmaps", {"message": message})


@pytest.mark.parametrize(("error", "setback"), [
    (api_error(404, 'namespaces "apps" not found'), Setback.PARENT),
    (api_error(403, 'unable to create new content in namespace apps because it is being terminated'), Setback.PARENT),
    (api_error(422, "spec.ports[0].port: Invalid value: 70000"), Setback.CONTENT),
    (api_error(500, "etcdserver: request timed out"), Setback.RETRY),
])
def test_what_a_failed_heal_waits_for(error, setback):
    stack = applied_stack(NAMESPACE, CONFIG)
    assert HealPolicy().failed(stack, CONFIG_REF, error) is setback


def test_a_heal_waits_only_for_a_parent_the_stack_brings_back():
    stack = applied_stack(NAMESPACE, WIDGETS)
    gone = api_error(404, "the server could not find the requested resource")
    for ref, setback in [(ObjectRef("", "ConfigMap", "apps", "c"), Setback.PARENT),
                         (ObjectRef("g.io", "W", "other", "w"), Setback.PARENT),
                         # A namespace the user made, or a CRD installed by someone else, is never healed back.
                         (ObjectRef("", "ConfigMap", "users-own", "c"), Setback.RETRY),
                         (ObjectRef("h.io", "V", "", "v"), Setback.RETRY)]:
        assert HealPolicy().failed(stack, ref, gone) is setback, ref


class Cache:
    """A watch cache that shows the objects it is given."""

    def __init__(self, *objects: dict) -> None:
        self._objects = {ref_of(obj): summary(obj) for obj in objects}

    def get(self, ref: ObjectRef) -> LiveObject | None:
        return self._objects.get(ref)


def test_a_parent_put_back_brings_back_what_it_holds_that_is_missing_or_waited_for_it():
    shown = {**CONFIG, "metadata": {**CONFIG["metadata"], "name": "shown"}}
    waiting = {**CONFIG, "metadata": {**CONFIG["metadata"], "name": "waiting"}}
    elsewhere = {**CONFIG, "metadata": {"name": "settings", "namespace": "elsewhere"}}
    widget = {"apiVersion": "g.io/v1", "kind": "W", "metadata": {"name": "w", "namespace": "apps"}}
    stack = applied_stack(NAMESPACE, WIDGETS, CONFIG, shown, waiting, elsewhere, widget)
    policy = HealPolicy()
    assert policy.failed(stack, ref_of(waiting), api_error(404, 'namespaces "apps" not found')) is Setback.PARENT
    cache = Cache(shown, waiting)
    assert policy.children(stack, ref_of(NAMESPACE), NAMESPACE, cache) == [CONFIG_REF, ref_of(waiting),
                                                                           ref_of(widget)]
    assert policy.children(stack, ref_of(NAMESPACE), NAMESPACE, cache) == [CONFIG_REF, ref_of(widget)], \
        "a waiting object is brought back once"
    assert policy.children(stack, ref_of(WIDGETS), WIDGETS, cache) == [ref_of(widget)]
