"""A source cannot borrow the operator's network position, files or time.

Every hop of a fetch is checked (scheme, and the address actually connected to), local sources stay inside the
directories the operator's admin allows, and every fetch ends at its total deadline. Fetch-level scenarios call
``resolve_source`` with the options the operator builds (``FetchOptions.from_env``) against real servers on
127.0.0.1; operator-level ones run KfDefs through the package's operator, which allows plain http from loopback
(127.0.0.0/8) and local sources under pytest's base directory, as every test operator does
(``tests/operator_process.py``), and refuses everything else as in production.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import git
import pytest

from kfdef_dev.manifests import tarball
from kfdef_operator.api.kfdef import Repo
from kfdef_operator.source.cache import SourceCache
from kfdef_operator.source.errors import SourceError
from kfdef_operator.source.options import FetchOptions
from kfdef_operator.source.resolve import resolve_source
from tests.cluster.conftest import KFDEF_API, wait_condition_reason
from tests.reliability.support import TarballServer, condition, delete_kfdefs, self_signed_cert

FAST = {"retries": 0, "connect_timeout": 2, "read_timeout": 2}
#: The fetch-level scenarios' servers are on 127.0.0.1; every other internal address stays refused.
SERVER_ONLY = {"KFDEF_ALLOWED_SOURCE_NETWORKS": "127.0.0.1/32"}


@pytest.fixture
def server():
    server = TarballServer()
    yield server
    server.close()


def _within(seconds: float, call: Callable[[], object]) -> tuple[object, float]:
    """(what ``call`` returned or raised, how long it took); fails if it is still running after ``seconds``."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as error:  # the outcome under test
            outcome.append(error)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"the fetch was still running after {seconds:.0f} s: it has no total deadline")
    return outcome[0], time.monotonic() - started


def test_a_trickling_source_fails_at_the_total_deadline(tmp_path, new_stack, server, reliability):
    """A server sending one byte a second: the fetch fails at its total deadline (KFDEF_FETCH_TIMEOUT)"""
    stack = new_stack(with_webhook=False)
    body = tarball(stack.root)
    server.serve("/slow.tar.gz", body, mode="trickle")
    options = FetchOptions.from_env({"KFDEF_ALLOW_INSECURE_HTTP": "1", "KFDEF_FETCH_TIMEOUT": "4s", **SERVER_ONLY},
                                    **FAST)
    cache = SourceCache(tmp_path / "cache")
    error, seconds = _within(30, lambda: resolve_source(Repo("manifests", server.url("/slow.tar.gz")), cache, options))
    assert isinstance(error, SourceError), error
    assert "not fetched within the 4 s deadline (KFDEF_FETCH_TIMEOUT)" in str(error) and error.transient, error
    assert 3.5 <= seconds <= 6, f"failed after {seconds:.1f} s, the deadline is 4 s"
    assert not any((cache.root / "tmp").iterdir()) and not any((cache.root / "archives").iterdir()), \
        "a partial download was left in the cache"
    reliability.figure("deadline", "4 s")
    reliability.figure("failed after s", round(seconds, 1))
    reliability.figure("body", f"{len(body)} bytes at 1 byte/s (a read timeout of 2 s never fires)")


@pytest.mark.parametrize("target", ["http://127.0.0.2:{port}/m.tar.gz", "http://10.11.12.13/m.tar.gz",
                                    "http://169.254.169.254/latest/meta-data/", "http://[::1]:{port}/m.tar.gz",
                                    "http://[::ffff:169.254.169.254]/latest/meta-data/"],
                         ids=["loopback", "private", "metadata", "ipv6-loopback", "ipv4-mapped-metadata"])
