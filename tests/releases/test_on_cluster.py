"""Real Kubeflow releases deployed end to end on the embedded control plane, the operator running as a process.

For v1.2.0 (the kfctl_k8s_istio KfDef, stacks mode) and v1.11.0 (the shipped ``example/`` sample, plain mode), each
from its release archive as a ``file:`` URI, one after the other on one control plane, one scenario in six steps:

1. deploy: every object is applied, except those the stack's own fail-closed webhooks block, each named with its
   webhook (and the one object of v1.11.0 that kustomize 5.8 leaves unresolved, see ``KNOWN_DEFECTS``);
2. every object of the stack that one of its fail-closed webhooks intercepts is deleted: the heal is refused, the
   status names each object with its webhook, and Ready is False for that reason;
3. the release with what a kwok-run cluster cannot serve left out (``kfdef_dev/unservable.py``, thin wrapper
   kustomizations): a truthful Ready, every remaining object applied and healthy;
4. a no-op restart of the operator and an idle minute of kube-apiserver's clock: not one write of the operator's in
   the API server's audit log, nor in the operator's own metrics;
5. the training operator's Deployment deleted: healed, Available again, the stack Ready again;
6. teardown: nothing of the stack left (aggregated ClusterRoles included), nothing that existed before touched (a
   snapshot of every object of the cluster before and after).

The releases share the control plane only because the teardown proves the cluster back to its snapshot: the second
release starts only once the cluster is the same as before the first (else it errors, naming what is left over).
The idle window is a minute, not the benchmark's five (``bench/``): a write loop of the operator shows within
seconds, and the heal's fight backoff never spaces a loop's writes more than 32 s apart
(``tests/unit/test_heal_backoff.py``).

The KfDef lives in a namespace of its own, created before the snapshot, so that the stack's own namespaces
(``kubeflow`` included) are created and deleted by the stack. Storage is simulated: PersistentVolumes created after
the snapshot (nothing provisions volumes in this cluster) let the stack's claims bind and its pods schedule.
Figures go to ``<basetemp>/releases-on-cluster.json`` (docs/releases.md shows them).
"""

from __future__ import annotations

import datetime
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kfdef_dev.controlplane import ControlPlane
from kfdef_dev.releases import ARCHIVES, MODERN_SAMPLE, STACKS, v1_11_0_profile_repair
from kfdef_dev.unservable import Excluded, intercepted, write_wrappers
from kfdef_operator.upgrade.convert import served_for_release, upgrade_objects
from tests.cluster.conftest import KFDEF_API, install_kfdef_crd
from tests.kube import Kube, wait_for
from tests.operator_process import OperatorProcess
from tests.releases.conftest import Rendered
from tests.releases.snapshot import Snapshot

pytestmark = pytest.mark.cluster

JSON = dict[str, Any]
NAMESPACE = "kfdef-releases"
NAME = "kubeflow"
#: Of kube-apiserver's clock, as its audit log records it (the API server and kwok renew Leases every few seconds).
IDLE_S = 60.0
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
#: The operator's requests in the audit log, by user agent: its own client's and kopf's.
OPERATOR_AGENTS = ("kfdef-operator/", "kopf/")
BLOCKED = "blocked by the stack's own webhook"
FIGURES: dict[str, JSON] = {}


@dataclass(frozen=True)
class Release:
    kfdef: Path
    rendered: str                        # the offline fixture (tests/releases/conftest.py) and its key
    key: str
    objects: int                         # distinct objects rendered
    upgraded: int                        # objects converted to served API versions
    training_operator: tuple[str, str]   # its Deployment: namespace, name
    #: Objects the API server refuses for reasons of the release itself: object -> words of the message.
    known_defects: dict[str, str] = field(default_factory=dict)
    #: Objects rendered twice (the last one wins, as with kfctl): a warning, not Degraded.
    rendered_twice: int = 0


RELEASES = {
    "v1.2.0": Release(STACKS / "kfdefs" / "kfctl_k8s_istio.v1.2.0.yaml", "v1_2_0", "kfctl_k8s_istio.v1.2.0.yaml",
                      560, 132, ("kubeflow", "tf-job-operator"), rendered_twice=5),
    # example/'s user Profile keeps its placeholder name under kustomize 5.8 (see v1_11_0_profile_repair).
    "v1.11.0": Release(MODERN_SAMPLE, "v1_11_0", "plain", 653, 0,
                       ("kubeflow-system", "kubeflow-trainer-controller-manager"),
                       {"Profile.kubeflow.org $(profile-name)": 'metadata.name: Invalid value: "$(profile-name)"'}),
}


