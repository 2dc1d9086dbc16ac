"""The two inventories ``bench/status_write.py`` writes hold the same objects, each under its application."""

from __future__ import annotations

from bench.status_write import inventories
from kfdef_operator.runtime.inventory import read
from kfdef_operator.ssa.inventory import ObjectRef

HELD = [(ObjectRef("", "Namespace", "", "kubeflow"), "v1", "namespaces"),
        (ObjectRef("apps", "Deployment", "kubeflow", "web"), "v1", "web"),
        (ObjectRef("kubeflow.org", "Notebook", "kubeflow", "nb"), "v1beta1", "web")]


def test_both_formats_hold_the_same_objects_under_the_same_applications():
    applications = ["namespaces", "web"]
    formats = inventories(HELD, applications)
    read_back = {form: read({"applications": [{"name": name} for name in applications], "inventory": inventory})
                 for form, inventory in formats.items()}
    assert [(h.ref, h.entry.version, h.application) for h in read_back["strings"]] == HELD
    assert read_back["objects"] == read_back["strings"]
    assert "entries" in formats["objects"] and "entries" not in formats["strings"]