def test_a_redirect_to_an_internal_address_is_refused(tmp_path, server, target, reliability):
    """A redirect from an allowed server to another internal address: refused before connecting"""
    location = target.format(port=server.port)
    server.redirect("/m.tar.gz", location)
    options = FetchOptions.from_env({"KFDEF_ALLOW_INSECURE_HTTP": "1", **SERVER_ONLY}, **FAST)
    with pytest.raises(SourceError) as caught:
        resolve_source(Repo("manifests", server.url("/m.tar.gz")), SourceCache(tmp_path), options)
    message = str(caught.value)
    assert f"refused (redirected from {server.url('/m.tar.gz')}):" in message and "an internal address" in message, \
        message
    assert not caught.value.transient, "a refusal is not worth retrying"
    reliability.figure("refused with", message.split(": ", 2)[-1].split(";")[0].replace(str(server.port), "<port>"))


def test_https_redirecting_to_plain_http_is_refused(tmp_path, new_stack, server, reliability):
    """An https source redirecting to plain http: refused unless plain http is allowed"""
    cert, key = self_signed_cert(tmp_path)
    https = TarballServer(tls=(cert, key))
    try:
        stack = new_stack(with_webhook=False)
        server.serve("/m.tar.gz", tarball(stack.root))
        https.redirect("/m.tar.gz", server.url("/m.tar.gz"))
        repo = Repo("manifests", https.url("/m.tar.gz"))
        trusted = {"KFDEF_CA_BUNDLE": str(cert), **SERVER_ONLY}
        with pytest.raises(SourceError) as caught:
            resolve_source(repo, SourceCache(tmp_path / "a"), FetchOptions.from_env(trusted, **FAST))
        assert (f"redirected from {https.url('/m.tar.gz')} to plain {server.url('/m.tar.gz')}, which would drop TLS"
                in str(caught.value)), caught.value
        assert https.routes["/m.tar.gz"].hits and not server.routes["/m.tar.gz"].hits, \
            "nothing may be requested over plain http"
        allowed = FetchOptions.from_env({**trusted, "KFDEF_ALLOW_INSECURE_HTTP": "1"}, **FAST)
        assert resolve_source(repo, SourceCache(tmp_path / "b"), allowed).revision.startswith("sha256:")
    finally:
        https.close()
    reliability.figure("refused with", "redirected from https://... to plain http://..., which would drop TLS; "
                                       "followed once KFDEF_ALLOW_INSECURE_HTTP=1")


def test_redirects_keep_the_uris_credentials_for_its_own_origin_only(tmp_path, new_stack, server, reliability):
    """Credentials in the URI follow a redirect on the same server, never to another one"""
    other = TarballServer()
    try:
        stack = new_stack(with_webhook=False)
        server.serve("/m.tar.gz", tarball(stack.root))
        other.serve("/m.tar.gz", tarball(stack.root))
        server.redirect("/same", server.url("/m.tar.gz"))
        server.redirect("/away", other.url("/m.tar.gz"))
        options = FetchOptions.from_env({"KFDEF_ALLOW_INSECURE_HTTP": "1", **SERVER_ONLY}, **FAST)
        for path in ("/same", "/away"):
            resolve_source(Repo("manifests", server.url(path, "user:s3cret")), SourceCache(tmp_path / path[1:]),
                           options)
        assert server.routes["/m.tar.gz"].authorization[0].startswith("Basic ")
        assert other.routes["/m.tar.gz"].authorization == [""], "credentials were sent to another server"
    finally:
        other.close()
    reliability.figure("credentials", "kept on the same origin, dropped for another")


def test_an_https_source_named_by_host_is_verified_by_that_name(tmp_path, new_stack, reliability):
    """https://localhost with a certificate naming only localhost: connected at the checked address, verified by name"""
    cert, key = self_signed_cert(tmp_path, ip=False)
    https = TarballServer(tls=(cert, key))
    try:
        stack = new_stack(with_webhook=False)
        https.serve("/m.tar.gz", tarball(stack.root))
        options = FetchOptions.from_env({"KFDEF_CA_BUNDLE": str(cert),
                                         "KFDEF_ALLOWED_SOURCE_NETWORKS": "127.0.0.0/8, ::1"}, **FAST)
        resolved = resolve_source(Repo("manifests", f"https://localhost:{https.port}/m.tar.gz"), SourceCache(tmp_path),
                                  options)
        assert resolved.revision.startswith("sha256:") and https.routes["/m.tar.gz"].hits
    finally:
        https.close()
    reliability.figure("verified", "certificate for DNS:localhost only, connection pinned to the checked address")


