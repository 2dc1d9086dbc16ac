"""``python -m kfdef_dev demo`` (``make demo``): the whole story on an embedded control plane, in about a minute.

Starts the local control plane (etcd, kube-apiserver, controller-manager,
scheduler, kwok), installs the KfDef CRD, runs the operator as its own
process, creates the demo KfDef (``kfdefs/demo``: a Kubeflow-like stack with
a ``tf-job-operator`` Deployment), follows its status until Ready and shows it
with ``kubectl get kfdef``, deletes ``tf-job-operator`` and shows it healed
(``kubectl describe kfdef``, ``kfdef-operator diff``), then deletes the KfDef
and shows the teardown. Everything it started is stopped, and its temporary
directory removed (kept, with the operator's log, when something failed).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from kfdef_dev.controlplane import ControlPlane, ControlPlaneError
from kfdef_dev.process import OperatorProcess
from kfdef_operator.ssa.client import KubeApiError, KubeClient

JSON = dict[str, Any]
KFDEF_PATH = "/apis/kfdef.apps.kubeflow.org/v1/namespaces/kubeflow/kfdefs"
DEPLOYMENT_PATH = "/apis/apps/v1/namespaces/kubeflow/deployments/tf-job-operator"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def register_demo(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="deploy, heal and tear down the demo stack on an embedded cluster",
                                   description=__doc__.split("\n\n")[1])
    parser.add_argument("--repo-root", type=Path, default=Path.cwd(),
                        help="checkout holding crds/ and kfdefs/demo (default: current directory)")
    parser.add_argument("--keep", action="store_true",
                        help="leave the stack deployed and wait for Enter before stopping everything")
    parser.set_defaults(handler=run_demo)


def say(text: str) -> None:
    print(text, flush=True)


def run_demo(args: argparse.Namespace) -> int:
    root = args.repo_root.resolve()
    for needed in ("crds/kfdef.apps.kubeflow.org_kfdefs.yaml", "kfdefs/demo/kfdef.yaml"):
        if not (root / needed).exists():
            print(f"error: {root / needed} not found; run from the repository root or pass --repo-root",
                  file=sys.stderr)
            return 2
    work = Path(tempfile.mkdtemp(prefix="kfdef-demo-"))
    say("==> starting the embedded control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)")
    plane = ControlPlane()
    try:
        plane.start()
    except ControlPlaneError as error:
        print(f"error: {error}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
        return 1
    # The demo KfDef names the stack shipped in kfdefs/demo/: the one directory this operator may read sources from.
    operator = OperatorProcess(plane.kubeconfig, work / "operator",
                               env={"KFDEF_LOCAL_SOURCE_ROOTS": str(root / "kfdefs" / "demo")})
    result = 1
    try:
        say(f"    up in {plane.startup_seconds:.1f}s at {plane.server}")
        result = asyncio.run(_story(root, plane, operator, keep=args.keep))
        return result
    finally:
        operator.stop()
        plane.stop()
        if result == 0:
            shutil.rmtree(work, ignore_errors=True)
            say("==> stopped the operator and the control plane")
        else:
            say(f"==> stopped the operator and the control plane; the operator's log is kept in {operator.log_path}")


async def _story(root: Path, plane: ControlPlane, operator: OperatorProcess, *, keep: bool) -> int:
    kube = await KubeClient.connect(str(plane.kubeconfig))
    try:
        say("==> installing the KfDef CRD (crds/kfdef.apps.kubeflow.org_kfdefs.yaml)")
        crd = yaml.safe_load((root / "crds/kfdef.apps.kubeflow.org_kfdefs.yaml").read_text())
        await kube.apply(f"{CRD_PATH}/{crd['metadata']['name']}", crd, field_manager="kfdef-demo")
        await _wait(lambda: _crd_established(kube, crd["metadata"]["name"]), 60, "the KfDef CRD to be Established")

        say("==> starting the operator: kfdef-operator run --kubeconfig ...")
        operator.start()
        say(f"    probes and metrics on {operator.url}/metrics")

        say("==> creating namespace kubeflow and the demo KfDef (kfdefs/demo/kfdef.yaml)")
        kfdef = yaml.safe_load((root / "kfdefs/demo/kfdef.yaml").read_text())
        kfdef["spec"]["repos"][0]["uri"] = str(root / "kfdefs/demo/manifests")
        await kube.apply("/api/v1/namespaces/kubeflow", {"apiVersion": "v1", "kind": "Namespace",
                                                          "metadata": {"name": "kubeflow"}}, field_manager="kfdef-demo")
        started = time.monotonic()
        await kube.request("POST", KFDEF_PATH, body=kfdef)
        await _follow_until_ready(kube, started)
        kubectl(plane, "get", "kfdef", "-n", "kubeflow")
        kubectl(plane, "get", "kfdef", "-n", "kubeflow", "-o", "wide")

        say("==> the classic test: deleting Deployment kubeflow/tf-job-operator")
        old = await kube.get(DEPLOYMENT_PATH)
        if old is None:
            raise RuntimeError("Deployment kubeflow/tf-job-operator was not deployed: see the KfDef's status")
        await kube.request("DELETE", DEPLOYMENT_PATH)
        deleted = time.monotonic()
        back = await _wait(lambda: _recreated(kube, old["metadata"]["uid"]), 30, "tf-job-operator to come back")
        say(f"    re-created by the operator {1000 * (time.monotonic() - deleted):.0f} ms after the delete "
            f"(new uid {back['metadata']['uid'][:8]}...)")
        await _wait(lambda: _available(kube), 60, "tf-job-operator to be Available")
        say(f"    Available again {time.monotonic() - deleted:.1f}s after the delete (kwok runs its pod)")
        kubectl(plane, "describe", "kfdef", "demo", "-n", "kubeflow")
        say("==> nothing left to change: the live stack matches the KfDef file (exit code 0)")
        command(plane, "kfdef-operator", "diff", "kfdefs/demo/kfdef.yaml", cwd=root)

        if keep:
            say("\n==> the stack stays deployed. From another shell on this machine, as root:")
            say(f"    nsenter --net=/proc/{plane.pid('kube-apiserver')}/ns/net "
                f"{plane.bin_dir / 'kubectl'} --kubeconfig {plane.kubeconfig} get kfdef,deploy,crd -A")
            await asyncio.to_thread(input, "    press Enter to tear down and stop... ")

        say("==> kubectl delete kfdef demo -n kubeflow: the operator tears the stack down")
        started = time.monotonic()
        await kube.request("DELETE", f"{KFDEF_PATH}/demo")
        await _wait(lambda: _gone(kube, f"{KFDEF_PATH}/demo"), 120, "the KfDef to be deleted")
        crd_left = await kube.get(f"{CRD_PATH}/tfjobs.kubeflow.org")
        namespace = await kube.get("/api/v1/namespaces/kubeflow")
        say(f"    done in {time.monotonic() - started:.1f}s: CRD tfjobs.kubeflow.org "
            f"{'still there (unexpected)' if crd_left else 'deleted'}, namespace kubeflow "
            f"{'kept (it existed before the KfDef)' if namespace else 'deleted'}")
        say(_NEXT_STEPS)
        return 0
    finally:
        await kube.close()


async def _wait(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    delay = 0.01
    while time.monotonic() < deadline:
        result = await check()
        if result:
            return result
        await asyncio.sleep(delay)
        delay = min(delay * 1.5, 0.5)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


async def _crd_established(kube: KubeClient, name: str) -> bool:
    crd = await kube.get(f"{CRD_PATH}/{name}") or {}
    return any(c["type"] == "Established" and c["status"] == "True"
               for c in (crd.get("status") or {}).get("conditions") or [])


async def _recreated(kube: KubeClient, old_uid: str) -> JSON | None:
    live = await kube.get(DEPLOYMENT_PATH)
    return live if live and live["metadata"]["uid"] != old_uid else None


async def _available(kube: KubeClient) -> bool:
    live = await kube.get(DEPLOYMENT_PATH) or {}
    return any(c["type"] == "Available" and c["status"] == "True"
               for c in (live.get("status") or {}).get("conditions") or [])


async def _gone(kube: KubeClient, path: str) -> bool:
    return await kube.get(path) is None


def kubectl(plane: ControlPlane, *args: str) -> None:
    """Show a kubectl command and its output as a user would see them (the demo's kubeconfig in KUBECONFIG)."""
    command(plane, str(plane.bin_dir / "kubectl"), *args, shown="kubectl")


def command(plane: ControlPlane, program: str, *args: str, shown: str | None = None, cwd: Path | None = None) -> None:
    say(f"$ {shown or program} {' '.join(args)}")
    env = {**os.environ, "KUBECONFIG": str(plane.kubeconfig)}
    done = subprocess.run([program, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    for line in (done.stdout + done.stderr).rstrip("\n").splitlines():
        say(f"    {line}")


async def _follow_until_ready(kube: KubeClient, started: float) -> None:
    """Print each change of the KfDef's Ready condition and summary until Ready is True."""
    last = None
    deadline = started + 180
    while time.monotonic() < deadline:
        try:
            kfdef = await kube.get(f"{KFDEF_PATH}/demo") or {}
        except KubeApiError:
            kfdef = {}
        status = kfdef.get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), None)
        line = (f"Ready={ready['status']} ({ready['reason']}): {ready['message']}" if ready else "waiting for status")
        if line != last:
            say(f"    {time.monotonic() - started:5.1f}s {line}")
            last = line
        if ready and ready["status"] == "True":
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("the demo KfDef did not become Ready within 180s; see the operator log")


_NEXT_STEPS = """
==> next steps (README.md: "On a real cluster")
    No image is published: build it, then push it (or load it into kind or minikube).
      make image IMG=<registry>/kfdef-operator:0.1.0 && docker push <registry>/kfdef-operator:0.1.0
      make deploy IMG=<registry>/kfdef-operator:0.1.0       # CRD, RBAC, the operator's Deployment
      kubectl create namespace kubeflow
      kubectl create -f kfdefs/demo/in-cluster.yaml          # this demo, served from the image: no internet needed
      kubectl get kfdef -n kubeflow -w
      kfdef-operator diff kfdefs/demo/kfdef.yaml             # what the operator would change (exit 1 if anything)
      kfdef-operator uninstall                               # the KfDefs, then the operator, then the CRD
    Render a KfDef offline, without any cluster:
      kfdef-operator build kfdefs/demo/kfdef.yaml -o -
"""
