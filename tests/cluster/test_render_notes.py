"""Render notes need no action: a stack whose only notes are duplicates is Ready and not Degraded, the notes are
in ``status.warnings``, and each generation posts one Event about them."""

from __future__ import annotations

import pytest

from tests.cluster.conftest import KFDEF_API, kfdef_status, wait_ready
from tests.kube import wait_for
from tests.stacks import write_package

pytestmark = pytest.mark.cluster


def _shared_configmap(source: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": {"from": source}}


def _kfdef(namespace: str, repo: str, paths: list[str]) -> dict:
    return {"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {"name": "twice", "namespace": namespace},
            "spec": {"applications": [{"name": path, "kustomizeConfig": {"repoRef": {"name": "manifests",
                                                                                     "path": path}}}
                                      for path in paths],
                     "repos": [{"name": "manifests", "uri": repo}]}}


def _note_events(kube, namespace: str) -> list:
    events = kube.core.list_namespaced_event(namespace, field_selector="involvedObject.name=twice").items
    return [e for e in events if e.reason == "RenderWarnings"]


def test_a_stack_whose_only_notes_are_duplicates_is_ready_and_not_degraded(operator, kube, kfdef_namespace, tmp_path):
    repo = tmp_path / "repo"
    for path in ("first", "second", "third"):
        write_package(repo, path, [_shared_configmap(path)])
    kube.apply(_kfdef(kfdef_namespace, str(repo), ["first", "second"]))
    kfdef = wait_ready(kube, "twice", kfdef_namespace)
    degraded = kube.condition(kfdef, "Degraded")
    assert degraded["status"] == "False", degraded
    note = f"rendered twice (last wins): ConfigMap {kfdef_namespace}/shared"
    assert kfdef["status"]["warnings"] == [note]
    assert kube.get("v1", "ConfigMap", "shared", kfdef_namespace)["data"] == {"from": "second"}
    events = wait_for(lambda: _note_events(kube, kfdef_namespace), timeout=30, what="the render notes' Event")
    assert [(e.type, e.message, e.count) for e in events] == [("Normal", f"generation 1: {note}", 1)]

    # A reconcile of the same generation on request posts nothing more; the next generation posts its own Event.
    kube.apply({**_kfdef(kfdef_namespace, str(repo), ["first", "second"]),
                "metadata": {"name": "twice", "namespace": kfdef_namespace,
                             "annotations": {"kfdef.apps.kubeflow.org/requestedAt": "1"}}})
    kube.apply(_kfdef(kfdef_namespace, str(repo), ["first", "second", "third"]))
    wait_for(lambda: kfdef_status(kube, "twice", kfdef_namespace).get("observedGeneration") == 2
             and kube.condition(kube.get(KFDEF_API, "KfDef", "twice", kfdef_namespace), "Ready")["status"] == "True",
             timeout=60, what="generation 2 Ready")
    assert kube.condition(kube.get(KFDEF_API, "KfDef", "twice", kfdef_namespace), "Degraded")["status"] == "False"
    events = wait_for(lambda: (found := _note_events(kube, kfdef_namespace)) and len(found) >= 2 and found,
                      timeout=30, what="generation 2's Event")
    assert sorted((e.message.split(":")[0], e.count) for e in events) == [("generation 1", 1), ("generation 2", 1)]
    assert kube.get("v1", "ConfigMap", "shared", kfdef_namespace)["data"] == {"from": "third"}
