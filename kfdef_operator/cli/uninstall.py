"""``kfdef-operator uninstall``: remove every KfDef, the operator and the CRD, in the order that strands nothing.

1. KfDefs first, while the operator runs: each holds kfctl's finalizer until the operator has torn its stack
   down, so the command waits until every KfDef is gone. Without a running operator it refuses, since
   deleting them would leave them stuck on their finalizers.
   ``--orphan`` instead leaves every stack in place: each KfDef is suspended (a running operator then lets
   it go without touching its objects), its finalizer removed and it is deleted with orphan propagation, so
   the garbage collector keeps the objects that had an ownerReference to it.
2. The operator: what ``deploy/`` installed, found by its label ``app.kubernetes.io/part-of=kfdef-operator``
   (Deployment first, waited for; the Namespace only when nothing else runs in it). An operator installed by
   OLM is left to OLM.
3. The KfDef CRD, once no KfDef is left.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TextIO, TypeVar

from kfdef_operator.api.kfdef import parse_duration
from kfdef_operator.api.names import CRD_NAME, FINALIZER, GROUP, PLURAL, SUSPEND_ANNOTATION, VERSION, kfdef_path
from kfdef_operator.api.types import JSON
from kfdef_operator.cli.errors import EXIT_OK, BadInput, Failed
from kfdef_operator.controller import preflight
from kfdef_operator.ssa.client import KubeApiError, KubeClient, describe_api_error

PART_OF = "app.kubernetes.io/part-of=kfdef-operator"
OPERATOR_PODS = "app.kubernetes.io/name=kfdef-operator,app.kubernetes.io/component=operator"
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
KFDEFS_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
#: What deploy/ installs besides the CRD, in deletion order: (API prefix, plural, kind, namespaced).
INSTALLED_KINDS = (
    ("/apis/apps/v1", "deployments", "Deployment", True),
    ("/apis/policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
    ("/api/v1", "services", "Service", True),
    ("/api/v1", "configmaps", "ConfigMap", True),
    ("/api/v1", "resourcequotas", "ResourceQuota", True),
    ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding", True),
    ("/apis/rbac.authorization.k8s.io/v1", "roles", "Role", True),
    ("/api/v1", "serviceaccounts", "ServiceAccount", True),
    ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", "ClusterRoleBinding", False),
    ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", False),
    ("/api/v1", "namespaces", "Namespace", False),
)
POLL_S = 1.0
T = TypeVar("T")


def register_uninstall(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "uninstall", help="delete every KfDef (their stacks torn down), then the operator, then the CRD",
        description=__doc__.split("\n\n", 1)[1].replace("``", ""))
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument("--orphan", action="store_true",
                        help="keep every stack's objects: remove the KfDefs' finalizers instead of waiting for the "
                             "operator to tear the stacks down")
    parser.add_argument("--timeout", default="10m", metavar="DURATION",
                        help="how long to wait for the KfDefs to be torn down (default %(default)s)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and change nothing")
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    parser.set_defaults(handler=run_uninstall)


@dataclass(frozen=True)
class Installed:
    """One object the operator's installation holds."""

    path: str
    plural: str
    description: str  # "Deployment kfdef-operator-system/kfdef-operator"


@dataclass
class Installation:
    """What is installed: the KfDefs, the operator's pods and objects, the CRD."""

    host: str
    crd: JSON | None
    kfdefs: list[JSON] = field(default_factory=list)
    operator_pods: list[JSON] = field(default_factory=list)
    objects: list[Installed] = field(default_factory=list)
    olm: bool = False

    @property
    def operator_running(self) -> bool:
        return any(_ready(pod) for pod in self.operator_pods)


def run_uninstall(args: argparse.Namespace) -> int:
    try:
        timeout = parse_duration(args.timeout)
    except ValueError as error:
        raise BadInput(f"--timeout: {error}") from None
    return asyncio.run(_uninstall(args, timeout, sys.stdout))


async def _uninstall(args: argparse.Namespace, timeout: float, out: TextIO) -> int:
    kube = await preflight.connect(args.kubeconfig)
    try:
        found = await discover(kube)
        out.write(plan(found, orphan=args.orphan))
        if not found.kfdefs and not found.objects and found.crd is None:
            out.write("nothing to uninstall\n")
            return EXIT_OK
        if found.kfdefs and not args.orphan and not found.operator_running:
            raise Failed("no kfdef-operator pod is running (pods labelled " + OPERATOR_PODS + "): deleting the "
                         f"{len(found.kfdefs)} KfDef(s) now would leave them stuck on their finalizer. Start the "
                         "operator (its Deployment, or kfdef-operator run) and retry, or pass --orphan to keep "
                         "the stacks' objects and remove the finalizers")
        if args.dry_run:
            out.write("dry run: nothing was changed\n")
            return EXIT_OK
        _confirm(args.yes)
        if args.orphan:
            await _orphan_kfdefs(kube, found.kfdefs, out)
        else:
            await _delete_kfdefs(kube, found.kfdefs, timeout, out)
        await _wait_kfdefs_gone(kube, found.kfdefs, timeout, out)
        if found.olm:
            out.write("the operator was installed by OLM: delete its Subscription and ClusterServiceVersion, then "
                      f"`kubectl delete crd {CRD_NAME}`\n")
            return EXIT_OK
        await _delete_operator(kube, found.objects, timeout, out)
        if found.crd is not None:
            await _delete_and_wait(kube, CRD_PATH, f"CustomResourceDefinition {CRD_NAME}", timeout, out)
        out.write("uninstalled\n")
        return EXIT_OK
    except KubeApiError as error:
        raise Failed(f"{error.method} {error.path}: {describe_api_error(error)}") from None
    finally:
        await kube.close()


