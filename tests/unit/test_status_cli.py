"""``kfdef-operator status``: the tree from status dicts (pure), and the inventory's applications it reads."""

from __future__ import annotations

import io
import json

from kfdef_operator.api.names import INSTANCE_ANNOTATION, INSTANCE_LABEL, RECONCILE_ANNOTATION
from kfdef_operator.cli.errors import EXIT_NOT_READY, EXIT_OK
from kfdef_operator.cli.main import main
from kfdef_operator.cli.status import (
    OTHER,
    Health,
    Observed,
    as_json,
    assess,
    exit_code,
    heals_by_object,
    render_tree,
    show,
)
from kfdef_operator.runtime.inventory import InventoryEntry, InventoryFormat
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.runtime.status import inventory_of
from kfdef_operator.ssa.inventory import ObjectRef, entry_of

OWNER = Owner("kf", "kubeflow", "uid-1")
DEPLOY = ObjectRef("apps", "Deployment", "kubeflow", "web")
CM = ObjectRef("", "ConfigMap", "kubeflow", "params")
SVC = ObjectRef("", "Service", "kubeflow", "web")
SA = ObjectRef("", "ServiceAccount", "kubeflow", "web")
CRD = ObjectRef("apiextensions.k8s.io", "CustomResourceDefinition", "", "widgets.example.org")


def stamped(ref: ObjectRef, api_version: str, **extra: object) -> dict:
    meta = {"name": ref.name, "labels": {INSTANCE_LABEL: OWNER.label},
            "annotations": {INSTANCE_ANNOTATION: OWNER.instance}}
    if ref.namespace:
        meta["namespace"] = ref.namespace
    return {"apiVersion": api_version, "kind": ref.kind, "metadata": meta, **extra}


def deployment(available: bool) -> dict:
    return stamped(DEPLOY, "apps/v1", spec={"replicas": 1}, status={
        "observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "availableReplicas": int(available),
        "readyReplicas": int(available),
        "conditions": [{"type": "Available", "status": "True" if available else "False"}]})


def kfdef(*, ready: bool, failures: list[dict] | None = None, warnings: list[str] | None = None,
          generation: int = 2, observed: int = 2) -> dict:
    reason, message = ("Ready", "all 5 objects applied and ready") if ready else ("ApplyFailed", "1 of 5 not applied")
    return {"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef",
            "metadata": {"name": "kf", "namespace": "kubeflow", "uid": "uid-1", "generation": generation},
            "status": {"observedGeneration": observed,
                       "conditions": [{"type": "Ready", "status": str(ready), "reason": reason, "message": message},
                                      {"type": "Reconciling", "status": "False", "reason": "Done"},
                                      {"type": "Degraded", "status": str(not ready),
                                       "reason": "AsExpected" if ready else "ApplyFailed", "message": message}],
                       "applications": [{"name": "crds"}, {"name": "web"}],
                       "inventory": {"applications": [
                           {"name": "crds", "objects": [entry_of(CRD, "v1")]},
                           {"name": "web", "objects": [entry_of(ref, "v1") for ref in (DEPLOY, CM, SVC, SA)]}]},
                       "failures": failures or [], "warnings": warnings or []}}


def live_all(**overrides: dict | None) -> dict:
    live = {CRD: stamped(CRD, "apiextensions.k8s.io/v1", status={"conditions": [
                {"type": "Established", "status": "True"}, {"type": "NamesAccepted", "status": "True"}]}),
            DEPLOY: deployment(True), CM: stamped(CM, "v1"), SVC: stamped(SVC, "v1"), SA: stamped(SA, "v1")}
    for name, value in overrides.items():
        live[{"deploy": DEPLOY, "cm": CM, "svc": SVC, "sa": SA}[name]] = value
    return live


def healed(ref: ObjectRef, count: int) -> dict:
    return {"reason": "Healed", "message": f"re-created {ref} (deleted) in 12 ms", "count": count,
            "involvedObject": {"uid": "uid-1"}}


