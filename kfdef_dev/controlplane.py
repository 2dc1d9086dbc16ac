"""An embedded local Kubernetes control plane for tests, benchmarks and the demo.

Starts, on 127.0.0.1 and free ports, in this order: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler, then kwok (which makes the fake
Node Ready and runs the lifecycle of pods scheduled onto it, so Deployments
become Available). Each process logs to its own file in the work directory;
a failing start raises :class:`ControlPlaneError` with the tail of that log.

Processes are started in their own sessions and stopped by their own PIDs
only (SIGTERM, then SIGKILL), also at interpreter exit.

kube-apiserver dials Service ClusterIPs by itself (admission webhooks, CRD
conversion, APIServices). Those addresses are simulated data here, so the
control plane refuses to start unless the process runs in a network namespace
where only loopback exists (see ``tools/netns-run``); set
``KFDEF_ALLOW_HOST_NETWORK=1`` to override that guard knowingly.

With ``audit=True`` kube-apiserver keeps an audit log of every write
(:data:`AUDIT_POLICY`, metadata only): the server's own record of who changed
what, read back with :meth:`ControlPlane.audit_events`. ``users`` adds
group-less token users besides ``admin``, ``kfdef-operator`` and ``tenant`` (one per
operator replica, so the audit log tells replicas apart).

The binaries come from ``tools/build-control-plane.sh``; :func:`find_bin_dir`
locates them.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
FAKE_NODE_NAME = "kwok-node-0"
OPERATOR_USER = "kfdef-operator"
#: A group-less token user holding nothing until a test grants it something (a tenant, in the security tests).
TENANT_USER = "tenant"
#: Room for 4,094 Services: the benchmark's workload at ten times its size has more than a /24 holds.
SERVICE_CIDR = "10.0.0.0/20"

#: Writes at Metadata level (who, what, when, the answer); reads and watches are not recorded.
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  verbs: [get, list, watch]
- level: None
  nonResourceURLs: ["*"]
- level: Metadata
"""

_START_TIMEOUT_S = 120.0
_STOP_TIMEOUT_S = 15.0
#: Starts with fresh ports when a component finds one of its ports taken: ``free_port`` only knows that a port was
#: free when it looked, and a parallel test worker's control plane may bind it before this one's component does.
_START_ATTEMPTS = 3
_PORT_TAKEN = "address already in use"


class ControlPlaneError(RuntimeError):
    """The control plane could not be started or a part of it is unhealthy."""


def find_bin_dir() -> Path:
    """Locate the directory holding the control-plane binaries.

    Order: ``$KFDEF_K8SBIN``; the newest complete
    ``$XDG_CACHE_HOME/kfdef-operator/k8sbin-*`` directory; the directory of
    ``kube-apiserver`` on ``PATH``.
    """
    override = os.environ.get("KFDEF_K8SBIN")
    if override:
        return Path(override)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kfdef-operator"
    candidates = sorted(
        (d for d in cache.glob("k8sbin-*") if all((d / b).exists() for b in BINARIES)),
        key=lambda d: d.stat().st_mtime,
        reverse=True,
    )
    if candidates:
        return candidates[0]
    on_path = shutil.which("kube-apiserver")
    if on_path:
        return Path(on_path).parent
    raise ControlPlaneError(
        "control-plane binaries not found: run `make control-plane` (tools/build-control-plane.sh) "
        "or set KFDEF_K8SBIN to the directory holding etcd, kube-apiserver, ..."
    )


def network_is_loopback_only() -> bool:
    """True when every network interface of this process's namespace is loopback.

    Reads ``/proc/self/net/dev`` (per network namespace); ``/sys/class/net``
    would show the namespace that mounted sysfs instead.
    """
    try:
        lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    except OSError:
        return False
    return all(line.split(":", 1)[0].strip() == "lo" for line in lines)


_EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (Linux default 32768-60999)."""
    try:
        low, high = (int(n) for n in _EPHEMERAL_RANGE_FILE.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now and outside the ephemeral range.

    ``bind(0)`` would hand out an ephemeral port, which any outgoing connection
    (kube-apiserver opens hundreds to etcd) may take before the component we
    pass it to binds it: CI saw kube-controller-manager fail with "address
    already in use". Outside that range only another listener can collide.
    """
    low, high = ephemeral_port_range()
    candidates = [(1024, low - 1), (high + 1, 65535)]
    spans = [(a, b) for a, b in candidates if b >= a]
    total = sum(b - a + 1 for a, b in spans)
    for _ in range(1000):
        pick = secrets.randbelow(total)
        for a, b in spans:
            if pick <= b - a:
                port = a + pick
                break
            pick -= b - a + 1
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise ControlPlaneError(f"no free port on 127.0.0.1 outside the ephemeral range {low}-{high}")


def stop_process(popen: subprocess.Popen, sig: int, timeout: float) -> None:
    """Stop one child by its PID: ``sig``, then SIGKILL if it is still there after ``timeout`` seconds."""
    if popen.poll() is not None:
        return
    popen.send_signal(sig)
    try:
        popen.wait(timeout)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()


@dataclass
class ChildProcess:
    """A server process of the development machinery: started in its own session with its output in a log file,
    stopped by its own PID only."""

    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str] | None = None  # None: this process's environment
    popen: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")
        try:
            self.popen = subprocess.Popen(
                self.args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                start_new_session=True,
            )
        finally:
            log.close()

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self) -> None:
        if self.popen is not None:
            stop_process(self.popen, signal.SIGTERM, _STOP_TIMEOUT_S)
        self.popen = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def complete_json_lines(text: str) -> list[dict]:
    """The JSON documents of the complete lines of ``text``: a last line without its newline is one kube-apiserver
    is still writing, read half (it is read whole the next time)."""
    return [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]


