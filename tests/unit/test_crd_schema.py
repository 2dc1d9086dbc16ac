"""The KfDef CRD shipped in the package, and structural-schema validation (``ssa.schema.validate``)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from kfdef_operator.api.crd import PACKAGED_CRD, kfdef_crd
from kfdef_operator.ssa.schema import validate

ROOT = Path(__file__).parents[2]
CRD_FILE = ROOT / "crds" / "kfdef.apps.kubeflow.org_kfdefs.yaml"


def test_the_packaged_crd_is_the_one_deploy_installs():
    packaged = ROOT / "kfdef_operator" / "api" / PACKAGED_CRD
    assert packaged.read_bytes() == CRD_FILE.read_bytes(), "run `make crd-package-data` after editing crds/"


def test_the_packaged_crd_goes_into_the_wheel():
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert f"api/{PACKAGED_CRD}" in package_data["kfdef_operator"]
    assert kfdef_crd()["metadata"]["name"] == "kfdefs.kfdef.apps.kubeflow.org"  # read through importlib.resources


SCHEMA = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "spec": {"type": "object", "properties": {
            "mode": {"type": "string", "enum": ["a", "b"]},
            "size": {"type": "integer"},
            "ratio": {"type": "number"},
            "port": {"x-kubernetes-int-or-string": True},
            "items": {"type": "array", "maxItems": 2, "items": {"type": "string", "maxLength": 3}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                     "properties": {"known": {"type": "boolean"}}},
            "map": {"type": "object", "additionalProperties": {"type": "string"}},
        }},
    },
}


@pytest.mark.parametrize("spec, expected", [
    ({}, []),
    ({"mode": "c"}, [("spec.mode", 'Unsupported value: "c": supported values: "a", "b"')]),
    ({"size": "3"}, [("spec.size", 'Invalid value: "string": must be of type integer')]),
    ({"size": True}, [("spec.size", 'Invalid value: "boolean": must be of type integer')]),
    ({"ratio": 1, "port": "http"}, []),
    ({"port": 1.5}, [("spec.port", 'Invalid value: "number": must be of type integer or string')]),
    ({"items": ["a", "b", "c"]}, [("spec.items", "Too many: 3: must have at most 2 items")]),
    ({"items": ["long"]}, [("spec.items[0]", "Too long: may not be longer than 3")]),
    ({"free": {"anything": 1, "known": "no"}},
     [("spec.free.known", 'Invalid value: "string": must be of type boolean')]),
    ({"map": {"k": 1}}, [("spec.map.k", 'Invalid value: "integer": must be of type string')]),
    ({"size": None, "mode": None}, []),  # nulls are pruned by the server before validation
    ({"sise": 1}, [("spec.sise", 'unknown field "spec.sise" (did you mean "size"?)')]),
])
def test_validate(spec, expected):
    assert validate({"spec": spec}, SCHEMA) == expected


def test_validate_required_and_metadata():
    problems = validate({"metadata": {"name": 3, "labels": {"a": 1}, "finalizer": []}}, SCHEMA)
    assert problems == [
        ("spec", "Required value"),
        ("metadata.finalizer", 'unknown field "metadata.finalizer" (did you mean "finalizers"?)'),
        ("metadata.name", 'Invalid value: "integer": must be of type string'),
        ("metadata.labels.a", 'Invalid value: "integer": must be of type string'),
    ]
