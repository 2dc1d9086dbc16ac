"""The kubelet's part for one Deployment's pods: each pod of it runs as an operator process on this machine.

kwok makes pods Ready without running anything, so the OLM tests play the kubelet for the operator's own
Deployment, whatever OLM made of the CSV: a watch on the pods its selector picks starts the container of each new
pod as ``kfdef-operator run`` with that container's args and environment, starts it again with the kubelet's
back-off when it exits (10 s, doubling up to 5 minutes), and stops it (SIGTERM) when the pod starts terminating.
As the kubelet does, it keeps a terminating pod until its container has stopped (a finalizer of its own, since
kwok deletes terminating pods at once): the pod's token stays valid while the operator shuts down and releases
its Lease. The process gets what the kubelet would give it:

* the identity of the pod's ServiceAccount: a token from the TokenRequest API bound to the pod (invalid once the
  pod is deleted), in a kubeconfig naming the control plane;
* the image's ENV (tests/image.py), then the container's ``env``, downward-API fields resolved against the pod
  (``olm.targetNamespaces`` becomes ``WATCH_NAMESPACE`` this way);
* the image's files (the demo manifests under /opt, in a mount namespace of its own), and each ``emptyDir`` volume
  as a directory of its own: paths under a volume's mount path, in args or env, point into that directory.

What a pod cannot have here is its own network: its ``--server-address`` (the container port) becomes a free
loopback port. The render helper is the one this checkout built, which is what the image carries.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import yaml
from kubernetes import client, watch

from kfdef_dev.controlplane import ControlPlane
from kfdef_dev.process import OperatorProcess
from tests.image import as_in_the_image, image_layout
from tests.kube import Kube
from tests.operator_process import STARTED

_FIELD = re.compile(r"metadata\.(annotations|labels)\['([^']+)'\]")
#: Held on each pod whose container runs here, until it has stopped (the kubelet's part in a pod's deletion).
FINALIZER = "tests.kfdef-operator.invalid/kubelet"
#: The kubelet's back-off between restarts of a container that exits: 10 s, doubling, at most 5 minutes.
RESTART_BACKOFF_S, RESTART_BACKOFF_MAX_S = 10.0, 300.0


def field_value(pod: dict, path: str) -> str:
    """A downward-API ``fieldRef`` of ``pod``: metadata.name/namespace/uid, an annotation or a label, or
    spec.serviceAccountName."""
    meta = pod["metadata"]
    simple = {"metadata.name": meta["name"], "metadata.namespace": meta["namespace"], "metadata.uid": meta["uid"],
              "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default")}
    if path in simple:
        return simple[path]
    found = _FIELD.fullmatch(path)
    if not found:
        raise ValueError(f"fieldRef {path!r} is not one this kubelet resolves")
    return (meta.get(found.group(1)) or {}).get(found.group(2), "")


def container_environment(pod: dict, container: dict) -> dict[str, str]:
    """The container's ``env`` as the kubelet sets it (plain values and downward-API fields)."""
    env = {}
    for variable in container.get("env") or []:
        source = variable.get("valueFrom")
        if source is None:
            env[variable["name"]] = variable.get("value", "")
        elif "fieldRef" in source:
            env[variable["name"]] = field_value(pod, source["fieldRef"]["fieldPath"])
        else:
            raise ValueError(f"env {variable['name']}: {sorted(source)} is not a source this kubelet resolves")
    if container.get("envFrom"):
        raise ValueError("envFrom is not a source this kubelet resolves")
    return env


class PodProcess:
    """One pod's operator container, run as a process."""

    def __init__(self, plane: ControlPlane, admin: Kube, pod: dict, work_dir: Path) -> None:
        self.name = pod["metadata"]["name"]
        spec = pod["spec"]
        (container,) = spec["containers"]
        mounts = {m["mountPath"]: work_dir / m["name"] for m in container.get("volumeMounts") or []
                  if any(v["name"] == m["name"] and "emptyDir" in v for v in spec.get("volumes") or [])}

        def local(value: str) -> str:
            for mount_path, directory in mounts.items():
                if value == mount_path or value.startswith(mount_path + "/"):
                    directory.mkdir(parents=True, exist_ok=True)
                    return str(directory) + value[len(mount_path):]
            return value

        _, _, image_env = image_layout()
        env = {name: local(value) for name, value in {**image_env, **container_environment(pod, container)}.items()}
        env["KFDEF_RENDER_HELPER"] = os.environ["KFDEF_RENDER_HELPER"]
        args = []
        for arg in container.get("args") or []:
            flag, _, value = arg.partition("=")
            if flag == "--server-address":
                continue  # the pod's port: the process gets a free loopback port instead
            args.append(f"{flag}={local(value)}" if value else arg)
        kubeconfig = work_dir / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(service_account_config(plane, admin, pod)))
        kubeconfig.chmod(0o600)
        self.process = OperatorProcess(kubeconfig, work_dir, extra_args=tuple(args), env=env,
                                       wrapper=as_in_the_image())
        STARTED.append(self.process)  # a failing test's report shows its log

        self.restarts = 0
        self._next_start = 0.0

    def keep_running(self) -> None:
        """Start the container unless it runs, or its back-off since it last exited has not passed."""
        popen = self.process.popen
        if popen is not None and popen.poll() is None or time.monotonic() < self._next_start:
            return
        if popen is not None:
            self.restarts += 1
        self._next_start = time.monotonic() + min(RESTART_BACKOFF_S * 2 ** self.restarts, RESTART_BACKOFF_MAX_S)
        try:
            self.process.start()
        except RuntimeError:  # it exited while starting (its log says why): the next try waits for the back-off
            pass

    def stop(self) -> None:
        self.process.stop()


