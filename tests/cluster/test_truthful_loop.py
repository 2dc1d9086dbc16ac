"""The reconcile loop tells the truth and reacts at once (one status writer, no stuck retries, resync).

Each test is a scenario a user reported against the operator before the status writer and the work queue:
a fix made during a retry backoff, a heal that failed once, a fight that ended, a new generation racing a
watch event, an error that never reached status, the opt-out annotation, a Job with a TTL, a moving source.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from kfdef_dev.manifests import tarball
from kfdef_operator.api.names import RECONCILE_ANNOTATION, REQUESTED_AT_ANNOTATION, SUSPEND_ANNOTATION
from tests.cluster.conftest import KFDEF_API, kfdef_status, wait_condition_reason, wait_ready
from tests.kube import wait_for
from tests.operator_process import OperatorProcess
from tests.reliability.support import TarballServer
from tests.stacks import write_package

pytestmark = pytest.mark.cluster

WEBHOOK_API = "admissionregistration.k8s.io/v1"


def configmap(name: str, namespace: str, **data: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace},
            "data": dict(data)}


def one_app_kfdef(name: str, namespace: str, uri: str, path: str = "app", **spec: object) -> dict:
    return {"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {"name": name, "namespace": namespace},
            "spec": {"applications": [{"name": "app", "kustomizeConfig": {"repoRef": {"name": "manifests",
                                                                                     "path": path}}}],
                     "repos": [{"name": "manifests", "uri": uri}], **spec}}


def condition(kube, name: str, namespace: str, type_: str) -> dict:
    return kube.condition(kube.get(KFDEF_API, "KfDef", name, namespace), type_) or {}


def writes(operator) -> float:
    return sum(v for k, v in operator.metrics().items()
               if k.startswith("kfdef_api_requests_total") and any(f'"{w}"' in k for w in ("POST", "PUT", "PATCH",
                                                                                            "DELETE")))


# -- 1. a new generation preempts the retry backoff ------------------------------------------------------------------

def test_a_fix_made_during_the_render_backoff_is_applied_at_once(operator, kube, kfdef_namespace, tmp_path):
    repo = tmp_path / "repo"
    write_package(repo, "app", [configmap("fixed", kfdef_namespace, ok="yes")])
    kube.apply(one_app_kfdef("fix", kfdef_namespace, str(repo), path="does-not-exist"))
    wait_condition_reason(kube, "fix", kfdef_namespace, "Degraded", "True", "RenderFailed", timeout=60)
    # The render is retried after 30 s, then 60 s...; the fix must not wait for that.
    fixed = one_app_kfdef("fix", kfdef_namespace, str(repo))
    started = time.monotonic()
    kube.apply(fixed)
    wait_ready(kube, "fix", kfdef_namespace, timeout=20)
    assert time.monotonic() - started < 20
    status = kfdef_status(kube, "fix", kfdef_namespace)
    assert status["observedGeneration"] == kube.get(KFDEF_API, "KfDef", "fix",
                                                    kfdef_namespace)["metadata"]["generation"]
    assert condition(kube, "fix", kfdef_namespace, "Degraded")["status"] == "False"


# -- 2. a heal that failed once and then succeeded counts as applied again ----------------------------------------

def blocking_webhook(name: str, namespace: str) -> dict:
    """A fail-closed webhook with no backend: every CREATE of a ConfigMap labelled block=<name> gets a 500."""
    return {"apiVersion": WEBHOOK_API, "kind": "ValidatingWebhookConfiguration", "metadata": {"name": name},
            "webhooks": [{"name": f"{name}.block.example.org", "admissionReviewVersions": ["v1"],
                          "sideEffects": "None", "failurePolicy": "Fail", "timeoutSeconds": 2,
                          "clientConfig": {"service": {"name": "absent", "namespace": namespace, "port": 443}},
                          "objectSelector": {"matchLabels": {"block": name}},
                          "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                     "resources": ["configmaps"]}]}]}


def test_a_heal_that_failed_and_then_succeeded_makes_the_kfdef_ready_again(operator, kube, kfdef_namespace, tmp_path):
    gate = f"gate-{uuid.uuid4().hex[:6]}"
    target = configmap("guarded", kfdef_namespace, a="1")
    target["metadata"]["labels"] = {"block": gate}
    repo = tmp_path / "repo"
    write_package(repo, "app", [target, configmap("other", kfdef_namespace)])
    kube.apply(one_app_kfdef("heal", kfdef_namespace, str(repo)))
    wait_ready(kube, "heal", kfdef_namespace)
    kube.apply(blocking_webhook(gate, kfdef_namespace))
    try:
        kube.delete("v1", "ConfigMap", "guarded", kfdef_namespace)
        # The heal is refused (the webhook cannot be called): the KfDef says so.
        failed = wait_condition_reason(kube, "heal", kfdef_namespace, "Degraded", "True", "ApplyFailed", timeout=30)
        assert any("guarded" in f["object"] and "heal failed" in f["message"] for f in failed["status"]["failures"])
    finally:
        kube.delete(WEBHOOK_API, "ValidatingWebhookConfiguration", gate)
    # The retried heal succeeds: the object is back and the KfDef Ready again, without any spec change.
    wait_for(lambda: kube.get("v1", "ConfigMap", "guarded", kfdef_namespace), timeout=30, what="guarded healed")
    wait_ready(kube, "heal", kfdef_namespace, timeout=30)
    assert condition(kube, "heal", kfdef_namespace, "Degraded")["status"] == "False"
    assert kfdef_status(kube, "heal", kfdef_namespace)["failures"] == []
    # ... and drift on it is corrected again.
    kube.apply(configmap("guarded", kfdef_namespace, a="changed"), manager="someone")
    wait_for(lambda: (kube.get("v1", "ConfigMap", "guarded", kfdef_namespace) or {}).get("data", {}).get("a") == "1",
             timeout=30, what="drift on the healed object corrected")


# -- 3. Degraded from a fight goes once the fight is over --------------------------------------------------------------

def test_degraded_from_a_fight_clears_when_the_fight_is_over(operator, kube, kfdef_namespace, tmp_path):
    repo = tmp_path / "repo"
    write_package(repo, "app", [configmap("contested", kfdef_namespace)])
    kube.apply(one_app_kfdef("fight", kfdef_namespace, str(repo)))
    wait_ready(kube, "fight", kfdef_namespace)
    for _ in range(5):  # delete it as soon as it is back, five times: a fight
        old = kube.get("v1", "ConfigMap", "contested", kfdef_namespace)["metadata"]["uid"]
        kube.delete("v1", "ConfigMap", "contested", kfdef_namespace)
        wait_for(lambda: (kube.get("v1", "ConfigMap", "contested", kfdef_namespace) or {}).get("metadata", {})
                 .get("uid") not in (None, old), timeout=30, what="contested back")
    degraded = wait_condition_reason(kube, "fight", kfdef_namespace, "Degraded", "True", "Attention", timeout=30)
    assert "contested" in kube.condition(degraded, "Degraded")["message"]
    # Nobody touches it any more: after the fight window (60 s) plus the last backoff, Degraded clears.
    wait_condition_reason(kube, "fight", kfdef_namespace, "Degraded", "False", timeout=120)
    assert condition(kube, "fight", kfdef_namespace, "Ready")["status"] == "True"


# -- 4. no early Ready: watch events during a new generation do not report it done -------------------------------

class StatusRecorder:
    """Every status of one KfDef as the API server stored it, from a watch (no sampling gaps)."""

    def __init__(self, kube, name: str, namespace: str) -> None:
        self.snapshots: list[tuple[int, dict]] = []
        self._stop = threading.Event()
        self._watch = kube.resource(KFDEF_API, "KfDef")
        self._thread = threading.Thread(target=self._run, args=(name, namespace), daemon=True)
        self._thread.start()

    def _run(self, name: str, namespace: str) -> None:
        while not self._stop.is_set():
            for event in self._watch.watch(namespace=namespace, field_selector=f"metadata.name={name}",
                                           timeout=2):
                obj = event["raw_object"]
                self.snapshots.append((obj["metadata"]["generation"], obj.get("status") or {}))
                if self._stop.is_set():
                    return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def test_no_status_reports_a_generation_done_before_it_is_applied(operator, kube, kfdef_namespace, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    write_package(first, "app", [configmap("a", kfdef_namespace, v="1"), configmap("b", kfdef_namespace)])
    write_package(second, "app", [configmap("a", kfdef_namespace, v="2"), configmap("b", kfdef_namespace)])
    server = TarballServer()
    try:
        server.serve("/first.tar.gz", tarball(first))
        kube.apply(one_app_kfdef("early", kfdef_namespace, server.url("/first.tar.gz")))
        wait_ready(kube, "early", kfdef_namespace)
        recorder = StatusRecorder(kube, "early", kfdef_namespace)
        # Generation 2 names a source that answers only when released: its reconcile hangs in the fetch...
        server.serve("/second.tar.gz", tarball(second), mode="slow")
        kube.apply(one_app_kfdef("early", kfdef_namespace, server.url("/second.tar.gz")))
        new_generation = kube.get(KFDEF_API, "KfDef", "early", kfdef_namespace)["metadata"]["generation"]
        wait_for(lambda: condition(kube, "early", kfdef_namespace, "Reconciling").get("status") == "True",
                 timeout=30, what="generation 2 under way")
        # ... while objects of the stack change, which re-evaluates readiness from watch events.
        for _round in range(3):
            kube.delete("v1", "ConfigMap", "b", kfdef_namespace)
            wait_for(lambda: kube.get("v1", "ConfigMap", "b", kfdef_namespace), timeout=20, what="b healed")
            time.sleep(0.5)  # the readiness refresh is coalesced over 0.2 s: give it the chance to write
        server.routes["/second.tar.gz"].mode = "ok"
        server.release.set()
        wait_for(lambda: (kube.get("v1", "ConfigMap", "a", kfdef_namespace) or {}).get("data", {}).get("v") == "2",
                 timeout=60, what="generation 2 applied")
        wait_ready(kube, "early", kfdef_namespace, timeout=30)
        recorder.stop()
    finally:
        server.close()
    premature = []
    for generation, status in recorder.snapshots:
        if generation != new_generation or status.get("observedGeneration") != new_generation:
            continue
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        applied = status.get("sources") and "second" in json.dumps(status["sources"])
        if not applied and (conditions.get("Ready", {}).get("status") == "True"
                            or conditions.get("Reconciling", {}).get("status") == "False"):
            premature.append(conditions)
    assert not premature, f"generation {new_generation} reported done before it was applied: {premature[0]}"


# -- 5. unexpected errors reach status and events ------------------------------------------------------------------

def restricted_operator_kubeconfig(kube, control_plane, tmp_path: Path, namespace: str) -> Path:
    """A service account allowed everything the operator needs for KfDefs and ConfigMaps, but no Secret lists."""
    suffix = uuid.uuid4().hex[:6]
    rules = [
        {"apiGroups": ["kfdef.apps.kubeflow.org"], "resources": ["kfdefs", "kfdefs/status", "kfdefs/finalizers"],
         "verbs": ["get", "list", "watch", "patch", "update"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch", "get", "list"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch", "update", "delete"]},
    ]
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "restricted",
                                                                           "namespace": namespace}})
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": f"restricted-{suffix}"}, "rules": rules})
    kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": f"restricted-{suffix}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": f"restricted-{suffix}"},
                "subjects": [{"kind": "ServiceAccount", "name": "restricted", "namespace": namespace}]})
    token = control_plane.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/restricted/token",
                                  {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                   "spec": {"expirationSeconds": 3600}})["status"]["token"]
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    config["users"] = [{"name": "restricted", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "restricted"
    path = tmp_path / "restricted.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_forbidden_list_reaches_status_and_events(control_plane, kfdef_crd, kube, kfdef_namespace, tmp_path,
                                                    no_other_operator):
    kubeconfig = restricted_operator_kubeconfig(kube, control_plane, tmp_path, kfdef_namespace)
    repo = tmp_path / "repo"
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": kfdef_namespace},
              "stringData": {"k": "v"}}
    write_package(repo, "app", [configmap("c", kfdef_namespace), secret])
    process = OperatorProcess(kubeconfig, tmp_path / "work", extra_args=("-n", kfdef_namespace))
    process.start()
    try:
        kube.apply(one_app_kfdef("denied", kfdef_namespace, str(repo)))
        degraded = wait_condition_reason(kube, "denied", kfdef_namespace, "Degraded", "True", "Forbidden", timeout=60)
        message = kube.condition(degraded, "Degraded")["message"]
        assert "secrets" in message and "permission" in message, message
        assert condition(kube, "denied", kfdef_namespace, "Ready")["status"] == "False"
        # The Event is posted after the status patch, so it may land a moment later.
        wait_for(lambda: any(e.reason == "Forbidden" and e.type == "Warning" for e in kube.core.list_namespaced_event(
            kfdef_namespace, field_selector="involvedObject.name=denied").items),
                 timeout=30, what="a Warning Event with reason Forbidden on the KfDef")
    finally:
        kube.delete(KFDEF_API, "KfDef", "denied", kfdef_namespace)
        wait_for(lambda: kube.get(KFDEF_API, "KfDef", "denied", kfdef_namespace) is None, timeout=60,
                 what="the KfDef torn down by the restricted operator")
        process.stop()


# -- 6. the opt-out annotation is honoured by apply and prune too ------------------------------------------------

def test_an_opted_out_object_is_neither_overwritten_nor_pruned(operator, kube, kfdef_namespace, tmp_path):
    repo = tmp_path / "repo"
    write_package(repo, "app", [configmap("mine", kfdef_namespace, v="1"), configmap("kept", kfdef_namespace)])
    kube.apply(one_app_kfdef("optout", kfdef_namespace, str(repo)))
    wait_ready(kube, "optout", kfdef_namespace)
    by_hand = configmap("mine", kfdef_namespace, v="by-hand")
    by_hand["metadata"]["annotations"] = {RECONCILE_ANNOTATION: "disabled"}
    kube.apply(by_hand, manager="on-call")
    # A new generation that changes the object: the apply leaves it as the person set it.
    write_package(repo, "app", [configmap("mine", kfdef_namespace, v="2"), configmap("kept", kfdef_namespace)])
    kube.apply(one_app_kfdef("optout", kfdef_namespace, str(repo), version="2"))
    wait_ready(kube, "optout", kfdef_namespace)
    assert kube.get("v1", "ConfigMap", "mine", kfdef_namespace)["data"] == {"v": "by-hand"}
    # A generation that no longer renders it: prune releases it instead of deleting it.
    write_package(repo, "app", [configmap("kept", kfdef_namespace)])
    kube.apply(one_app_kfdef("optout", kfdef_namespace, str(repo), version="3"))
    wait_ready(kube, "optout", kfdef_namespace)
    wait_for(lambda: "mine" not in json.dumps(kfdef_status(kube, "optout", kfdef_namespace).get("inventory")),
             timeout=30, what="mine out of the inventory")
    live = kube.get("v1", "ConfigMap", "mine", kfdef_namespace)
    assert live is not None and live["data"] == {"v": "by-hand"}
    assert "kfdef.apps.kubeflow.org/instance" not in (live["metadata"].get("labels") or {})


# -- 7. finished Jobs with a TTL stay gone ------------------------------------------------------------------------

def test_a_job_removed_by_its_ttl_is_not_recreated(operator, kube, kfdef_namespace, tmp_path):
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate", "namespace": kfdef_namespace},
           "spec": {"ttlSecondsAfterFinished": 0, "backoffLimit": 0, "template": {"spec": {
               "restartPolicy": "Never", "containers": [{"name": "main", "image": "example.invalid/migrate:1"}]}}}}
    repo = tmp_path / "repo"
    write_package(repo, "app", [job, configmap("c", kfdef_namespace)])
    kube.apply(one_app_kfdef("ttl", kfdef_namespace, str(repo)))
    wait_for(lambda: kube.get("batch/v1", "Job", "migrate", kfdef_namespace), timeout=60, what="the Job created")
    uid = kube.get("batch/v1", "Job", "migrate", kfdef_namespace)["metadata"]["uid"]
    # kwok completes its pod, the Job controller marks it Complete, the TTL controller deletes it.
    wait_for(lambda: kube.get("batch/v1", "Job", "migrate", kfdef_namespace) is None, timeout=120,
             what="the Job removed by its TTL")
    # A reconcile of the unchanged KfDef (requested by annotation) must not bring it back either.
    body = kube.get(KFDEF_API, "KfDef", "ttl", kfdef_namespace)
    body["metadata"].setdefault("annotations", {})[REQUESTED_AT_ANNOTATION] = str(time.time())
    kube.apply({"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {
        "name": "ttl", "namespace": kfdef_namespace, "annotations": body["metadata"]["annotations"]}}, manager="poke")
    wait_ready(kube, "ttl", kfdef_namespace, timeout=60)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # watching for a re-creation that must not come
        job_now = kube.get("batch/v1", "Job", "migrate", kfdef_namespace)
        assert job_now is None, f"the finished Job was re-created (uid {job_now['metadata']['uid']}, was {uid})"
        time.sleep(0.5)


# -- 8. sources move: a resync interval re-resolves them --------------------------------------------------------

def test_a_mutable_source_is_followed_on_the_interval_and_unchanged_costs_no_writes(operator, kube, kfdef_namespace,
                                                                                    tmp_path):
    repo = tmp_path / "repo"
    write_package(repo, "app", [configmap("v1", kfdef_namespace)])
    server = TarballServer()
    try:
        route = server.serve("/latest.tar.gz", tarball(repo))
        kube.apply(one_app_kfdef("moving", kfdef_namespace, server.url("/latest.tar.gz"), interval="10s"))
        wait_ready(kube, "moving", kfdef_namespace)
        # The first apply's last writes follow Ready (its Event is posted after the status patch): counted from the
        # first resync on, a whole interval later. CI once counted that Event as the resyncs' write.
        first = len(route.hits)
        wait_for(lambda: len(route.hits) > first, timeout=25, what="the first resync")
        # Unchanged source over two intervals: fetched again, nothing written.
        hits, before = len(route.hits), writes(operator)
        wait_for(lambda: len(route.hits) >= hits + 2, timeout=40, what="two resyncs")
        assert writes(operator) == before, "a resync of an unchanged source wrote to the API server"
        # The same URL now serves new content: it lands without anyone touching the KfDef.
        shutil.rmtree(repo)
        write_package(repo, "app", [configmap("v1", kfdef_namespace), configmap("v2", kfdef_namespace)])
        route.body = tarball(repo)
        wait_for(lambda: kube.get("v1", "ConfigMap", "v2", kfdef_namespace), timeout=40, what="the new content applied")
        wait_ready(kube, "moving", kfdef_namespace, timeout=30)
    finally:
        server.close()


# -- suspend ---------------------------------------------------------------------------------------------------------

def test_a_suspended_kfdef_writes_nothing_and_says_so(operator, kube, kfdef_namespace, tmp_path):
    repo = tmp_path / "repo"
    write_package(repo, "app", [configmap("held", kfdef_namespace)])
    kube.apply(one_app_kfdef("paused", kfdef_namespace, str(repo)))
    wait_ready(kube, "paused", kfdef_namespace)
    kube.apply({"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {
        "name": "paused", "namespace": kfdef_namespace, "annotations": {SUSPEND_ANNOTATION: "true"}}}, manager="pause")
    wait_condition_reason(kube, "paused", kfdef_namespace, "Reconciling", "False", "Suspended", timeout=30)
    kube.delete("v1", "ConfigMap", "held", kfdef_namespace)
    time.sleep(3)  # a heal would take milliseconds; give it ample time to (wrongly) happen
    assert kube.get("v1", "ConfigMap", "held", kfdef_namespace) is None, "a suspended KfDef healed an object"
    kube.apply({"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {
        "name": "paused", "namespace": kfdef_namespace, "annotations": {SUSPEND_ANNOTATION: "false"}}}, manager="pause")
    wait_for(lambda: kube.get("v1", "ConfigMap", "held", kfdef_namespace), timeout=30, what="resumed and re-applied")
    wait_ready(kube, "paused", kfdef_namespace)


def test_a_kfdef_deleted_with_cascade_orphan_leaves_its_objects_and_a_suspended_one_is_torn_down(
        operator, kube, kfdef_namespace, tmp_path):
    repo = tmp_path / "repo"
    write_package(repo, "app", [configmap("kept", kfdef_namespace)])
    kube.apply(one_app_kfdef("orphaned", kfdef_namespace, str(repo)))
    wait_ready(kube, "orphaned", kfdef_namespace)
    assert kube.get("v1", "ConfigMap", "kept", kfdef_namespace)["metadata"].get("ownerReferences")
    kube.delete(KFDEF_API, "KfDef", "orphaned", kfdef_namespace, body={"propagationPolicy": "Orphan"})
    kube.wait_gone(KFDEF_API, "KfDef", "orphaned", kfdef_namespace, timeout=60)
    kept = kube.get("v1", "ConfigMap", "kept", kfdef_namespace)
    assert kept is not None and not kept["metadata"].get("ownerReferences")

    write_package(repo, "app", [configmap("gone", kfdef_namespace)])
    kube.apply(one_app_kfdef("paused", kfdef_namespace, str(repo)))
    wait_ready(kube, "paused", kfdef_namespace)
    kube.apply({"apiVersion": KFDEF_API, "kind": "KfDef", "metadata": {
        "name": "paused", "namespace": kfdef_namespace, "annotations": {SUSPEND_ANNOTATION: "true"}}}, manager="pause")
    wait_condition_reason(kube, "paused", kfdef_namespace, "Reconciling", "False", "Suspended", timeout=30)
    kube.delete(KFDEF_API, "KfDef", "paused", kfdef_namespace)
    kube.wait_gone(KFDEF_API, "KfDef", "paused", kfdef_namespace, timeout=60)
    assert kube.get("v1", "ConfigMap", "gone", kfdef_namespace) is None
