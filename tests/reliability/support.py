"""Helpers shared by the reliability tests: stack bookkeeping, convergence checks, local servers, certificates."""

from __future__ import annotations

import base64
import http.server
import json
import socket
import ssl
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes.client.rest import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from kfdef_dev.controlplane import free_port
from kfdef_operator.runtime.inventory import read as read_inventory
from kfdef_operator.runtime.ownership import INSTANCE_LABEL, Owner
from kfdef_operator.ssa.inventory import ObjectRef, split_api_version
from tests.cluster.conftest import KFDEF_API
from tests.cluster.test_reconciler import stack_objects
from tests.kube import Kube, wait_for

Ident = tuple[str, str, str, str | None]  # (apiVersion, kind, name, namespace)

#: Knobs of the reliability package's operator: a short fetch read timeout and teardown wave timeout, so that
#: the fault scenarios take seconds, not minutes. Production defaults: 60 s and 60 s.
OPERATOR_ENV = {"KFDEF_FETCH_READ_TIMEOUT": "2", "KFDEF_TEARDOWN_WAVE_TIMEOUT": "6"}


# --- what a stack renders, and what carries its label ------------------------------------------------------

def ref_of_ident(ident: Ident) -> ObjectRef:
    api_version, kind, name, namespace = ident
    return ObjectRef(split_api_version(api_version)[0], kind, namespace or "", name)


def expected_ids(idents: Iterable[Ident]) -> set[str]:
    return {ref_of_ident(i).id for i in idents}


def labelled_objects(kube: Kube, kinds: Iterable[tuple[str, str]], label: str) -> list[str]:
    """Inventory-style ids of every object of ``kinds`` carrying the instance label ``label``, cluster-wide.

    A kind that is no longer served (its CRD is gone) holds nothing.
    """
    found = []
    for api_version, kind in sorted(set(kinds)):
        try:
            items = kube.resource(api_version, kind).get(label_selector=f"{INSTANCE_LABEL}={label}").items
        except ResourceNotFoundError:
            continue
        except ApiException as error:
            if error.status == 404:
                continue
            raise
        group = split_api_version(api_version)[0]
        found += [ObjectRef(group, kind, item.metadata.namespace or "", item.metadata.name).id for item in items]
    return sorted(found)


def stack_kinds(stack) -> list[tuple[str, str]]:
    return sorted({(a, k) for a, k, _, _ in stack_objects(stack)})


def instance_label(name: str, namespace: str) -> str:
    return Owner(name, namespace, "").label


def kfdef(kube: Kube, name: str, namespace: str) -> dict | None:
    return kube.get(KFDEF_API, "KfDef", name, namespace)


def condition(obj: dict | None, type_: str) -> dict:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return {}


def is_converged(obj: dict | None, ids: set[str]) -> bool:
    """Ready for the current generation, with an inventory of exactly ``ids`` and no duplicate entry."""
    if obj is None:
        return False
    status = obj.get("status") or {}
    ready = condition(obj, "Ready")
    entries = [held.ref.id for held in read_inventory(status)]
    return (ready.get("status") == "True" and ready.get("observedGeneration") == obj["metadata"]["generation"]
            and status.get("observedGeneration") == obj["metadata"]["generation"]
            and len(entries) == len(set(entries)) and set(entries) == ids)


def wait_converged(kube: Kube, name: str, namespace: str, ids: set[str], *, timeout: float = 90) -> dict:
    def check():
        obj = kfdef(kube, name, namespace)
        return obj if is_converged(obj, ids) else None
    try:
        return wait_for(check, timeout=timeout, what=f"KfDef {namespace}/{name} Ready with inventory {sorted(ids)}")
    except AssertionError:
        obj = kfdef(kube, name, namespace) or {}
        raise AssertionError(f"KfDef {namespace}/{name} did not converge in {timeout:.0f}s; status: "
                             f"{json.dumps(obj.get('status'), indent=1)[:3000]}") from None


def wait_ready(kube: Kube, name: str, namespace: str, *, timeout: float = 120) -> dict:
    """The KfDef once Ready; on timeout, fail with its conditions."""
    try:
        return kube.wait_condition(KFDEF_API, "KfDef", name, "Ready", namespace=namespace, timeout=timeout)
    except AssertionError as error:
        conditions = ((kfdef(kube, name, namespace) or {}).get("status") or {}).get("conditions")
        raise AssertionError(f"{error}; conditions: {json.dumps(conditions, indent=1)}") from None


def delete_kfdefs(kube: Kube, namespace: str, names: Iterable[str] | None = None, *, timeout: float = 180) -> None:
    """Delete KfDefs (all of the namespace by default) at once, then wait until every one is gone."""
    if names is None:
        names = [item.metadata.name for item in kube.resource(KFDEF_API, "KfDef").get(namespace=namespace).items]
    names = list(names)
    for name in names:
        kube.delete(KFDEF_API, "KfDef", name, namespace)
    wait_for(lambda: not [n for n in names if kube.exists(KFDEF_API, "KfDef", n, namespace)], timeout=timeout,
             what=f"{len(names)} KfDef(s) in {namespace} gone")


def median(values: list[float]) -> float:
    return round(statistics.median(values), 2) if values else 0.0


