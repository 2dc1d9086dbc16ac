"""Operator replicas on their own control plane, and the API server's audit log of what each one wrote.

Each replica runs as its own group-less token user (bound to cluster-admin: RBAC is proven elsewhere), so the
audit log, the server's own record, says which replica sent every write. Leader election uses short timings
(lease 4 s, renew deadline 3 s, retry 1 s) to keep the scenarios quick; the rules are those of the defaults.
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kfdef_dev.controlplane import ControlPlane
from tests.cluster.conftest import CRD_FILE
from tests.kube import Kube, wait_for
from tests.operator_process import OperatorProcess
from tests.reliability.support import OPERATOR_ENV

LEASE_NAMESPACE = "kfdef-operator-system"
LEASE_DURATION_S = 4.0
ELECTION_ARGS = ("--enable-leader-election", "--leader-election-namespace", LEASE_NAMESPACE,
                 "--leader-election-lease-duration", "4s", "--leader-election-renew-deadline", "3s",
                 "--leader-election-retry-period", "1s")
REPLICA_USERS = tuple(f"replica-{n}" for n in range(10))
WRITES = frozenset({"create", "update", "patch", "delete"})


def replica_plane() -> ControlPlane:
    """A control plane with an audit log and a token user per replica (each a cluster-admin)."""
    plane = ControlPlane(audit=True, users=REPLICA_USERS)
    plane.start()
    try:
        for user in REPLICA_USERS:
            plane.request("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{user}-admin"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
        plane.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": LEASE_NAMESPACE}})
    except BaseException:
        plane.stop()
        raise
    return plane


class Replicas:
    """Starts replicas, each under the next unused user; every one started is stopped at the end."""

    def __init__(self, plane: ControlPlane, work_dir: Path) -> None:
        """``work_dir``: a directory of the test's ``tmp_path``, whose stacks the replicas may read."""
        self.plane = plane
        self.work_dir = work_dir
        self._users: Iterator[str] = iter(REPLICA_USERS)
        self.started: list[OperatorProcess] = []

    def start(self, *extra_args: str, election: bool = True) -> OperatorProcess:
        user = next(self._users)
        process = OperatorProcess(self.plane.kubeconfig_for(user), self.work_dir / user,
                                  extra_args=(*(ELECTION_ARGS if election else ()), *extra_args),
                                  env={**OPERATOR_ENV, "POD_NAME": user},
                                  local_source_roots=(self.work_dir.parent,))  # the test's tmp_path: its stacks
        process.user = user  # type: ignore[attr-defined]
        process.start()
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.started:
            process.stop()


# --- fixtures of a module whose tests run replicas on a plane of its own ----------------------------------------

@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    """A control plane of the module's own (:func:`replica_plane`)."""
    started = replica_plane()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def kube(plane: ControlPlane) -> Iterator[Kube]:
    """The admin client of the module's plane, the KfDef CRD installed; the shared fixtures (``kfdef_namespace``)
    use it there."""
    admin = Kube(plane.kubeconfig)
    admin.apply_yaml(CRD_FILE.read_text())
    admin.wait_condition("apiextensions.k8s.io/v1", "CustomResourceDefinition", "kfdefs.kfdef.apps.kubeflow.org",
                         "Established")
    yield admin
    admin.close()


@pytest.fixture
def replicas(plane: ControlPlane, tmp_path: Path) -> Iterator[Replicas]:
    """Replicas of the test, each stopped at its end."""
    started = Replicas(plane, tmp_path / "replicas")
    yield started
    started.stop_all()


def holder(kube: Kube, lease: str = "kfdef-operator-leader-election") -> str:
    """The replica (user) holding the lease, '' when none does."""
    spec = (kube.get("coordination.k8s.io/v1", "Lease", lease, LEASE_NAMESPACE) or {}).get("spec") or {}
    return (spec.get("holderIdentity") or "").rsplit("_", 1)[0]


def wait_leader(kube: Kube, user: str, *, lease: str = "kfdef-operator-leader-election", timeout: float = 30) -> None:
    wait_for(lambda: holder(kube, lease) == user, timeout=timeout, what=f"{user} to hold the lease {lease}")


# --- the audit log ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Write:
    """One write request as kube-apiserver recorded it."""

    user: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    at: float            # requestReceivedTimestamp, seconds since the epoch

    @property
    def created(self) -> bool:
        return self.code == 201

    @property
    def succeeded(self) -> bool:
        return 200 <= self.code < 300

    def unanswered(self, killed: str) -> bool:
        """The ``killed`` replica sent it and died waiting: the log records a timeout (504) whether or not the
        server went on to store it (a request whose client is gone may be cancelled before it reaches etcd)."""
        return self.user == killed and self.code == 504

    def of_object(self, resource: str, namespace: str | None, name: str) -> bool:
        return (self.resource, self.namespace, self.name, self.subresource) == (resource, namespace or "", name, "")


def writes(plane: ControlPlane, users: Iterable[str], *, since: float = 0.0, leases: bool = False) -> list[Write]:
    """Every write (dry runs excluded) the given users sent since ``since``: Lease updates only with ``leases``."""
    users = set(users)
    found = []
    for event in plane.audit_events():
        ref = event.get("objectRef") or {}
        if (event["user"]["username"] not in users or event["verb"] not in WRITES
                or (ref.get("resource") == "leases") != leases or "dryRun=" in event.get("requestURI", "")):
            continue
        at = datetime.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
        if at < since:
            continue
        # The API server files a Namespace under itself (objectRef.namespace == its name).
        namespace = "" if ref.get("resource") == "namespaces" else ref.get("namespace", "")
        found.append(Write(event["user"]["username"], event["verb"], ref.get("resource", ""),
                           ref.get("subresource", ""), namespace, ref.get("name", ""),
                           int((event.get("responseStatus") or {}).get("code") or 0), at))
    return found


def landed(object_writes: list[Write], killed: str) -> list[Write]:
    """The writes to one object that took effect, in order: those that succeeded, and those of the ``killed``
    replica left unanswered unless a later create (HTTP 201) of the object shows it was not there, so the
    unanswered write was not stored (nothing deleted it in between, or that delete would be in the log)."""
    ordered = sorted(object_writes, key=lambda w: w.at)
    took_effect = []
    for index, write in enumerate(ordered):
        if write.succeeded:
            took_effect.append(write)
        elif write.unanswered(killed):
            later = ordered[index + 1:]
            until_delete = list(itertools.takewhile(lambda w: not (w.verb == "delete" and w.succeeded), later))
            if not any(w.created for w in until_delete):
                took_effect.append(write)
    return took_effect


def plural(kind: str) -> str:
    """The resource name of the kinds the test stacks hold (all form their plural with an 's')."""
    return kind.lower() + "s"


def stack_writes(all_writes: list[Write], idents: Iterable[tuple[str, str, str, str | None]], kfdef: str,
                 kfdef_namespace: str) -> list[Write]:
    """The writes made for one KfDef: to its objects, to the KfDef itself, and Events in its namespace."""
    objects = {(plural(kind), namespace or "", name) for _, kind, name, namespace in idents}
    return [w for w in all_writes
            if (w.resource, w.namespace, w.name) in objects and not w.subresource
            or w.resource == "kfdefs" and (w.namespace, w.name) == (kfdef_namespace, kfdef)
            or w.resource == "events" and w.namespace == kfdef_namespace]


def writers_in_turn(found: list[Write]) -> list[str]:
    """The users in the order their writes arrived, consecutive repeats folded: [a, b] means a, then only b."""
    return [user for user, _ in itertools.groupby(w.user for w in sorted(found, key=lambda w: w.at))]
