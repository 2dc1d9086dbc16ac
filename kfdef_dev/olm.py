"""OLM v0.46.0 beside the embedded control plane, and a catalog of the operator served to it.

:class:`Olm` installs OLM's CRDs and what OLM's own release manifests set up around its controllers (the
namespaces ``olm`` and ``operators``, and the ``global-operators`` OperatorGroup that makes ``operators`` the
AllNamespaces install namespace), then starts its two controllers as plain processes with the admin kubeconfig:
``olm`` (olm-operator: OperatorGroups, ClusterServiceVersions and what their install strategies create) and
``catalog`` (catalog-operator: CatalogSources, Subscriptions, InstallPlans).

:class:`CatalogServer` serves a file-based catalog (``tools/gen-olm-catalog.py``) with ``kfdef-olm-registry`` on a
loopback port: catalog-operator reads a CatalogSource whose ``spec.address`` names it directly, with no registry
pod. :meth:`CatalogServer.publish` serves another catalog on the same address, as a new catalog image would be:
catalog-operator sees the connection come back and resolves its subscriptions again.

OLM's controllers bind their metrics port on every address (``:8080``, or ``:8443`` with TLS; no flag moves it),
so they are started only where the control plane runs, in a loopback-only network namespace, where every address
is a loopback one; catalog-operator gets a self-signed certificate so that the two do not contend for ``:8080``.

The binaries come from ``tools/build-olm.sh``; :func:`find_olm_dir` locates them.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kfdef_dev.controlplane import ChildProcess, ControlPlane, ControlPlaneError, free_port

OLM_BINARIES = ("olm", "catalog", "kfdef-olm-registry")
OLM_NAMESPACE = "olm"
#: Where OLM's release manifests make an OperatorGroup targeting all namespaces (``global-operators``).
OPERATORS_NAMESPACE = "operators"
_START_TIMEOUT_S = 60.0

_SURROUNDINGS = f"""apiVersion: v1
kind: Namespace
metadata: {{name: {OLM_NAMESPACE}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: {OPERATORS_NAMESPACE}}}
---
apiVersion: operators.coreos.com/v1
kind: OperatorGroup
metadata: {{name: global-operators, namespace: {OPERATORS_NAMESPACE}}}
"""


def find_olm_dir() -> Path:
    """The directory holding OLM's binaries and CRDs: ``$KFDEF_OLM_BIN``, else the newest complete
    ``$XDG_CACHE_HOME/kfdef-operator/olm-*`` directory."""
    override = os.environ.get("KFDEF_OLM_BIN")
    if override:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kfdef-operator"
    complete = [d for d in cache.glob("olm-v*") if all((d / f).exists() for f in (*OLM_BINARIES, "crds"))]
    if not complete:
        raise ControlPlaneError("OLM's binaries not found: run `make olm` (tools/build-olm.sh) or set KFDEF_OLM_BIN "
                                "to the directory holding olm, catalog, kfdef-olm-registry and crds/")
    return max(complete, key=lambda d: d.stat().st_mtime)


class Olm:
    """OLM's two controllers running against ``plane``; use as a context manager or call start()/stop()."""

    def __init__(self, plane: ControlPlane, olm_dir: Path | None = None) -> None:
        self.plane = plane
        self.olm_dir = olm_dir or find_olm_dir()
        self.work_dir = plane.dir / "olm"
        self._processes: list[ChildProcess] = []

    def __enter__(self) -> Olm:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        crds = str(self.olm_dir / "crds")  # already there when the plane was given them (ControlPlane.crds)
        self.plane.kubectl("apply", "--server-side", "-f", crds)
        self.plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", crds)
        self.plane.kubectl("apply", "--server-side", "-f", "-", stdin=_SURROUNDINGS)
        key, cert = self.work_dir / "catalog.key", self.work_dir / "catalog.crt"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                        "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
        env = {**os.environ, "KUBECONFIG": str(self.plane.kubeconfig)}
        common = [f"--namespace={OLM_NAMESPACE}", "--writeStatusName="]
        self._run("olm", [*common, "--writePackageServerStatusName="], env, "http://127.0.0.1:8080/healthz")
        # The image flags name what catalog-operator would run for pod-backed catalogs and bundle unpacking;
        # a catalog served at an address and bundles carrying their manifests use neither.
        self._run("catalog", [*common, f"--tls-key={key}", f"--tls-cert={cert}",
                              "--configmapServerImage=unused.invalid/configmap-server",
                              "--opmImage=unused.invalid/opm", "--util-image=unused.invalid/util"],
                  env, "https://127.0.0.1:8443/healthz")

    def _run(self, name: str, args: list[str], env: dict[str, str], health: str) -> None:
        process = ChildProcess(name, [str(self.olm_dir / name), *args], self.work_dir / f"{name}.log", env)
        self._processes.append(process)
        process.start()
        _wait_until(process, f"GET {health}", lambda: _answers(health))

    def stop(self) -> None:
        """Stops both controllers by their PIDs; what they created stays on the cluster."""
        for process in reversed(self._processes):
            process.stop()
        self._processes.clear()

    def log_tails(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log_tail()}" for p in self._processes)


class CatalogServer:
    """``kfdef-olm-registry`` serving one catalog directory on ``address`` (a free loopback port)."""

    def __init__(self, olm_dir: Path, work_dir: Path) -> None:
        self.olm_dir = olm_dir
        self.work_dir = work_dir
        self.address = f"127.0.0.1:{free_port()}"
        self._process: ChildProcess | None = None

    def publish(self, catalog: Path) -> None:
        """Serves ``catalog`` from now on, on the same address; returns once it answers."""
        self.stop()
        process = ChildProcess("kfdef-olm-registry", [
            str(self.olm_dir / "kfdef-olm-registry"), f"-catalog={catalog}", f"-listen={self.address}",
        ], self.work_dir / "registry.log")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        process.start()
        self._process = process
        _wait_until(process, f"a line 'serving {self.address}'",
                    lambda: f"serving {self.address}" in process.log_tail(5))

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None


def _answers(url: str) -> bool:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # the controller's own self-signed cert
    try:
        with urllib.request.urlopen(url, timeout=2, context=context if url.startswith("https") else None) as answer:
            return answer.status == 200
    except OSError:
        return False


def _wait_until(process: ChildProcess, what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not check():
        if not process.running():
            raise ControlPlaneError(f"{process.name} exited while waiting for {what}; log tail:\n{process.log_tail()}")
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"{process.name}: no {what} after {_START_TIMEOUT_S:.0f}s; log tail:\n"
                                    f"{process.log_tail()}")
        time.sleep(0.1)