@dataclass
class ControlPlane:
    """A running local control plane; use as a context manager or call start()/stop().

    Attributes available after :meth:`start`: ``kubeconfig`` (admin, in
    ``system:masters``), ``server`` (https URL), ``ca_file`` and
    :meth:`kubeconfig_for` for the unprivileged ``kfdef-operator`` and ``tenant`` users.
    """

    bin_dir: Path = field(default_factory=find_bin_dir)
    work_dir: Path | None = None
    apiserver_flags: tuple[str, ...] = ()
    controller_manager_flags: tuple[str, ...] = ()
    audit: bool = False
    users: tuple[str, ...] = ()
    #: CRD manifests (files or directories) created before kube-controller-manager starts. Its garbage collector
    #: learns the kinds it can collect by from discovery every 30 s: dependents of a CRD's objects created later
    #: (OLM's Deployments, owned by ClusterServiceVersions) would be collected up to that much late.
    crds: tuple[Path, ...] = ()
    allow_host_network: bool = field(default_factory=lambda: os.environ.get("KFDEF_ALLOW_HOST_NETWORK") == "1")

    def __post_init__(self) -> None:
        self._owns_work_dir = self.work_dir is None
        self._processes: dict[str, ChildProcess] = {}
        self._tokens: dict[str, str] = {}
        self.ports: dict[str, int] = {}

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start every component in order and wait until each is healthy."""
        if not self.allow_host_network and not network_is_loopback_only():
            raise ControlPlaneError(
                "refusing to start the control plane outside a loopback-only network namespace: "
                "kube-apiserver would dial simulated Service IPs for webhooks. Run through "
                "`tools/netns-run <command>` or set KFDEF_ALLOW_HOST_NETWORK=1 if you know this machine is isolated."
            )
        missing = [b for b in BINARIES if not (self.bin_dir / b).exists()]
        if missing:
            raise ControlPlaneError(
                f"missing binaries in {self.bin_dir}: {', '.join(missing)}; run `make control-plane`")
        if self.work_dir is None:
            base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
            self.work_dir = Path(tempfile.mkdtemp(prefix="kfdef-cp-", dir=base))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "logs").mkdir(exist_ok=True)
        atexit.register(self.stop)
        started = time.monotonic()
        try:
            self._prepare_credentials()
            for attempt in range(1, _START_ATTEMPTS + 1):
                try:
                    self._start_components()
                    break
                except ControlPlaneError as error:
                    if _PORT_TAKEN not in str(error) or attempt == _START_ATTEMPTS:
                        raise
                    self._stop_processes()
                    shutil.rmtree(self.dir / "etcd", ignore_errors=True)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started

    def _start_components(self) -> None:
        """Choose ports, then start every component in order and wait until each is healthy."""
        self.ports = {name: free_port() for name in ("etcd", "etcd-peer", "apiserver", "kcm", "scheduler", "kwok")}
        self._write_kubeconfigs()
        self._start_etcd()
        self._start_apiserver()
        for manifests in self.crds:
            self.kubectl("apply", "--server-side", "-f", str(manifests))
            self.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(manifests))
        self._start("kube-controller-manager", self._kcm_args())
        self._start("kube-scheduler", self._scheduler_args())
        self._wait_http("kube-controller-manager", f"https://127.0.0.1:{self.ports['kcm']}/healthz")
        self._wait_http("kube-scheduler", f"https://127.0.0.1:{self.ports['scheduler']}/healthz")
        self._create_fake_node()
        self._start("kwok", self._kwok_args())
        self._wait_http("kwok", f"http://127.0.0.1:{self.ports['kwok']}/healthz")
        self._wait_for("kube-controller-manager", "ServiceAccount default/default",
                       lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default") is not None)
        self._wait_for("kwok", f"Node {FAKE_NODE_NAME} Ready", self._node_ready)
        # A component that lost its port to another control plane's exits within milliseconds, but that one may
        # have answered the health check meanwhile: ours must all be alive now, seconds later.
        for process in self._processes.values():
            if not process.running():
                raise ControlPlaneError(f"{process.name} exited during start-up; log tail:\n{process.log_tail()}")

    def stop(self) -> None:
        """Stop every process this object started, newest first, by PID, and remove the working directory it
        made."""
        self._stop_processes()
        if self._owns_work_dir and self.work_dir is not None and os.environ.get("KFDEF_KEEP_CONTROL_PLANE_DIR") != "1":
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def _stop_processes(self) -> None:
        for process in reversed(list(self._processes.values())):
            process.stop()
        self._processes.clear()

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver by its PID and start it again with the same flags and port."""
        self.stop_apiserver()
        self.start_apiserver()

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver by its PID (the rest keeps running); :meth:`start_apiserver` brings it back."""
        self._processes["kube-apiserver"].stop()

    def start_apiserver(self) -> None:
        """Start kube-apiserver again with the same flags and port; returns once /readyz answers."""
        self._start_apiserver()

    def pid(self, name: str) -> int:
        popen = self._processes[name].popen
        if popen is None:
            raise ControlPlaneError(f"{name} is not running")
        return popen.pid

    # -- credentials ---------------------------------------------------------------

    @property
    def dir(self) -> Path:
        """The working directory (chosen by ``start()``): certificates, kubeconfigs, data and logs."""
        if self.work_dir is None:
            raise RuntimeError("the control plane has not been started")
        return self.work_dir

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def ca_file(self) -> Path:
        return self.dir / "pki" / "apiserver.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "admin.kubeconfig"

    @property
    def admin_token(self) -> str:
        return self._tokens["admin"]

    def kubeconfig_for(self, user: str = OPERATOR_USER) -> Path:
        """Kubeconfig of a token user: ``admin``, the group-less ``kfdef-operator`` or ``tenant``, or one of
        ``users``."""
        return self.dir / f"{user}.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.dir / "logs" / "audit.log"

    def audit_events(self) -> list[dict]:
        """Every event of the audit log so far (``audit=True``), oldest first."""
        if not self.audit:
            raise ControlPlaneError("the control plane was started without audit=True")
        try:
            return complete_json_lines(self.audit_log.read_text())
        except FileNotFoundError:
            return []

    def _prepare_credentials(self) -> None:
        pki = self.dir / "pki"
        pki.mkdir(exist_ok=True)
        subprocess.run(["openssl", "genrsa", "-out", str(pki / "sa.key"), "2048"], check=True, capture_output=True)
        self._tokens = {name: secrets.token_hex(16) for name in ("admin", OPERATOR_USER, TENANT_USER, *self.users)}
        (self.dir / "tokens.csv").write_text(
            f'{self._tokens["admin"]},admin,admin-uid,"system:masters"\n'
            + "".join(f"{token},{user},{user}-uid\n" for user, token in self._tokens.items() if user != "admin")
        )

    def _write_kubeconfigs(self) -> None:
        # The CA file appears when the apiserver generates its serving certificate;
        # the kubeconfig references it by path so it can be written beforehand.
        for user, token in self._tokens.items():
            config = {
                "apiVersion": "v1", "kind": "Config", "current-context": "kfdef-local",
                "clusters": [{"name": "kfdef-local", "cluster": {
                    "server": self.server, "certificate-authority": str(self.ca_file)}}],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [{"name": "kfdef-local", "context": {"cluster": "kfdef-local", "user": user}}],
            }
            path = self.kubeconfig if user == "admin" else self.kubeconfig_for(user)
            path.write_text(json.dumps(config, indent=2))
            path.chmod(0o600)

    # -- components ----------------------------------------------------------------

    def _start(self, name: str, args: list[str]) -> None:
        process = ChildProcess(name, [str(self.bin_dir / name), *args], self.dir / "logs" / f"{name}.log")
        self._processes[name] = process
        process.start()

    def _start_etcd(self) -> None:
        e, p = self.ports["etcd"], self.ports["etcd-peer"]
        self._start("etcd", [
            "--name=kf", f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{e}", f"--advertise-client-urls=http://127.0.0.1:{e}",
            f"--listen-peer-urls=http://127.0.0.1:{p}", f"--initial-advertise-peer-urls=http://127.0.0.1:{p}",
            f"--initial-cluster=kf=http://127.0.0.1:{p}", "--unsafe-no-fsync", "--log-level=warn",
            "--listen-metrics-urls=http://127.0.0.1:0",
        ])
        self._wait_http("etcd", f"http://127.0.0.1:{e}/health")

    def _start_apiserver(self) -> None:
        d = self.dir
        audit: list[str] = []
        if self.audit:
            (d / "audit-policy.yaml").write_text(AUDIT_POLICY)
            audit = [f"--audit-policy-file={d / 'audit-policy.yaml'}", f"--audit-log-path={self.audit_log}",
                     "--audit-log-format=json", "--audit-log-mode=blocking", "--audit-log-maxsize=0"]
        self._start("kube-apiserver", [
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['apiserver']}", "--endpoint-reconciler-type=none",
            f"--cert-dir={d / 'pki'}", f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d / 'pki' / 'sa.key'}",
            f"--service-account-signing-key-file={d / 'pki' / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
            *audit, *self.apiserver_flags,
        ])
        self._wait_http("kube-apiserver", f"{self.server}/readyz", token=self._tokens["admin"], ca=self.ca_file)

    def _kcm_args(self) -> list[str]:
        kc = self.kubeconfig
        return [
            f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", f"--secure-port={self.ports['kcm']}",
            f"--cert-dir={self.dir / 'kcm'}", "--leader-elect=false", "--controllers=*",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
            f"--service-account-private-key-file={self.dir / 'pki' / 'sa.key'}",
            f"--root-ca-file={self.ca_file}",
            *self.controller_manager_flags,
        ]

    def _scheduler_args(self) -> list[str]:
        kc = self.kubeconfig
        return [
            f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", f"--secure-port={self.ports['scheduler']}", "--leader-elect=false",
            "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        ]

    def _kwok_args(self) -> list[str]:
        # kwok applies no defaults to options read from a file: set every parallelism explicitly.
        config = self.dir / "kwok.yaml"
        config.write_text(
            "apiVersion: config.kwok.x-k8s.io/v1alpha1\nkind: KwokConfiguration\noptions:\n"
            "  enableCNI: false\n  cidr: 10.0.1.0/24\n  podPlayStageParallelism: 8\n"
            "  nodePlayStageParallelism: 2\n  nodeLeaseParallelism: 2\n  podsOnNodeSyncParallelism: 2\n"
            + (self.bin_dir / "kwok-stages.yaml").read_text()
        )
        return [
            f"--kubeconfig={self.kubeconfig}", f"--config={config}",
            "--manage-all-nodes=true", "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{self.ports['kwok']}",
        ]

    def _create_fake_node(self) -> None:
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": FAKE_NODE_NAME, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"type": "kwok", "kubernetes.io/hostname": FAKE_NODE_NAME,
                                    "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
            # No taints: kwok's docs add NoSchedule, which would keep every pod Pending here.
            "status": {"capacity": {"cpu": "32", "memory": "256Gi", "pods": "250"},
                       "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "250"}},
        }
        self.request("POST", "/api/v1/nodes", node, ok=(201, 409))

    def _node_ready(self) -> bool:
        node = self._get(f"/api/v1/nodes/{FAKE_NODE_NAME}")
        conditions = (node or {}).get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    # -- HTTP helpers --------------------------------------------------------------

    def request(self, method: str, path: str, body: dict | None = None, *, ok: tuple[int, ...] = (200,
                                                                                                  201)) -> dict | None:
        """One admin request to kube-apiserver; returns the decoded body, None on 404."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self._tokens['admin']}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self._ssl_context(self.ca_file), timeout=10) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            if error.code in ok:
                return json.loads(error.read() or b"null")
            raise ControlPlaneError(f"{method} {path} -> {error.code}: {error.read()[:500]!r}") from None

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        """kubectl as the admin; its output, or a :class:`ControlPlaneError` with kubectl's own message."""
        done = subprocess.run([str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
                              input=stdin, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise ControlPlaneError(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def _get(self, path: str) -> dict | None:
        return self.request("GET", path)

    @staticmethod
    def _ssl_context(ca: Path | None) -> ssl.SSLContext:
        if ca is None:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        return ssl.create_default_context(cafile=str(ca))

    def _wait_http(self, name: str, url: str, *, token: str | None = None, ca: Path | None = None) -> None:
        def healthy() -> bool:
            if ca is not None and not ca.exists():
                return False
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            request = urllib.request.Request(url, headers=headers)
            context = self._ssl_context(ca) if url.startswith("https") else None
            try:
                with urllib.request.urlopen(request, context=context, timeout=2) as resp:
                    return resp.status == 200
            except (urllib.error.URLError, OSError):
                return False

        self._wait_for(name, f"GET {url} == 200", healthy)

    def _wait_for(self, name: str, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        delay = 0.05
        while time.monotonic() < deadline:
            process = self._processes.get(name)
            if process is not None and not process.running():
                raise ControlPlaneError(f"{name} exited while waiting for {what}; log tail:\n{process.log_tail()}")
            try:
                if check():
                    return
            except ControlPlaneError:
                pass
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)
        tail = self._processes[name].log_tail() if name in self._processes else ""
        raise ControlPlaneError(f"{name} not healthy after {_START_TIMEOUT_S:.0f}s ({what}); log tail:\n{tail}")