def service_account_config(plane: ControlPlane, admin: Kube, pod: dict) -> dict:
    """A kubeconfig with a token of the pod's ServiceAccount bound to the pod, as the kubelet projects it."""
    meta = pod["metadata"]
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
        audiences=[], expiration_seconds=3600,
        bound_object_ref=client.V1BoundObjectReference(api_version="v1", kind="Pod", name=meta["name"],
                                                       uid=meta["uid"])))
    answer = admin.core.create_namespaced_service_account_token(
        pod["spec"].get("serviceAccountName", "default"), meta["namespace"], request)
    return {"apiVersion": "v1", "kind": "Config", "current-context": "pod",
            "clusters": [{"name": "plane", "cluster": {"server": plane.server,
                                                       "certificate-authority": str(plane.ca_file)}}],
            "users": [{"name": "pod", "user": {"token": answer.status.token}}],
            "contexts": [{"name": "pod", "context": {"cluster": "plane", "user": "pod"}}]}


class DeploymentPods:
    """Plays the kubelet for the pods of Deployment ``namespace/name`` until :meth:`stop`.

    ``running`` maps the names of pods whose process runs to their :class:`PodProcess`; ``history`` records, in
    order, ``("started"|"stopped", pod name)``."""

    def __init__(self, plane: ControlPlane, admin: Kube, namespace: str, name: str, work_dir: Path) -> None:
        self.plane, self.admin = plane, admin
        self.namespace, self.name = namespace, name
        self.work_dir = work_dir
        self.running: dict[str, PodProcess] = {}
        self.history: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self._stopping = threading.Event()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, name=f"pods of {namespace}/{name}", daemon=True)

    def __enter__(self) -> DeploymentPods:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        self._watch.stop()
        self._thread.join(timeout=60)
        for pod in list(self.running):
            self._stop(pod)
        serialize = self.admin.api.sanitize_for_serialization
        for _ in range(5):  # the pods this kubelet held are left to the cluster (a release may meet a newer version)
            held = [pod for pod in (serialize(p) for p in self.admin.core.list_namespaced_pod(self.namespace).items)
                    if FINALIZER in (pod["metadata"].get("finalizers") or [])]
            if not held:
                return
            for pod in held:
                self._release(pod)
        raise AssertionError(f"pods of {self.namespace}/{self.name} still held by the test's kubelet: {held}")

    def _owned(self, pod: dict) -> bool:
        """Whether the pod belongs to the Deployment (through one of its ReplicaSets)."""
        for owner in pod["metadata"].get("ownerReferences") or []:
            if owner["kind"] == "ReplicaSet":
                replica_set = self.admin.get("apps/v1", "ReplicaSet", owner["name"], self.namespace) or {}
                return any(o["kind"] == "Deployment" and o["name"] == self.name
                           for o in replica_set.get("metadata", {}).get("ownerReferences") or [])
        return False

    def _run(self) -> None:
        """List, then watch from the list's version, as an informer does; the watch ends every other second, so
        that exited containers are started again on time and :meth:`stop` is heard, and each new list stops what
        runs for pods that went meanwhile."""
        serialize = self.admin.api.sanitize_for_serialization
        while not self._stopping.is_set():
            try:
                listing = self.admin.core.list_namespaced_pod(self.namespace)
                pods = [serialize(pod) for pod in listing.items]
                for gone in set(self.running) - {pod["metadata"]["name"] for pod in pods}:
                    self._stop(gone)
                for pod in pods:
                    self._on("ADDED", pod)
                for process in list(self.running.values()):
                    process.keep_running()
                for event in self._watch.stream(self.admin.core.list_namespaced_pod, self.namespace,
                                                resource_version=listing.metadata.resource_version,
                                                timeout_seconds=2):
                    self._on(event["type"], serialize(event["object"]))
            except Exception as error:  # noqa: BLE001  # a kubelet goes on; the test sees `errors`
                if not self._stopping.is_set():
                    self.errors.append(f"{type(error).__name__}: {error}")

    def _on(self, kind: str, pod: dict) -> None:
        meta = pod["metadata"]
        name = meta["name"]
        if kind == "DELETED" or meta.get("deletionTimestamp"):
            if name in self.running:
                self._stop(name)
            if FINALIZER in (meta.get("finalizers") or []) and kind != "DELETED":
                self._release(pod)
        elif name not in self.running and pod["spec"].get("nodeName") and self._owned(pod):
            self._hold(pod)
            process = PodProcess(self.plane, self.admin, pod, self.work_dir / name)
            self.running[name] = process
            process.keep_running()
            self.history.append(("started", name))

    def _hold(self, pod: dict) -> None:
        self._set_finalizers(pod, [*(pod["metadata"].get("finalizers") or []), FINALIZER])

    def _release(self, pod: dict) -> None:
        try:
            self._set_finalizers(pod, [f for f in pod["metadata"].get("finalizers") or [] if f != FINALIZER])
        except client.ApiException as error:
            if error.status not in (404, 409):  # gone, or changed since: the next event comes with it
                raise

    def _set_finalizers(self, pod: dict, finalizers: list[str]) -> None:
        """The pod's finalizers replaced by ``finalizers``, if the pod is still the version read (a JSON merge
        patch: the client's default, a strategic merge, merges the list and so could never remove one)."""
        self.admin.core.patch_namespaced_pod(
            pod["metadata"]["name"], self.namespace,
            {"metadata": {"finalizers": finalizers, "resourceVersion": pod["metadata"]["resourceVersion"]}},
            _content_type="application/merge-patch+json")

    def _stop(self, name: str) -> None:
        self.running.pop(name).stop()
        self.history.append(("stopped", name))
