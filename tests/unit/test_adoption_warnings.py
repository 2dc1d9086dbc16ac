"""status.warnings names adopted objects that keep other writers' fields, for as long as the watch cache sees them
(kfdef_operator.runtime.status.adoption_warnings), and a heal does not forget them (Stack.record_heal)."""

from __future__ import annotations

from dataclasses import replace

from kfdef_operator.runtime.inventory import InventoryFormat
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import CompactObjects, Stack
from kfdef_operator.runtime.status import adoption_warnings, status_of
from kfdef_operator.ssa.changeset import Action, Change
from kfdef_operator.ssa.health import Health, State
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.live import LiveObject
from tests.unit.test_readiness import Cache

POLICY = ObjectRef("networking.k8s.io", "NetworkPolicy", "team", "platform-deny-all")
TOOL = ObjectRef("apps", "Deployment", "team", "tool")
FOREIGN = (("tenant", "spec.egress"), ("tenant", "spec.ingress"))


def tracked(ref: ObjectRef, *foreign: tuple[str, str]) -> LiveObject:
    return LiveObject(ref, "v1", "uid", "1", {"labels": {}, "annotations": {}}, Health(State.READY, ""),
                      frozenset(foreign))


def adopted_stack() -> Stack:
    stack = Stack(Owner("platform", "team", "uid"), 1)
    stack.desired = CompactObjects({POLICY: {}, TOOL: {}})
    stack.application_of = {POLICY: "platform", TOOL: "platform"}
    stack.changes = {POLICY: Change(POLICY, Action.ADOPTED, foreign=FOREIGN), TOOL: Change(TOOL, Action.ADOPTED)}
    stack.applied_generation = 1
    stack.reported = {"warnings": ["rendered twice (last wins): ConfigMap team/a"]}
    return stack


def test_the_note_names_the_object_the_fields_their_manager_and_what_to_do():
    (note,) = adoption_warnings(adopted_stack(), Cache({POLICY: tracked(POLICY, *FOREIGN)}))
    assert note == ("NetworkPolicy.networking.k8s.io team/platform-deny-all was adopted and keeps fields the stack "
                    "does not render, set by other field managers: tenant: spec.egress, spec.ingress. Remove those "
                    "fields from the object, or set spec.force: true on the KfDef to replace its content with "
                    "exactly what the stack renders (force also lets an immutable-field change re-create objects "
                    "that may hold data).")


def test_a_field_the_watch_cache_no_longer_sees_held_is_no_longer_named():
    stack = adopted_stack()
    (note,) = adoption_warnings(stack, Cache({POLICY: tracked(POLICY, ("tenant", "spec.egress"))}))
    assert "tenant: spec.egress. Remove" in note
    assert adoption_warnings(stack, Cache({POLICY: tracked(POLICY)})) == []
    assert adoption_warnings(stack, Cache({})) == []  # the object is gone


def test_the_notes_come_before_the_renders_and_stay_within_the_limit():
    stack = adopted_stack()
    cache = Cache({POLICY: tracked(POLICY, *FOREIGN)})
    status = status_of(stack, cache, health_timeout=300, now=0, inventory_format=InventoryFormat())
    assert [note.split(" ")[0] for note in status["warnings"]] == ["NetworkPolicy.networking.k8s.io", "rendered"]
    stack.reported["warnings"] = [f"note {i}" for i in range(50)]
    assert len(status_of(stack, cache, health_timeout=300, now=0, inventory_format=InventoryFormat())["warnings"]) == 50
    long = tuple(("tenant-" + "m" * 300, f"spec.{'f' * 200}{i}") for i in range(40))
    stack.changes[POLICY] = replace(stack.changes[POLICY], foreign=long)
    (note,) = adoption_warnings(stack, Cache({POLICY: tracked(POLICY, *long)}))
    assert len(note) <= 512 and note.endswith("that may hold data).")


def test_a_heal_keeps_what_the_apply_judged_of_other_writers_fields():
    stack = adopted_stack()
    stack.record_heal(Change(POLICY, Action.CONFIGURED))
    assert stack.changes[POLICY].foreign == FOREIGN
    stack.record_heal(Change(POLICY, Action.CONFIGURED, foreign=(("other", "spec.x"),)))
    assert stack.changes[POLICY].foreign == (("other", "spec.x"),)