def test_a_ready_stack_is_one_line_per_application_with_counts():
    stack = assess(Observed(kfdef(ready=True), live_all()))
    assert stack.ready and exit_code([stack]) == EXIT_OK
    assert render_tree(stack) == (
        "KfDef kubeflow/kf: Ready: Ready: all 5 objects applied and ready\n"
        "  Reconciling=False Done\n"
        "  Degraded=False AsExpected\n"
        "├── crds (1 healthy)\n"
        "│   └── ✓ 1 healthy: 1 CustomResourceDefinition\n"
        "└── web (4 healthy)\n"
        "    └── ✓ 4 healthy: 1 ConfigMap, 1 Deployment, 1 Service, 1 ServiceAccount\n")


def test_failures_come_first_with_why_and_the_troubled_application_leads():
    failures = [{"object": str(CM), "message": "admission webhook denied the request"},
                {"object": str(SVC), "message": "already managed by KfDef other/kf; not applied"}]
    stack = assess(Observed(kfdef(ready=False, failures=failures), live_all(deploy=deployment(False))))
    assert not stack.ready and exit_code([stack]) == EXIT_NOT_READY
    assert [a.name for a in stack.applications] == ["web", "crds"]
    web = stack.applications[0]
    assert [(o.ref, o.health) for o in web.objects] == [
        (str(CM), Health.FAILED), (str(SVC), Health.HELD), (str(DEPLOY), Health.NOT_READY), (str(SA), Health.HEALTHY)]
    tree = render_tree(stack)
    assert f"✗ {CM}: failed to apply: admission webhook denied the request" in tree
    assert f"! {SVC}: already managed by KfDef other/kf; not applied" in tree
    assert f"… {DEPLOY}: not ready: " in tree
    assert "├── web (1 failed, 1 held, 1 not ready, 1 healthy)" in tree
    assert "  Degraded=True ApplyFailed: 1 of 5 not applied" in tree
    assert tree.index(str(CM)) < tree.index(str(DEPLOY)) < tree.index("1 healthy: 1 ServiceAccount")


def test_missing_opted_out_foreign_and_healed_objects_say_so():
    opted = stamped(CM, "v1")
    opted["metadata"]["annotations"][RECONCILE_ANNOTATION] = "disabled"
    foreign = stamped(SA, "v1")
    foreign["metadata"]["annotations"][INSTANCE_ANNOTATION] = "other.team"
    foreign["metadata"]["labels"] = {}
    observed = Observed(kfdef(ready=True), live_all(deploy=None, cm=opted, sa=foreign),
                        events=[healed(SVC, 3), healed(SVC, 1), healed(DEPLOY, 1)])
    by_ref = {o.ref: o for a in assess(observed).applications for o in a.objects}
    assert by_ref[str(DEPLOY)].health is Health.MISSING
    assert by_ref[str(DEPLOY)].why == "does not exist (the operator re-creates it); healed 1 time in the last hour"
    assert by_ref[str(CM)].health is Health.OPTED_OUT and "reconcile=disabled" in by_ref[str(CM)].why
    assert by_ref[str(SA)].health is Health.HELD and by_ref[str(SA)].why == "held by KfDef team/other"
    assert (by_ref[str(SVC)].health, by_ref[str(SVC)].why) == (Health.HEALED, "healed 4 times in the last hour")


def test_a_failure_outside_the_inventory_is_shown_in_its_application_or_apart():
    refused = ObjectRef("", "Secret", "kubeflow", "token")  # refused at its first apply: never in the inventory
    rejected = ObjectRef("", "Secret", "kube-system", "token")  # outside the operator's scope: no application
    failures = [{"object": str(refused), "message": "forbidden", "application": "web"},
                {"object": str(rejected), "message": "outside this operator's scope"}]
    stack = assess(Observed(kfdef(ready=False, failures=failures), live_all()))
    assert [a.name for a in stack.applications] == ["web", OTHER, "crds"]
    assert (str(refused), "Secret", Health.FAILED) in [(o.ref, o.kind, o.health) for o in stack.applications[0].objects]
    assert [(o.ref, o.health) for o in stack.applications[1].objects] == [(str(rejected), Health.FAILED)]