def audit_time(event: JSON) -> float:
    """When kube-apiserver finished the request, by its own clock (seconds since the epoch)."""
    return datetime.datetime.fromisoformat(event["stageTimestamp"]).timestamp()


def operators_write(event: JSON) -> bool:
    """A write of the operator's that changes something: dry runs and its leader Lease aside, as in ``bench/``."""
    return (event.get("userAgent", "").startswith(OPERATOR_AGENTS) and event["verb"] not in ("get", "list", "watch")
            and (event.get("objectRef") or {}).get("resource") != "leases" and "dryRun=" not in event["requestURI"])


class AuditLog:
    """kube-apiserver's audit log (writes only, see ``AUDIT_POLICY``), read on from where it was last read."""

    def __init__(self, plane: ControlPlane) -> None:
        self.path, self.offset = plane.audit_log, 0

    def new_events(self) -> list[JSON]:
        """The events recorded since the last call (whole lines only: the server may be writing one)."""
        with self.path.open("rb") as log:
            log.seek(self.offset)
            complete, newline, _ = log.read().rpartition(b"\n")
        self.offset += len(complete) + len(newline)
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def skip_to_end(self) -> None:
        self.new_events()

    def span(self, seconds: float) -> list[JSON]:
        """Every event from the next one recorded on, until the log shows ``seconds`` of the server's clock since
        that one (bounded: a silent log fails)."""
        events: list[JSON] = []

        def spanned() -> bool:
            events.extend(self.new_events())
            return bool(events) and audit_time(events[-1]) - audit_time(events[0]) >= seconds
        wait_for(spanned, timeout=seconds + 60, what=f"kube-apiserver's audit log to span {seconds:.0f} s")
        return events


@dataclass(frozen=True)
class Cluster:
    """The control plane the releases share, with the KfDef CRD and the KfDef's namespace, as it was before."""

    plane: ControlPlane
    kube: Kube
    before: Snapshot


@dataclass
class Run:
    """One release on the shared control plane, as the scenario goes on."""

    name: str
    release: Release
    kube: Kube
    audit: AuditLog
    operator: OperatorProcess
    kfdef: JSON                          # as a user deploys it
    wrapped: JSON                        # with what kwok cannot serve left out
    excluded: list[Excluded]
    desired: list[JSON]                  # rendered and upgraded, offline
    before: Snapshot
    volumes: list[str]                   # simulated PersistentVolumes, created after the snapshot
    figures: JSON = field(default_factory=dict)

    def status(self) -> JSON:
        return (self.kube.get(KFDEF_API, "KfDef", NAME, NAMESPACE) or {}).get("status") or {}

    def condition(self, type_: str) -> JSON:
        return next((c for c in self.status().get("conditions") or [] if c["type"] == type_), {})

    def writes(self) -> int:
        return int(sum(v for k, v in self.operator.metrics().items()
                       if k.startswith("kfdef_api_requests_total") and any(f'"{w}"' in k for w in WRITE_VERBS)))


def as_user_deploys(release: Release, archive: str) -> JSON:
    """The release's KfDef with its repos pointing at the release archive as a ``file:`` URI."""
    kfdef = yaml.safe_load(release.kfdef.read_text())
    kfdef["metadata"] = {"name": NAME, "namespace": NAMESPACE}  # kfctl's files name none
    for repo in kfdef["spec"]["repos"]:
        repo["uri"] = (STACKS / archive).as_uri()
    return kfdef


