"""Secrets stay secret, sources are trusted only when verified, the operator talks only to whom it must.

RBAC least privilege (``kubectl auth can-i`` as the operator's service account against ``deploy/``) is checked in
``tests/cluster/test_deploy.py``. The package's operator runs with ``KFDEF_ALLOW_INSECURE_HTTP=1`` (as every test
operator: the tests serve tarballs over plain http on 127.0.0.1), so the refusal of plain http and of unverified
TLS is tested on ``FetchOptions`` and ``resolve_source``, the code the operator runs for every fetch. Their
servers listen on 127.0.0.1, an internal address the options must allow (``KFDEF_ALLOWED_SOURCE_NETWORKS``);
what a source may reach is tested in ``test_source_trust.py``.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from kfdef_dev.manifests import tarball
from kfdef_operator.api.kfdef import Repo
from kfdef_operator.source.cache import SourceCache
from kfdef_operator.source.errors import SourceError
from kfdef_operator.source.options import FetchOptions
from kfdef_operator.source.resolve import resolve_source
from tests.cluster.conftest import KFDEF_API, kfdef_status, wait_condition_reason
from tests.reliability.support import TarballServer, self_signed_cert, wait_ready


@pytest.fixture
def server():
    server = TarballServer()
    yield server
    server.close()


def _established_remote_ports(pid: int) -> set[int]:
    """Remote ports of the process's established TCP connections (its socket inodes in /proc/net/tcp*)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if fields[3] == "01" and fields[9] in inodes:  # 01: ESTABLISHED
                    ports.add(int(fields[2].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.cluster
def test_secrets_and_source_credentials_never_leak(operator, control_plane, kube, kfdef_namespace, new_stack, server,
                                                   reliability):
    """spec.secrets and URI credentials absent from the operator log, Events and status"""
    marker = uuid.uuid4().hex[:10]
    literal, env_name = f"literal-{marker}", f"KFDEF_ENV_{marker.upper()}"
    user, password, token = f"user{marker}", f"pw{marker}", f"tok{marker}"
    secrets = [{"name": "db", "secretSource": {"literalSource": {"value": literal}}},
               {"name": "oauth", "secretSource": {"envSource": {"name": env_name}}}]
    stack = new_stack(with_webhook=False)
    server.serve("/good.tar.gz", tarball(stack.root))
    server.serve("/broken.tar.gz", b"", mode="500")
    for name, path in (("good", "/good.tar.gz"), ("broken", "/broken.tar.gz"), ("missing", "/missing.tar.gz")):
        body = stack.kfdef(name, kfdef_namespace, uri=server.url(path, f"{user}:{password}") + f"?token={token}")
        body["spec"]["secrets"] = secrets
        kube.apply(body)
    wait_ready(kube, "good", kfdef_namespace)
    for name in ("broken", "missing"):
        wait_condition_reason(kube, name, kfdef_namespace, "Degraded", "True", "SourceFailed", timeout=60)
    assert server.routes["/good.tar.gz"].authorization[0].startswith("Basic "), "the credentials were not used"
    ports = _established_remote_ports(operator.popen.pid)
    assert control_plane.ports["apiserver"] in ports and ports <= {control_plane.ports["apiserver"], server.port}, \
        f"the operator is connected to ports {ports}; only the API server ({control_plane.ports['apiserver']}) " \
        f"and the source ({server.port}) are expected"

    status = json.dumps({name: kfdef_status(kube, name, kfdef_namespace) for name in ("good", "broken", "missing")})
    events = json.dumps([e.message for e in kube.core.list_namespaced_event(kfdef_namespace).items])
    log = operator.log_tail(5000)
    for where, text in (("status", status), ("events", events), ("operator log", log)):
        for secret in (literal, env_name, password, token, user):
            assert secret not in text, f"{secret!r} leaked into the {where}"
    assert f"***@127.0.0.1:{server.port}" in status and "token=***" in status  # redacted, still recognisable
    assert "HTTP 500" in status and "HTTP 404" in status
    reliability.figure("places checked", "operator log (5000 lines), Events, status of 3 KfDefs")
    reliability.figure("secrets checked", 5)
    reliability.figure("operator's remote ports", "API server only" if ports == {control_plane.ports["apiserver"]}
                       else "API server and the source")


FAST = {"retries": 0, "connect_timeout": 2, "read_timeout": 2}
SERVER_ONLY = {"KFDEF_ALLOWED_SOURCE_NETWORKS": "127.0.0.1/32"}


@pytest.mark.parametrize("value", ["", "0", "false", "no"], ids=["unset", "0", "false", "no"])
def test_plain_http_is_refused_by_default(tmp_path, value, reliability):
    """Plain http:// refused unless KFDEF_ALLOW_INSECURE_HTTP is set"""
    options = FetchOptions.from_env({"KFDEF_ALLOW_INSECURE_HTTP": value} if value else {}, **FAST)
    with pytest.raises(SourceError, match="plain http:// is refused") as caught:
        resolve_source(Repo("manifests", "http://10.11.12.13/m.tar.gz"), SourceCache(tmp_path), options)
    assert "KFDEF_ALLOW_INSECURE_HTTP=1" in str(caught.value)
    reliability.figure("setting", f"KFDEF_ALLOW_INSECURE_HTTP={value!r}" if value else "unset")


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_plain_http_is_fetched_when_explicitly_allowed(tmp_path, server, new_stack, value, reliability):
    """Plain http:// fetched when KFDEF_ALLOW_INSECURE_HTTP allows it"""
    stack = new_stack(with_webhook=False)
    server.serve("/m.tar.gz", tarball(stack.root))
    options = FetchOptions.from_env({"KFDEF_ALLOW_INSECURE_HTTP": value, **SERVER_ONLY}, **FAST)
    resolved = resolve_source(Repo("manifests", server.url("/m.tar.gz")), SourceCache(tmp_path / "c"), options)
    assert (resolved.local_path / "app" / "base" / "kustomization.yaml").is_file()
    reliability.figure("setting", f"KFDEF_ALLOW_INSECURE_HTTP={value}")


def test_unverified_tls_is_refused_unless_the_ca_bundle_trusts_it(tmp_path, new_stack, reliability):
    """A self-signed HTTPS source refused; accepted with KFDEF_CA_BUNDLE"""
    cert, key = self_signed_cert(tmp_path)
    https = TarballServer(tls=(cert, key))
    try:
        stack = new_stack(with_webhook=False)
        https.serve("/m.tar.gz", tarball(stack.root))
        repo = Repo("manifests", https.url("/m.tar.gz"))
        with pytest.raises(SourceError, match="TLS verification failed") as caught:
            resolve_source(repo, SourceCache(tmp_path / "a"), FetchOptions.from_env(SERVER_ONLY, **FAST))
        assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value) and "KFDEF_CA_BUNDLE" in str(caught.value)
        assert not https.routes["/m.tar.gz"].hits, "nothing may be requested over an unverified connection"
        trusted = FetchOptions.from_env({"KFDEF_CA_BUNDLE": str(cert), **SERVER_ONLY}, **FAST)
        resolved = resolve_source(repo, SourceCache(tmp_path / "b"), trusted)
        assert resolved.revision.startswith("sha256:")
    finally:
        https.close()
    reliability.figure("refused with", "CERTIFICATE_VERIFY_FAILED; accepted once KFDEF_CA_BUNDLE names the cert")


@pytest.mark.cluster
def test_the_kfdef_of_an_untrusted_https_source_says_why(operator, kube, kfdef_namespace, new_stack, tmp_path,
                                                         reliability):
    """The running operator refuses a self-signed HTTPS source with a clear condition"""
    cert, key = self_signed_cert(tmp_path)
    https = TarballServer(tls=(cert, key))
    try:
        stack = new_stack(with_webhook=False)
        https.serve("/m.tar.gz", tarball(stack.root))
        kube.apply(stack.kfdef("untrusted", kfdef_namespace, uri=https.url("/m.tar.gz")))
        obj = wait_condition_reason(kube, "untrusted", kfdef_namespace, "Degraded", "True", "SourceFailed", timeout=60)
        message = next(c for c in obj["status"]["conditions"] if c["type"] == "Degraded")["message"]
        assert "TLS verification failed" in message and "KFDEF_CA_BUNDLE" in message, message
        kube.delete(KFDEF_API, "KfDef", "untrusted", kfdef_namespace)
        kube.wait_gone(KFDEF_API, "KfDef", "untrusted", kfdef_namespace, timeout=60)
    finally:
        https.close()
    reliability.figure("condition", "Degraded=True SourceFailed: TLS verification failed ... set KFDEF_CA_BUNDLE")