def test_an_unread_object_is_unknown_not_healthy():
    live = live_all()
    del live[SA]
    stack = assess(Observed(kfdef(ready=True), live, unreadable={CM: "403 Forbidden"}))
    by_ref = {o.ref: o for a in stack.applications for o in a.objects}
    assert (by_ref[str(CM)].health, by_ref[str(CM)].why) == (Health.UNKNOWN, "could not be read: 403 Forbidden")
    assert by_ref[str(SA)].health is Health.UNKNOWN


def test_ready_of_an_older_generation_is_not_ready():
    stack = assess(Observed(kfdef(ready=True, generation=3, observed=2), live_all()))
    assert not stack.ready and exit_code([stack]) == EXIT_NOT_READY
    assert stack.summary.startswith("generation 3 not observed yet")
    assert exit_code([]) == EXIT_NOT_READY


def test_no_status_says_the_operator_may_not_run():
    bare = kfdef(ready=True)
    del bare["status"]
    stack = assess(Observed(bare))
    assert not stack.ready and "is the operator running?" in stack.summary
    assert render_tree(stack).startswith("KfDef kubeflow/kf: NOT READY: no status yet")


def test_warnings_are_shown_last_as_needing_no_action():
    tree = render_tree(assess(Observed(kfdef(ready=True, warnings=["rendered twice (last wins): ConfigMap a/b"]),
                                       live_all())))
    assert tree.endswith("└── warnings (1)\n    └── rendered twice (last wins): ConfigMap a/b\n")


def test_json_lists_every_object_with_its_health():
    document = as_json(assess(Observed(kfdef(ready=True), live_all(), events=[healed(SVC, 2)])))
    json.dumps(document)
    assert document["ready"] is True
    web = next(a for a in document["applications"] if a["name"] == "web")
    assert web["counts"] == {"healed": 1, "healthy": 3}
    assert {"object": str(SVC), "health": "healed", "why": "healed 2 times in the last hour"} in web["objects"]


def test_heals_are_counted_per_object_from_the_events():
    events = [healed(SVC, 2), healed(SVC, 1), {"reason": "Applied", "message": f"re-created {SVC} (x) in 1 ms"},
              {"reason": "Healed", "message": f"re-asserted the managed fields of {DEPLOY} (drift) in 40 ms"}]
    assert heals_by_object(events) == {str(SVC): 3, str(DEPLOY): 1}


def test_the_inventory_names_each_rendered_objects_application():
    stack = Stack(OWNER, 1, applications=["crds", "web"])
    stack.inventory = {CRD: InventoryEntry("v1"), DEPLOY: InventoryEntry("v1"), SVC: InventoryEntry("v1")}
    stack.want({CRD: {}, DEPLOY: {}})
    stack.application_of = {CRD: "crds", DEPLOY: "web"}
    strings = InventoryFormat()
    strings.strings_kept = True
    assert inventory_of(stack, strings) == {"applications": [{"name": "crds", "objects": [entry_of(CRD, "v1")]},
                                                    {"name": "web", "objects": [entry_of(DEPLOY, "v1")]}],
                                   "stale": [entry_of(SVC, "v1")]}  # no longer rendered: pruned next


def test_status_help_ends_with_the_exit_codes(capsys):
    assert main(["status", "--help"]) == 0
    out = capsys.readouterr().out
    assert "status: Ready" in out and "[-n NAMESPACE]" in out


def test_json_is_one_document_for_a_named_kfdef_and_a_list_for_a_namespace():
    stacks = [assess(Observed(kfdef(ready=True), live_all()))]
    named, listed = io.StringIO(), io.StringIO()
    show(named, stacks, "json", named=True)
    show(listed, stacks, "json", named=False)
    assert json.loads(named.getvalue())["name"] == "kf"
    assert [d["name"] for d in json.loads(listed.getvalue())] == ["kf"]