# --- the operator's log ------------------------------------------------------------------------------------

class LogWindow:
    """The part of the operator's log written since this window was opened."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0

    def text(self) -> str:
        with open(self.path, "rb") as stream:
            stream.seek(self.offset)
            return stream.read().decode(errors="replace")


# --- a local server of manifest tarballs -------------------------------------------------------------------

@dataclass
class Route:
    """What one path answers: ``ok`` (the body), ``500``, ``404``, ``slow`` (never answers in time),
    ``truncated`` (half the body, announced as complete), ``trickle`` (the body at one byte a second),
    ``redirect`` (302 to ``location``)."""

    body: bytes = b""
    mode: str = "ok"
    location: str = ""
    hits: list[float] = field(default_factory=list)
    authorization: list[str] = field(default_factory=list)


def refusing_socket() -> socket.socket:
    """A socket bound to a free port on 127.0.0.1 but not listening: connections to it are refused, and while it is
    held no other process can take the port (a port merely found free was taken by a parallel test's listener)."""
    for _ in range(100):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", free_port()))
        except OSError:  # taken since free_port looked
            sock.close()
            continue
        return sock
    raise OSError("no free port on 127.0.0.1 to reserve")


class TarballServer:
    """A threaded HTTP(S) server on 127.0.0.1 whose routes can be switched while the operator fetches."""

    def __init__(self, reserved: socket.socket | None = None, *, tls: tuple[Path, Path] | None = None) -> None:
        """Listen on a new port, or on ``reserved`` (a socket from ``refusing_socket``), which the server takes."""
        self.routes: dict[str, Route] = {}
        self.release = threading.Event()  # lets stalled ("slow") answers finish
        self.closing = threading.Event()  # ends trickling answers
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                route = server.routes.get(self.path.split("?")[0])
                if route is None:
                    self.send_error(404, "Not Found")
                    return
                route.hits.append(time.monotonic())
                route.authorization.append(self.headers.get("Authorization", ""))
                if route.mode == "slow":
                    server.release.wait(30)
                    if route.mode == "slow":
                        return
                if route.mode in ("500", "404"):
                    self.send_error(int(route.mode))
                    return
                if route.mode == "redirect":
                    self.send_response(302)
                    self.send_header("Location", route.location)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if route.mode == "trickle":
                    self._trickle(route.body)
                    return
                body = route.body[: len(route.body) // 2] if route.mode == "truncated" else route.body
                self.send_response(200)
                self.send_header("Content-Type", "application/gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _trickle(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for index in range(len(body)):
                    try:
                        self.wfile.write(body[index:index + 1])
                        self.wfile.flush()
                    except OSError:  # the client gave up
                        return
                    if server.closing.wait(1.0):
                        return

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=reserved is None)
        if reserved is not None:
            self.httpd.socket.close()
            self.httpd.socket = reserved
            self.httpd.server_activate()
        self.httpd.daemon_threads = True
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(tls[0]), str(tls[1]))
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.scheme = "https" if tls else "http"
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def url(self, path: str, userinfo: str = "") -> str:
        return f"{self.scheme}://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}{path}"

    def serve(self, path: str, body: bytes, mode: str = "ok") -> Route:
        self.routes[path] = Route(body, mode)
        return self.routes[path]

    def redirect(self, path: str, location: str) -> Route:
        self.routes[path] = Route(mode="redirect", location=location)
        return self.routes[path]

    def close(self) -> None:
        self.release.set()
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> TarballServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# --- certificates ------------------------------------------------------------------------------------------

def self_signed_cert(directory: Path, name: str = "localhost", *, ip: bool = True) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and, with ``ip``, 127.0.0.1 (cert, key), made with openssl."""
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    names = "IP:127.0.0.1,DNS:localhost" if ip else "DNS:localhost"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "2", "-subj", f"/CN={'127.0.0.1' if ip else 'localhost'}", "-keyout", str(key),
                    "-out", str(cert), "-addext", f"subjectAltName={names}"],
                   check=True, capture_output=True)
    return cert, key


def ca_bundle_b64(cert: Path) -> str:
    return base64.b64encode(cert.read_bytes()).decode()


class AdmissionServer:
    """An HTTPS validating admission webhook on 127.0.0.1; by default it denies everything sent to it.

    ``allow(request)`` decides instead, given each AdmissionReview's ``request`` (it may act before answering).
    """

    MESSAGE = "denied by the reliability test policy"

    def __init__(self, cert: Path, key: Path, allow: Callable[[dict], bool] | None = None) -> None:
        self.reviews: list[dict] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                request = review.get("request") or {}
                server.reviews.append(review)
                allowed = allow(request) if allow is not None else False
                response: dict = {"uid": request.get("uid", ""), "allowed": allowed}
                if not allowed:
                    response["status"] = {"code": 403, "message": AdmissionServer.MESSAGE}
                answer = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                     "response": response}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}/validate"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def retry_api(call: Callable[[], object], attempts: int = 20) -> object:
    """Run an admin request that may hit the API server while it restarts."""
    for attempt in range(attempts):
        try:
            return call()
        except Exception:  # connection refused/reset during a restart
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")