def test_a_name_resolving_to_an_internal_address_is_refused(tmp_path, new_stack, server, reliability):
    """A host name resolving to loopback: the address is checked, not the name"""
    stack = new_stack(with_webhook=False)
    server.serve("/m.tar.gz", tarball(stack.root))
    options = FetchOptions.from_env({"KFDEF_ALLOW_INSECURE_HTTP": "1"}, **FAST)
    with pytest.raises(SourceError, match=r"localhost resolves to (127\.0\.0\.1|::1), an internal address "
                                          r"\(loopback\)") as caught:
        resolve_source(Repo("manifests", f"http://localhost:{server.port}/m.tar.gz"), SourceCache(tmp_path), options)
    assert not server.routes["/m.tar.gz"].hits, "the refused address was connected to"
    reliability.figure("refused with", str(caught.value).split(": ", 2)[-1].split(";")[0])


def test_git_over_plain_http_and_git_file_outside_the_roots_are_refused(tmp_path, reliability):
    """git+http without KFDEF_ALLOW_INSECURE_HTTP, and a git+file repository outside the local source roots"""
    with pytest.raises(SourceError, match=r"plain git\+http:// is refused"):
        resolve_source(Repo("manifests", "git+http://127.0.0.1:9/r.git"), SourceCache(tmp_path / "a"),
                       FetchOptions.from_env({**SERVER_ONLY}, **FAST))
    repository = tmp_path / "repository"
    repo = git.Repo.init(repository)
    (repository / "kustomization.yaml").write_text("resources: []\n")
    repo.index.add(["kustomization.yaml"])
    repo.index.commit("one", author=git.Actor("t", "t@example.org"), committer=git.Actor("t", "t@example.org"))
    roots = {"KFDEF_LOCAL_SOURCE_ROOTS": str(tmp_path / "allowed")}
    with pytest.raises(SourceError, match="outside the directories this operator reads local sources from"):
        resolve_source(Repo("manifests", f"git+file://{repository}"), SourceCache(tmp_path / "b"),
                       FetchOptions.from_env(roots, **FAST))
    assert not any((tmp_path / "b" / "git").iterdir()), "the repository was fetched"
    inside = FetchOptions.from_env({"KFDEF_LOCAL_SOURCE_ROOTS": str(tmp_path)}, **FAST)
    assert len(resolve_source(Repo("manifests", f"git+file://{repository}"), SourceCache(tmp_path / "c"),
                              inside).revision) == 40
    reliability.figure("refused", "git+http://, git+file:// outside KFDEF_LOCAL_SOURCE_ROOTS; fetched once inside")



def test_a_commit_id_does_not_open_a_tree_another_kfdef_fetched(tmp_path, reliability):
    """Another tenant's private git tree named by its full commit id"""
    private = tmp_path / "tenant-a" / "private"
    repo = git.Repo.init(private)
    (private / "kustomization.yaml").write_text("resources: []\n# tenant a's private manifests\n")
    repo.index.add(["kustomization.yaml"])
    commit = repo.index.commit("one", author=git.Actor("t", "t@example.org"),
                               committer=git.Actor("t", "t@example.org")).hexsha
    cache = SourceCache(tmp_path / "cache")
    options = FetchOptions.from_env({"KFDEF_LOCAL_SOURCE_ROOTS": str(tmp_path)}, **FAST)
    fetched = resolve_source(Repo("manifests", f"git+file://{private}?ref={commit}"), cache, options)
    assert fetched.revision == commit
    for other in (f"git+file://{tmp_path}/tenant-b/anything?ref={commit}",   # a repository that does not exist
                  f"git+file://{tmp_path}/tenant-a/private/.?ref={commit}"):  # the same one, spelled otherwise
        try:
            tree = resolve_source(Repo("manifests", other), cache, options)
        except SourceError as refused:
            assert "git fetch failed" in str(refused), str(refused)
            continue
        assert tree.local_path != fetched.local_path, "another URL was handed the tree fetched for tenant a"
    reliability.figure("attack", "git+file://<another repository>?ref=<tenant a's commit>: fetched, not handed "
                                 "tenant a's tree (trees are keyed by URL with its credentials, and commit)")

