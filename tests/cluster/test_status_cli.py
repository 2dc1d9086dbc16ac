"""``kfdef-operator status`` typed as a user types it, while a stack goes through failed, unhealthy, Ready and
healed: the tree and the exit code at each step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.conftest import KFDEF_API, wait_condition_reason
from tests.commands import ROOT, kfdef_operator
from tests.kube import wait_for
from tests.stacks import deployment, write_package

pytestmark = pytest.mark.cluster


def _objects(namespace: str, *, port: int, schedulable: bool) -> list[dict]:
    web = deployment("web", namespace)
    if not schedulable:  # no node matches: its pod stays Pending, the Deployment never becomes Available
        web["spec"]["template"]["spec"]["nodeSelector"] = {"example.org/no-such-node": "true"}
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": namespace},
             "data": {"mode": "on-call"}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": namespace},
             "spec": {"selector": {"app": "web"}, "ports": [{"port": port}]}},
            web]


def _kfdef(namespace: str, repo: Path, generation_note: str) -> dict:
    return {"apiVersion": KFDEF_API, "kind": "KfDef",
            "metadata": {"name": "oncall", "namespace": namespace, "labels": {"note": generation_note}},
            "spec": {"applications": [
                {"name": "web", "kustomizeConfig": {"repoRef": {"name": "manifests", "path": "web"},
                                                    "parameters": [{"name": "note", "value": generation_note}]}}],
                "repos": [{"name": "manifests", "uri": str(repo)}]}}


def _status(control_plane, namespace: str, *args: str) -> subprocess.CompletedProcess:
    return kfdef_operator("status", "oncall", "-n", namespace, *args, kubeconfig=control_plane.kubeconfig)


def test_status_follows_a_stack_through_failed_unhealthy_ready_and_healed(operator, control_plane, kube,
                                                                        kfdef_namespace, tmp_path):
    ns = kfdef_namespace
    repo = tmp_path / "repo"

    # 1. Failed: the API server refuses the Service (port out of range), the Deployment cannot be scheduled.
    write_package(repo, "web", _objects(ns, port=70000, schedulable=False))
    kube.apply(_kfdef(ns, repo, "1"))
    wait_condition_reason(kube, "oncall", ns, "Ready", "False", "ApplyFailed")
    done = _status(control_plane, ns)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"KfDef {ns}/oncall: NOT READY: ApplyFailed: 1 of 3 objects not applied"), done.stdout
    assert "  Degraded=True ApplyFailed: " in done.stdout
    assert lines[3] == "└── web (1 failed, 1 not ready, 1 healthy)", done.stdout
    failed = next(line for line in lines if f"✗ Service {ns}/web: failed to apply: " in line)
    not_ready = next(line for line in lines if f"… Deployment.apps {ns}/web: not ready" in line)
    healthy = next(line for line in lines if "✓ 1 healthy: 1 ConfigMap" in line)
    assert lines.index(failed) < lines.index(not_ready) < lines.index(healthy)
    # What the alerts and the dashboard read (deploy/monitoring/).
    exported = operator.metrics()
    assert exported[f'kfdef_degraded_reason{{name="oncall",namespace="{ns}",reason="ApplyFailed"}}'] == 1
    assert exported[f'kfdef_objects{{name="oncall",namespace="{ns}",state="failed"}}'] == 1

    # 2. Unhealthy: the Service fixed, the Deployment still unschedulable.
    write_package(repo, "web", _objects(ns, port=80, schedulable=False))
    kube.apply(_kfdef(ns, repo, "2"))
    wait_condition_reason(kube, "oncall", ns, "Ready", "False", "WaitingForHealth")
    done = _status(control_plane, ns)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "NOT READY: WaitingForHealth: 1 of 3 objects not ready" in done.stdout.splitlines()[0]
    assert "failed" not in done.stdout and f"… Deployment.apps {ns}/web: not ready" in done.stdout
    assert "✓ 2 healthy: 1 ConfigMap, 1 Service" in done.stdout
    document = json.loads(_status(control_plane, ns, "-o", "json").stdout)
    assert document["ready"] is False
    assert document["applications"][0]["counts"] == {"not-ready": 1, "healthy": 2}

    # 3. Ready, waited for with --watch as a script would: it prints the tree as it changes, then exits 0.
    watch = subprocess.Popen([sys.executable, "-m", "kfdef_operator", "status", "oncall", "-n", ns, "--watch",
                              "--timeout", "90s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, "KUBECONFIG": str(control_plane.kubeconfig)})
    first = watch.stdout.readline()  # the first tree printed: the fix comes after it
    assert first.startswith(f"KfDef {ns}/oncall: NOT READY: "), first
    write_package(repo, "web", _objects(ns, port=80, schedulable=True))
    kube.apply(_kfdef(ns, repo, "3"))
    out, err = watch.communicate(timeout=120)
    assert watch.returncode == 0, out + err
    assert f"\nKfDef {ns}/oncall: Ready: Ready: all 3 objects applied and ready\n" in out, out
    done = _status(control_plane, ns)
    assert done.returncode == 0, done.stdout
    assert done.stdout.splitlines()[-1] == "    └── ✓ 3 healthy: 1 ConfigMap, 1 Deployment, 1 Service", done.stdout
    exported = operator.metrics()
    assert exported[f'kfdef_objects{{name="oncall",namespace="{ns}",state="ready"}}'] == 3
    assert not any(key.startswith("kfdef_degraded_reason{") and f'namespace="{ns}"' in key for key in exported)

    # 4. Healed: the ConfigMap deleted by hand comes back; status names how often it was healed.
    kube.delete("v1", "ConfigMap", "settings", ns)
    wait_for(lambda: (_status(control_plane, ns).stdout.count(f"~ ConfigMap {ns}/settings: healed 1 time") == 1),
             timeout=60, what="the heal shown by status")
    done = _status(control_plane, ns)
    assert done.returncode == 0 and "✓ 2 healthy: 1 Deployment, 1 Service" in done.stdout, done.stdout

    # Errors: exit 2 with one line.
    missing = kfdef_operator("status", "no-such-kfdef", "-n", ns, kubeconfig=control_plane.kubeconfig)
    assert (missing.returncode, missing.stderr) == (2, f"error: KfDef {ns}/no-such-kfdef not found\n")