async def discover(kube: KubeClient) -> Installation:
    crd = await kube.get(CRD_PATH)
    found = Installation(kube.host, crd)
    if crd is not None:
        found.kfdefs = (await kube.request("GET", KFDEFS_PATH)).get("items") or []
    found.operator_pods = (await kube.request("GET", "/api/v1/pods", params={"labelSelector": OPERATOR_PODS})
                           ).get("items") or []
    for prefix, plural, kind, namespaced in INSTALLED_KINDS:
        items = (await kube.request("GET", f"{prefix}/{plural}", params={"labelSelector": PART_OF})).get("items") or []
        for item in items:
            meta = item["metadata"]
            where = f"{meta['namespace']}/" if namespaced else ""
            path = f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}" if namespaced \
                else f"{prefix}/{plural}/{meta['name']}"
            found.objects.append(Installed(path, plural, f"{kind} {where}{meta['name']}"))
            if plural == "deployments" and any(ref.get("kind") == "ClusterServiceVersion"
                                               for ref in meta.get("ownerReferences") or []):
                found.olm = True
    return found


def plan(found: Installation, *, orphan: bool) -> str:
    """The steps, as the person running the command should read them before confirming."""
    names = ", ".join(_key(k) for k in found.kfdefs[:10]) + (" ..." if len(found.kfdefs) > 10 else "")
    suspended = [_key(k) for k in found.kfdefs if _suspended(k)]
    lines = [f"uninstall from {found.host}:"]
    if orphan:
        lines.append(f"  1. orphan {len(found.kfdefs)} KfDef(s) ({names or 'none'}): suspend, remove the finalizer, "
                     "delete; their stacks' objects stay")
    else:
        lines.append(f"  1. delete {len(found.kfdefs)} KfDef(s) ({names or 'none'}) and wait until the operator "
                     "has torn their stacks down")
        if suspended:
            lines.append(f"     suspended, so the operator leaves their objects in place: {', '.join(suspended)}")
    pods = f"{sum(_ready(p) for p in found.operator_pods)} of {len(found.operator_pods)} operator pod(s) ready"
    if found.olm:
        lines.append(f"  2. the operator ({pods}) is managed by OLM: left to OLM")
    else:
        installed = ", ".join(o.description for o in found.objects) or "nothing found"
        lines.append(f"  2. delete the operator ({pods}): {installed}")
    lines.append(f"  3. delete the CRD {CRD_NAME}" if found.crd is not None and not found.olm
                 else "  3. the CRD: " + ("left to OLM" if found.olm else "not installed"))
    return "\n".join(lines) + "\n"