@pytest.mark.cluster
def test_the_operator_reads_no_local_source_outside_its_roots(operator, kube, kfdef_namespace, new_stack, reliability):
    """KfDefs naming the operator's credentials, /etc, its work directory or a file outside the roots"""
    stack = new_stack(with_webhook=False)
    work_dir = operator.work_dir / "cache"
    cases = {
        "secrets": ("/var/run/secrets/kubernetes.io/serviceaccount", "outside the directories"),
        "etc": ("file:///etc", "outside the directories"),
        "passwd": ("file:///etc/passwd", "outside the directories"),
        "work-dir": (str(work_dir / "sources"), "inside the operator's own work directory"),
    }
    for name, (uri, _) in cases.items():
        kube.apply(stack.kfdef(name, kfdef_namespace, uri=uri))
    messages = {}
    for name, (uri, expected) in cases.items():
        obj = wait_condition_reason(kube, name, kfdef_namespace, "Degraded", "True", "SourceFailed", timeout=60)
        messages[name] = condition(obj, "Degraded")["message"]
        assert expected in messages[name], f"{uri}: {messages[name]}"
    assert "KFDEF_LOCAL_SOURCE_ROOTS" in messages["secrets"], messages["secrets"]
    assert not kube.exists("v1", "Namespace", stack.namespace), "a refused source was applied"
    delete_kfdefs(kube, kfdef_namespace)
    reliability.figure("refused", ", ".join(uri for uri, _ in cases.values()).replace(str(work_dir), "<work-dir>"))
    reliability.figure("condition", "Degraded=True SourceFailed: repo 'manifests' (<uri>): the path is outside the "
                                    "directories this operator reads local sources from (its admin lists them in "
                                    "KFDEF_LOCAL_SOURCE_ROOTS)")


@pytest.mark.cluster
def test_the_operator_refuses_a_redirect_to_the_metadata_service(operator, kube, kfdef_namespace, new_stack, server,
                                                                 reliability):
    """A KfDef whose source redirects to 169.254.169.254"""
    stack = new_stack(with_webhook=False)
    server.redirect("/m.tar.gz", "http://169.254.169.254/latest/meta-data/iam/security-credentials/")
    kube.apply(stack.kfdef("metadata", kfdef_namespace, uri=server.url("/m.tar.gz")))
    obj = wait_condition_reason(kube, "metadata", kfdef_namespace, "Degraded", "True", "SourceFailed", timeout=60)
    message = condition(obj, "Degraded")["message"]
    assert (f"refused (redirected from {server.url('/m.tar.gz')}): 169.254.169.254 is an internal address "
            "(link-local, where cloud metadata services answer)") in message, message
    kube.delete(KFDEF_API, "KfDef", "metadata", kfdef_namespace)
    kube.wait_gone(KFDEF_API, "KfDef", "metadata", kfdef_namespace, timeout=60)
    reliability.figure("condition", "Degraded=True SourceFailed: refused (redirected from ...): 169.254.169.254 is an "
                                    "internal address (link-local, where cloud metadata services answer)")


def test_local_roots_resolve_symlinks(tmp_path, reliability):
    """A symlink inside a root pointing outside it is judged by its target"""
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "escape").symlink_to("/etc")
    options = FetchOptions.from_env({"KFDEF_LOCAL_SOURCE_ROOTS": str(allowed)}, **FAST)
    with pytest.raises(SourceError, match="outside the directories"):
        resolve_source(Repo("manifests", str(allowed / "escape")), SourceCache(tmp_path / "c"), options)
    (allowed / "repo").mkdir()
    assert resolve_source(Repo("manifests", str(allowed / "repo")), SourceCache(tmp_path / "c"),
                          options).local_path == (allowed / "repo").resolve()
    reliability.figure("refused", "<root>/escape -> /etc")