def simulated_storage(kube: Kube, count: int = 8) -> list[str]:
    """PersistentVolumes for the stack's claims to bind (no provisioner runs here); their names."""
    names = [f"simulated-volume-{i}" for i in range(count)]
    for name in names:
        kube.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
                    "spec": {"capacity": {"storage": "100Gi"}, "persistentVolumeReclaimPolicy": "Retain",
                             "accessModes": ["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany"],
                             "hostPath": {"path": f"/var/simulated/{name}"}}})
    return names


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """The control plane (with an audit log) the releases take turns on; its snapshot taken once, before the
    first."""
    with ControlPlane(audit=True) as plane:
        kube = Kube(plane.kubeconfig)
        try:
            install_kfdef_crd(kube)
            kube.create_namespace(NAMESPACE)
            wait_for(lambda: kube.exists("v1", "ConfigMap", "kube-root-ca.crt", NAMESPACE)
                     and kube.exists("v1", "ServiceAccount", "default", NAMESPACE), what="the namespace's defaults")
            yield Cluster(plane, kube, Snapshot.settled(kube))
        finally:
            kube.close()


def differences_from(before: Snapshot, kube: Kube) -> JSON:
    """What still differs from ``before`` once the cluster is the same again, or after two minutes of waiting for it
    (``{"left over": [], "gone": [], "changed": [], "unreadable": []}``: the same)."""
    differences: JSON = {}

    def same() -> bool:
        after = Snapshot.take(kube)
        differences.update(before.compare(after), unreadable=after.unreadable)
        return not any(differences.values())
    try:
        wait_for(same, timeout=120, what="the cluster as it was before the deploy")
    except AssertionError:
        pass  # the caller says what differs
    return differences


@pytest.fixture(scope="module", params=list(RELEASES))
def run(request, release_trees, tmp_path_factory) -> Iterator[Run]:
    name, release = request.param, RELEASES[request.param]
    rendered: Rendered = request.getfixturevalue(release.rendered)[release.key]
    tree = tmp_path_factory.mktemp(f"tree-{name}") / "manifests"
    shutil.copytree(release_trees[name].local_path, tree)
    kfdef = as_user_deploys(release, ARCHIVES[name])
    repairs = {"kubeflow": v1_11_0_profile_repair(tree)} if release.known_defects else {}
    wrapped, excluded = write_wrappers(kfdef, tree, {app.name: app.objects for app in rendered.applications}, repairs)
    desired = upgrade_objects(rendered.objects, served_for_release("1.36")).objects
    # Started after the offline renders, as each release's own control plane was: the first deploy meets a control
    # plane seconds old, the timing its webhook-blocked pods were measured with.
    cluster: Cluster = request.getfixturevalue("cluster")
    # What an earlier release's teardown test proved; checked again, after that release's clean-up below.
    left = differences_from(cluster.before, cluster.kube)
    assert not any(left.values()), f"an earlier release left the cluster other than it was: {left}"
    kube = cluster.kube
    volumes = simulated_storage(kube)
    # Local sources: the release archives, and the tree with the wrappers in the test's temporary directory.
    operator = OperatorProcess(cluster.plane.kubeconfig, tmp_path_factory.mktemp(f"operator-{name}"),
                               local_source_roots=(tmp_path_factory.getbasetemp(), STACKS))
    operator.start()
    current = Run(name, release, kube, AuditLog(cluster.plane), operator, kfdef, wrapped, excluded, desired,
                  cluster.before, volumes,
                  {"objects expected": release.objects, "excluded for Ready": len(excluded),
                   "simulated volumes": len(volumes)})
    try:
        yield current
    finally:
        FIGURES[name] = current.figures
        (tmp_path_factory.getbasetemp() / "releases-on-cluster.json").write_text(json.dumps(FIGURES, indent=1))
        try:  # the teardown test did this unless it failed or did not run: leave the next release a clean cluster
            kube.delete(KFDEF_API, "KfDef", NAME, NAMESPACE)
            kube.wait_gone(KFDEF_API, "KfDef", NAME, NAMESPACE, timeout=600)
            for volume in volumes:
                kube.delete("v1", "PersistentVolume", volume)
        finally:
            operator.stop()


def reconciled(run: Run, generation: int) -> JSON | None:
    """The status once the generation's apply is done (Reconciling False), else None."""
    status = run.status()
    reconciling = next((c for c in status.get("conditions") or [] if c["type"] == "Reconciling"), {})
    if status.get("observedGeneration") == generation and reconciling.get("status") == "False" and "summary" in status:
        return status
    return None


def failures_of(status: JSON) -> dict[str, str]:
    return {f["object"]: f["message"] for f in status.get("failures") or []}


# -- 1 ----------------------------------------------------------------------------------------------------------------

