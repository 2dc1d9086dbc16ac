"""Client-side pruning of custom resources against their CRD's structural schema."""

from __future__ import annotations

from kfdef_operator.ssa.schema import prune, prune_custom_resource, version_schema

SCHEMA = {"type": "object", "properties": {
    "spec": {"type": "object", "properties": {
        "size": {"type": "integer"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "items": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "template": {"type": "object", "x-kubernetes-embedded-resource": True,
                     "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}},
    }},
}}


def test_undeclared_fields_are_dropped_at_every_level_and_reported():
    obj = {"apiVersion": "g/v1", "kind": "W", "metadata": {"name": "w", "anything": 1},
           "spec": {"size": 1, "colour": "red", "items": [{"name": "a", "extra": True}],
                    "labels": {"k": "v"}, "free": {"whatever": {"deep": 1}},
                    "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                 "spec": {"x": "y", "z": 1}}},
           "top": "level"}
    pruned, dropped = prune_custom_resource(obj, SCHEMA)
    assert sorted(dropped) == [".spec.colour", ".spec.items[0].extra", ".spec.template.spec.z", ".top"]
    assert pruned == {"apiVersion": "g/v1", "kind": "W", "metadata": {"name": "w", "anything": 1},
                      "spec": {"size": 1, "items": [{"name": "a"}], "labels": {"k": "v"},
                               "free": {"whatever": {"deep": 1}},
                               "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                            "spec": {"x": "y"}}}}


def test_declared_only_objects_are_unchanged_and_the_input_is_not_mutated():
    obj = {"spec": {"size": 2, "colour": "blue"}}
    pruned, dropped = prune(obj, SCHEMA)
    assert dropped == [".spec.colour"] and obj == {"spec": {"size": 2, "colour": "blue"}}
    assert prune({"spec": {"size": 2}}, SCHEMA) == ({"spec": {"size": 2}}, [])


def test_no_schema_or_preserve_unknown_prunes_nothing():
    obj = {"spec": {"anything": 1}}
    assert prune(obj, None) == (obj, [])
    assert prune(obj, {"type": "object", "x-kubernetes-preserve-unknown-fields": True}) == (obj, [])
    assert prune(obj, {"type": "object"}) == (obj, [])


def test_version_schema_picks_the_named_version():
    crd = {"spec": {"versions": [{"name": "v1alpha1", "schema": {"openAPIV3Schema": {"type": "string"}}},
                                 {"name": "v1", "schema": {"openAPIV3Schema": SCHEMA}}]}}
    assert version_schema(crd, "v1") is SCHEMA and version_schema(crd, "v2") is None