def _confirm(yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise BadInput("uninstall deletes every KfDef and its stack: pass --yes to confirm (--dry-run shows the plan)")
    if input("proceed? [y/N] ").strip().lower() not in ("y", "yes"):
        raise Failed("not confirmed; nothing was changed")


async def _delete_kfdefs(kube: KubeClient, kfdefs: list[JSON], timeout: float, out: TextIO) -> None:
    for kfdef in kfdefs:
        # A suspended KfDef's objects stay: the operator lets it go untouched, and the garbage collector must not
        # delete those with an ownerReference to it either.
        await _delete(kube, kfdef_path(*_key_parts(kfdef)), propagation="Orphan" if _suspended(kfdef) else "Background")
    out.write(f"deleted {len(kfdefs)} KfDef(s); waiting for the operator to tear their stacks down "
              f"(up to {timeout:.0f}s)\n")


async def _orphan_kfdefs(kube: KubeClient, kfdefs: list[JSON], out: TextIO) -> None:
    """Suspend first: a running operator that sees the deletion then lets the KfDef go untouched."""
    for kfdef in kfdefs:
        path = kfdef_path(*_key_parts(kfdef))
        await _patch(kube, path, {"metadata": {"annotations": {SUSPEND_ANNOTATION: "true"}}})
        await _remove_finalizer(kube, path)
        await _delete(kube, path, propagation="Orphan")
        out.write(f"orphaned KfDef {_key(kfdef)}: its objects stay, with their ownership stamps\n")


async def _remove_finalizer(kube: KubeClient, path: str) -> None:
    """Our finalizer out, other finalizers kept, guarded by the resourceVersion against concurrent writers."""
    for _ in range(5):
        current = await kube.get(path)
        if current is None:
            return
        finalizers = current["metadata"].get("finalizers") or []
        if FINALIZER not in finalizers:
            return
        try:
            await _patch(kube, path, {"metadata": {"finalizers": [f for f in finalizers if f != FINALIZER],
                                                   "resourceVersion": current["metadata"]["resourceVersion"]}})
            return
        except KubeApiError as error:
            if error.status != 409:
                raise
    raise Failed(f"{path} kept changing while its finalizer was removed; retry")


async def _wait_kfdefs_gone(kube: KubeClient, kfdefs: list[JSON], timeout: float, out: TextIO) -> None:
    keys = {_key(k) for k in kfdefs}
    shown: dict[str, str] = {}

    async def remaining() -> list[JSON]:
        items = (await kube.request("GET", KFDEFS_PATH)).get("items") or []
        left = [item for item in items if _key(item) in keys]
        for item in left:
            ready = _condition(item, "Ready")
            line = f"{ready.get('reason', '')}: {ready.get('message', '')}" if ready else "waiting for the operator"
            if shown.get(_key(item)) != line:
                shown[_key(item)] = line
                out.write(f"  KfDef {_key(item)}: {line}\n")
        return left

    left = await _wait_for(remaining, timeout)
    if left:
        stuck = "; ".join(f"{_key(k)} ({shown.get(_key(k), '')})" for k in left[:5])
        raise Failed(f"{len(left)} KfDef(s) still there after {timeout:.0f}s: {stuck}. The operator and the CRD were "
                     "left installed; fix what holds the teardown (see kubectl describe kfdef) and run uninstall "
                     "again, or pass --orphan")
    if kfdefs:
        out.write(f"all {len(kfdefs)} KfDef(s) are gone\n")


async def _delete_operator(kube: KubeClient, objects: list[Installed], timeout: float, out: TextIO) -> None:
    for installed in objects:  # in INSTALLED_KINDS order
        if installed.plural == "deployments":  # first, and waited for: no operator may run while the CRD goes
            await _delete_and_wait(kube, installed.path, installed.description, timeout, out, propagation="Foreground")
        elif installed.plural == "namespaces":
            await _delete_namespace_if_empty(kube, installed.path, installed.description, timeout, out)
        else:
            await _delete(kube, installed.path)
            out.write(f"deleted {installed.description}\n")


async def _delete_namespace_if_empty(kube: KubeClient, path: str, description: str, timeout: float,
                                     out: TextIO) -> None:
    pods = (await kube.request("GET", f"{path}/pods")).get("items") or []
    if pods:
        out.write(f"kept {description}: {len(pods)} other pod(s) run there\n")
        return
    await _delete_and_wait(kube, path, description, timeout, out)


async def _delete_and_wait(kube: KubeClient, path: str, description: str, timeout: float, out: TextIO, *,
                           propagation: str = "Background") -> None:
    await _delete(kube, path, propagation=propagation)

    async def still_there() -> JSON | None:
        return await kube.get(path)

    if await _wait_for(still_there, timeout):
        raise Failed(f"{description} is still there after {timeout:.0f}s (kubectl describe it to see what holds it)")
    out.write(f"deleted {description}\n")


async def _wait_for(remaining: Callable[[], Awaitable[T]], timeout: float) -> T:
    """Poll ``remaining`` until it returns something empty; what it returned last (empty: done)."""
    deadline = time.monotonic() + timeout
    while True:
        left = await remaining()
        if not left or time.monotonic() > deadline:
            return left
        await asyncio.sleep(POLL_S)


async def _delete(kube: KubeClient, path: str, *, propagation: str = "Background") -> None:
    try:
        await kube.request("DELETE", path, body={"propagationPolicy": propagation})
    except KubeApiError as error:
        if error.status != 404:
            raise


async def _patch(kube: KubeClient, path: str, body: JSON) -> None:
    await kube.request("PATCH", path, body=body, content_type="application/merge-patch+json")


def _key_parts(kfdef: JSON) -> tuple[str, str]:
    return kfdef["metadata"]["namespace"], kfdef["metadata"]["name"]


def _key(kfdef: JSON) -> str:
    return "/".join(_key_parts(kfdef))


def _suspended(kfdef: JSON) -> bool:
    return ((kfdef["metadata"].get("annotations") or {}).get(SUSPEND_ANNOTATION, "").lower() == "true")


def _condition(obj: JSON, type_: str) -> JSON | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == type_), None)


def _ready(pod: JSON) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (_condition(pod, "Ready") or {}).get("status") == "True"