def test_deploy_applies_everything_but_what_the_stacks_own_webhooks_block(run: Run):
    started = time.monotonic()
    run.kube.apply(run.kfdef)
    status = wait_for(lambda: reconciled(run, 1), timeout=600, what="the first apply")
    run.figures["settle s (first apply done)"] = round(time.monotonic() - started, 1)
    summary, failures = status["summary"], failures_of(status)
    blocked = {obj: message for obj, message in failures.items() if BLOCKED in message}
    assert {obj: message for obj, message in failures.items() if obj not in blocked}.keys() == \
        run.release.known_defects.keys(), failures
    for obj, words in run.release.known_defects.items():
        assert words in failures[obj]
    assert summary["total"] == run.release.objects
    assert summary["applied"] == summary["total"] - len(failures)
    # status.summary.upgraded and status.upgrades count the same objects.
    assert summary["upgraded"] == status["upgrades"]["count"] == run.release.upgraded
    run.figures.update({"applied": summary["applied"], "blocked by the stack's webhooks": len(blocked),
                        "refused (release defects)": len(failures) - len(blocked), "upgraded": summary["upgraded"]})
    if not failures:
        # Not Ready, truthfully: the stack's pods are refused by its own webhooks, and the status says so. Pods the
        # ReplicaSet controller made before the webhooks were applied (last, after a slow first apply) were never
        # intercepted: they are deleted, so that every pod is one made after, as after any restart of the stack.
        for namespace in sorted({obj["metadata"].get("namespace") or "" for obj in run.desired
                                 if obj["kind"] in ("Deployment", "StatefulSet")} - {""}):
            run.kube.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        seen: list[str] = []

        def names_the_webhook() -> bool:
            seen[:] = [run.condition("Ready").get("message", "")]
            return BLOCKED in seen[0]

        try:
            wait_for(names_the_webhook, timeout=180, what="Ready to name a webhook that blocks the stack's pods")
        except AssertionError as error:
            raise AssertionError(f"{error}; Ready said: {seen}") from None
        ready = run.condition("Ready")
        assert ready["status"] == "False" and ready["reason"] == "WaitingForHealth"
        assert f"pods not created: {BLOCKED}" in ready["message"]


# -- 2 ----------------------------------------------------------------------------------------------------------------

def test_what_the_stacks_webhooks_intercept_is_refused_and_named_with_its_webhook(run: Run):
    def resource_of(obj: JSON) -> tuple[str, bool]:
        resource = run.kube.resource(obj["apiVersion"], obj["kind"])
        return resource.name, resource.namespaced

    # Objects whose deletion a webhook of the stack guards too cannot be deleted (knative's Certificate): not here.
    guarded = intercepted(run.desired, resource_of, "DELETE")
    victims = {ref: victim for ref, victim in intercepted(run.desired, resource_of).items() if ref not in guarded}
    assert victims, "the release has objects its own fail-closed webhooks intercept"
    for victim in victims.values():
        run.kube.delete(victim.obj["apiVersion"], victim.obj["kind"], victim.obj["metadata"]["name"], victim.namespace)

    def all_named() -> dict[str, str] | None:
        failures = failures_of(run.status())
        named = {ref: failures.get(ref, "") for ref in victims}
        return named if all(f"{BLOCKED} " in message and f"/{victims[ref].webhook}:" in message
                            for ref, message in named.items()) else None

    named = wait_for(all_named, timeout=120, what=f"status to name the webhook blocking each of {len(victims)} objects")
    assert all(message.startswith(("heal failed: " + BLOCKED, BLOCKED)) for message in named.values()), named
    ready = run.condition("Ready")
    assert ready["status"] == "False" and ready["reason"] == "ApplyFailed"
    run.figures["blocked on re-create (intercepted by the stack's webhooks)"] = len(victims)


# -- 3 ----------------------------------------------------------------------------------------------------------------

