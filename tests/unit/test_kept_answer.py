"""What a Change keeps of the server's answer to a write (kfdef_operator.ssa.changeset.kept_answer)."""

from kfdef_operator.ssa.changeset import kept_answer


def _answer(kind: str, **rest: object) -> dict:
    return {"apiVersion": "v1", "kind": kind,
            "metadata": {"name": "x", "uid": "u1", "resourceVersion": "7", "labels": {"a": "b"},
                         "managedFields": [{"manager": "kfdef-operator", "fieldsV1": {"f:data": {}}}]},
            **rest}


def test_an_object_keeps_its_identity_and_metadata_without_managed_fields() -> None:
    kept = kept_answer(_answer("ConfigMap", data={"big": "x" * 1000}, status={"phase": "Active"}))
    assert kept == {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "x", "uid": "u1", "resourceVersion": "7", "labels": {"a": "b"}}}


def test_a_crd_keeps_what_registering_and_waiting_read_but_not_its_schemas() -> None:
    spec = {"group": "example.org", "scope": "Namespaced", "names": {"kind": "Thing", "plural": "things"},
            "versions": [{"name": "v1", "served": True, "storage": True,
                          "schema": {"openAPIV3Schema": {"type": "object"}}}]}
    status = {"conditions": [{"type": "Established", "status": "True"}]}
    kept = kept_answer(_answer("CustomResourceDefinition", spec=spec, status=status))
    assert kept["spec"] == {"group": "example.org", "scope": "Namespaced",
                            "names": {"kind": "Thing", "plural": "things"},
                            "versions": [{"name": "v1", "served": True, "storage": True}]}
    assert kept["status"] == status
    assert "managedFields" not in kept["metadata"]
    assert "schema" in spec["versions"][0]  # the answer itself is left as it was
