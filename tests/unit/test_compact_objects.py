"""A stack's desired state is kept as compact JSON (runtime.stack.CompactObjects): reads are faithful copies."""

import gc

from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import CompactObjects, Stack
from kfdef_operator.ssa.inventory import ref_of

DASHBOARD = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "dash", "namespace": "monitoring"},
             "data": {"title": "Latency \U0001F680 p99", "odd": "\ud83d alone", "n": "1"}}
CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
       "metadata": {"name": "tfjobs.kubeflow.org"},
       "spec": {"group": "kubeflow.org", "names": {"kind": "TFJob", "plural": "tfjobs"}, "scope": "Namespaced"}}


def test_a_read_is_an_equal_copy_that_the_reader_may_change():
    kept = CompactObjects({ref_of(DASHBOARD): DASHBOARD})
    read = kept[ref_of(DASHBOARD)]
    assert read == DASHBOARD  # text outside the BMP and a lone surrogate survive
    read["data"]["title"] = "changed"
    assert kept[ref_of(DASHBOARD)] == DASHBOARD
    assert list(kept) == [ref_of(DASHBOARD)] and len(kept) == 1 and ref_of(CRD) not in kept


def test_kept_objects_give_the_garbage_collector_nothing_to_walk():
    objects = {ref_of(o): o for o in (DASHBOARD, CRD)}
    kept = CompactObjects(objects)
    assert not any(gc.is_tracked(value) for value in kept._encoded.values())


def test_each_desired_state_has_its_own_version_and_names_the_kinds_its_crds_serve():
    stack = Stack(owner=Owner("kf", "kubeflow", "u"), generation=1)
    stack.want({ref_of(DASHBOARD): DASHBOARD})
    first = stack.desired.version
    stack.want({ref_of(DASHBOARD): DASHBOARD, ref_of(CRD): CRD})
    assert stack.desired.version != first
    assert stack.crd_kinds == {("kubeflow.org", "TFJob")}