def test_with_what_kwok_cannot_serve_left_out_the_stack_is_ready(run: Run):
    started = time.monotonic()
    run.kube.apply(run.wrapped)
    wait_for(lambda: run.condition("Ready").get("status") == "True" and reconciled(run, 2), timeout=600,
             what=f"Ready with {len(run.excluded)} objects left out")
    run.figures["ready s (after leaving out the unservable)"] = round(time.monotonic() - started, 1)
    status = run.status()
    summary = status["summary"]
    assert summary["total"] == summary["applied"] == summary["ready"] == run.release.objects - len(run.excluded)
    assert summary["failed"] == 0 and status["failures"] == []
    assert run.condition("Ready")["message"] == f"all {summary['total']} objects applied and ready"
    for excluded in run.excluded:  # pruned: the new generation no longer renders them (served at v1 here)
        assert not run.kube.exists(excluded.api_version.rpartition("/")[0] + "/v1", excluded.kind, excluded.name)
    degraded = run.condition("Degraded")
    # v1.2.0 renders five objects twice with different labels (the last one wins, as with kfctl): a note in
    # status.warnings, nothing for a person to act on.
    assert degraded["status"] == "False", degraded
    noted = [w for w in status.get("warnings") or [] if w.startswith("rendered twice (last wins): ")]
    assert len(noted) == (1 if run.release.rendered_twice else 0), status.get("warnings")


# -- 4 ----------------------------------------------------------------------------------------------------------------

def test_a_restart_and_an_idle_minute_write_nothing(run: Run):
    started = time.monotonic()
    run.operator.stop()
    # Counted once the old process is gone: heal retries it still had due from step 2 are not the restart's.
    run.audit.skip_to_end()
    run.operator.start()
    wait_for(lambda: run.operator.metrics().get('kfdef_reconcile_duration_seconds_count{result="success"}'),
             timeout=300, what="the restarted operator's first reconcile")
    run.figures["restart s (to the first reconcile done)"] = round(time.monotonic() - started, 1)
    assert run.writes() == 0, "a restart over an unchanged stack wrote"
    restart = run.audit.new_events()
    before = run.operator.metrics()
    # The window opens with the first event the server records after the restart's reconcile was seen done.
    idle = run.audit.span(IDLE_S)
    after = run.operator.metrics()
    requests = {k: after[k] - before.get(k, 0) for k in after if k.startswith("kfdef_api_requests_total")}
    audited = [f"{e['verb']} {e['requestURI']}" for e in restart + idle if operators_write(e)]
    minutes = (audit_time(idle[-1]) - audit_time(idle[0])) / 60
    run.figures["idle writes/min"] = sum(operators_write(e) for e in idle) / minutes
    run.figures["idle window s (audit log)"] = round(minutes * 60, 1)
    run.figures["idle requests in the window"] = {k: v for k, v in requests.items() if v}
    assert audited == [], "the operator wrote over the restart or while idle (kube-apiserver's audit log)"
    assert run.writes() == 0, f"writes while idle: {requests}"
    assert run.condition("Ready")["status"] == "True"


# -- 5 ----------------------------------------------------------------------------------------------------------------

def test_the_training_operator_deployment_is_healed(run: Run):
    namespace, name = run.release.training_operator
    old = run.kube.get("apps/v1", "Deployment", name, namespace)["metadata"]["uid"]
    started = time.monotonic()
    run.kube.delete("apps/v1", "Deployment", name, namespace)
    wait_for(lambda: (run.kube.get("apps/v1", "Deployment", name, namespace) or {"metadata": {"uid": old}})
             ["metadata"]["uid"] != old, timeout=10, what=f"{namespace}/{name} re-created")
    run.figures["heal s (Deployment back)"] = round(time.monotonic() - started, 2)
    run.kube.wait_condition("apps/v1", "Deployment", name, "Available", namespace=namespace, timeout=120)
    wait_for(lambda: run.condition("Ready").get("status") == "True", timeout=60, what="Ready again")


# -- 6 ----------------------------------------------------------------------------------------------------------------

def test_teardown_leaves_nothing_and_touches_nothing_that_was_there(run: Run):
    started = time.monotonic()
    run.kube.delete(KFDEF_API, "KfDef", NAME, NAMESPACE)
    run.kube.wait_gone(KFDEF_API, "KfDef", NAME, NAMESPACE, timeout=600)
    run.figures["teardown s"] = round(time.monotonic() - started, 1)
    for volume in run.volumes:
        run.kube.delete("v1", "PersistentVolume", volume)
    differences = differences_from(run.before, run.kube)
    run.figures["teardown leftovers"] = len(differences["left over"])
    assert differences == {"left over": [], "gone": [], "changed": [], "unreadable": []}
