"""Field-level differences and the diff report (pure parts of ``kfdef-operator diff``)."""

from __future__ import annotations

import io

from kfdef_operator.cli.diff import report
from kfdef_operator.ssa.changeset import Action
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.preview import ABSENT, Difference, FieldChange, field_changes

DEPLOY = ObjectRef("apps", "Deployment", "kubeflow", "web")


def test_field_changes_name_the_leaves_that_differ():
    before = {"metadata": {"labels": {"app": "web"}, "annotations": {"kfdef.apps.kubeflow.org/digest": "a"}},
              "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}}}
    after = {"metadata": {"labels": {"app": "web", "tier": "front"},
                          "annotations": {"kfdef.apps.kubeflow.org/digest": "b"}},
             "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "x:2"}]}}}}
    assert field_changes(before, after) == [
        FieldChange("metadata.labels.tier", ABSENT, "front"),
        FieldChange('metadata.annotations["kfdef.apps.kubeflow.org/digest"]', "a", "b"),
        FieldChange("spec.replicas", 1, 2),
        FieldChange("spec.template.spec.containers[0].image", "x:1", "x:2"),
    ]
    assert str(FieldChange("spec.replicas", 3, 1)) == "spec.replicas: 3 -> 1"


def test_lists_of_another_length_and_removed_fields_are_shown_whole():
    assert field_changes({"args": ["a"], "old": True}, {"args": ["a", "b"]}) == [
        FieldChange("args", ["a"], ["a", "b"]), FieldChange("old", True, ABSENT)]
    assert field_changes({"a": {"b": 1}}, {"a": {"b": 1}}) == []


def test_report_exit_code_and_what_is_shown():
    out, err = io.StringIO(), io.StringIO()
    unchanged = [Difference(DEPLOY, Action.UNCHANGED), Difference(DEPLOY, Action.SKIPPED, "opted out")]
    assert report(out, err, unchanged, ["a note"]) == 0
    assert out.getvalue() == "" and err.getvalue() == "note: a note\ndiff: 1 unchanged, 1 skipped; no differences\n"

    digest = FieldChange('metadata.annotations["kfdef.apps.kubeflow.org/digest"]', "a", "b")
    changed = [Difference(DEPLOY, Action.CONFIGURED, "", [digest, FieldChange("spec.replicas", 1, 2)]),
               Difference(ObjectRef("", "ConfigMap", "kubeflow", "x"), Action.CONFLICT, "held by KfDef a/b")]
    out, err = io.StringIO(), io.StringIO()
    assert report(out, err, changed, []) == 1
    assert out.getvalue() == ("~ Deployment.apps kubeflow/web configured\n    spec.replicas: 1 -> 2\n"
                              "! ConfigMap kubeflow/x conflict: held by KfDef a/b\n")


def test_re_creations_migrations_and_what_the_data_guard_holds_are_told_apart():
    crd = ObjectRef("apiextensions.k8s.io", "CustomResourceDefinition", "", "experiments.kubeflow.org")
    namespace = ObjectRef("", "Namespace", "", "team")
    differences = [
        Difference(ObjectRef("apps", "StatefulSet", "kubeflow", "db"), Action.CREATED,
                   "would be deleted and re-created: an immutable field changed"),
        Difference(crd, Action.CONFIGURED, "would migrate the 3 Experiment objects stored at v1alpha3 to v1beta1, "
                                           "trim storedVersions to v1beta1, then apply the CRD as rendered"),
        Difference(namespace, Action.HELD, "no longer rendered, but holds 1 object the stack did not create "
                                           "(ConfigMap team/notes): released from the stack and kept"),
    ]
    out, err = io.StringIO(), io.StringIO()
    assert report(out, err, differences, []) == 1
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("± StatefulSet.apps kubeflow/db re-created (an immutable field changed")
    assert lines[1].startswith("~ CustomResourceDefinition.apiextensions.k8s.io experiments.kubeflow.org migrated (")
    assert lines[2].startswith("! Namespace team held (no longer rendered, but holds objects the stack did not "
                               "create: released and kept): no longer rendered, but holds 1 object")
    assert err.getvalue() == "diff: 1 re-created, 1 migrated, 1 held; differences found\n"
