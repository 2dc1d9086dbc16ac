"""Sources served for real: a local HTTP server (127.0.0.1), local files and dirs, local git repositories.

Hostile inputs: HTTP errors and timeouts, damaged and unsafe archives, decompression bombs, leaked credentials.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import os
import re
import socket
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import git
import pytest

from kfdef_operator.api.kfdef import Repo
from kfdef_operator.source import archive as archive_module
from kfdef_operator.source import git as git_module
from kfdef_operator.source.cache import SourceCache
from kfdef_operator.source.errors import SourceError, redact_uri
from kfdef_operator.source.git import parse_git_uri
from kfdef_operator.source.interrupt import Interrupt
from kfdef_operator.source.network import NetworkPolicy, parse_networks
from kfdef_operator.source.options import FetchOptions
from kfdef_operator.source.resolve import resolve_source, resolve_sources
from tests.unit.test_interrupt import REASON, interrupted_on_a_thread

#: The test servers listen on 127.0.0.1, an internal address the operator refuses unless allowed.
LOOPBACK = NetworkPolicy(allowed=parse_networks("127.0.0.0/8", "test"))
FAST = FetchOptions(connect_timeout=2, read_timeout=2, retries=2, backoff_seconds=0, allow_insecure_http=True,
                    networks=LOOPBACK)


# --- archives ---------------------------------------------------------------------------------------------

def tar_bytes(add: Callable[[tarfile.TarFile], None], mode: str = "w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        add(archive)
    return buffer.getvalue()


def add_file(archive: tarfile.TarFile, name: str, data: bytes = b"x", mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    archive.addfile(info, io.BytesIO(data))


def add_special(archive: tarfile.TarFile, name: str, kind: bytes, linkname: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    archive.addfile(info)


def manifests_tarball(version: str = "v1") -> bytes:
    def add(archive: tarfile.TarFile) -> None:
        add_special(archive, "manifests-1.0/", tarfile.DIRTYPE)
        add_file(archive, "manifests-1.0/argo/base/kustomization.yaml", f"resources: []  # {version}\n".encode())
        add_file(archive, "manifests-1.0/hack/run.sh", b"#!/bin/sh\n", 0o755)
        add_special(archive, "manifests-1.0/argo/link", tarfile.SYMTYPE, "base/kustomization.yaml")
        add_special(archive, "manifests-1.0/argo/hard", tarfile.LNKTYPE, "manifests-1.0/hack/run.sh")
    return tar_bytes(add)


# --- HTTP server ------------------------------------------------------------------------------------------

@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    etag: str = ""
    stall: bool = False  # hold the response until the test ends (a read timeout)
    failures_first: int = 0  # answer 503 this many times first
    declared_length: int | None = None


@dataclass
class Server:
    base: str
    routes: dict[str, Route] = field(default_factory=dict)
    hits: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str) -> str:
        return self.base + path


@pytest.fixture
def server():
    state = Server("")

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep test output quiet
            pass

        def do_GET(self):
            state.hits.setdefault(self.path.split("?")[0], []).append(dict(self.headers))
            route = state.routes.get(self.path.split("?")[0])
            if route is None:
                return self.send_error(404, "Not Found")
            if route.stall:
                state.release.wait(10)
                return
            if route.failures_first:
                route.failures_first -= 1
                return self.send_error(503, "Service Unavailable")
            if route.etag and self.headers.get("If-None-Match") == route.etag:
                self.send_response(304)
                self.end_headers()
                return
            if route.status != 200:
                return self.send_error(route.status)
            self.send_response(200)
            self.send_header("Content-Length", str(route.declared_length or len(route.body)))
            if route.etag:
                self.send_header("ETag", route.etag)
            self.end_headers()
            self.wfile.write(route.body)

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield state
    state.release.set()
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def cache(tmp_path) -> SourceCache:
    return SourceCache(tmp_path / "cache")


@pytest.fixture
def local(tmp_path) -> FetchOptions:
    """FAST, with the test's directory as the one local source root."""
    return replace(FAST, local_roots=(tmp_path,), private_dirs=(tmp_path / "cache",))


def fetch(uri: str, cache: SourceCache, options: FetchOptions = FAST):
    return resolve_source(Repo("manifests", uri), cache, options)


# --- http(s) ----------------------------------------------------------------------------------------------

def test_tarball_resolves_to_its_single_top_level_folder(server, cache):
    server.routes["/m.tar.gz"] = Route(manifests_tarball(), etag='"v1"')
    resolved = fetch(server.url("/m.tar.gz"), cache)
    assert resolved.local_path.name == "manifests-1.0"
    assert resolved.revision.startswith("sha256:") and len(resolved.revision) == 71
    assert (resolved.local_path / "argo/base/kustomization.yaml").read_text() == "resources: []  # v1\n"
    root = resolved.local_path
    assert (root / "argo/link").resolve() == (root / "argo/base/kustomization.yaml").resolve()
    assert (resolved.local_path / "argo/hard").read_bytes() == b"#!/bin/sh\n"
    assert (resolved.local_path / "hack/run.sh").stat().st_mode & 0o111


def test_unchanged_source_is_neither_downloaded_nor_unpacked_twice(server, cache, monkeypatch):
    server.routes["/m.tar.gz"] = Route(manifests_tarball(), etag='"v1"')
    first = fetch(server.url("/m.tar.gz"), cache)
    monkeypatch.setattr(archive_module, "safe_extract", lambda *a, **k: pytest.fail("unpacked again"))
    second = fetch(server.url("/m.tar.gz"), cache)
    assert second == first
    assert server.hits["/m.tar.gz"][1].get("If-None-Match") == '"v1"'
    monkeypatch.undo()
    server.routes["/m.tar.gz"] = Route(manifests_tarball("v2"), etag='"v2"')
    third = fetch(server.url("/m.tar.gz"), cache)
    assert third.revision != first.revision
    assert "v2" in (third.local_path / "argo/base/kustomization.yaml").read_text()


def test_same_body_from_another_uri_reuses_the_unpacked_tree(server, cache, monkeypatch):
    server.routes["/a.tgz"] = server.routes["/b.tgz"] = Route(manifests_tarball())
    first = fetch(server.url("/a.tgz"), cache)
    monkeypatch.setattr(archive_module, "safe_extract", lambda *a, **k: pytest.fail("unpacked again"))
    assert fetch(server.url("/b.tgz"), cache).local_path == first.local_path


def test_concurrent_resolves_download_once(server, cache):
    server.routes["/m.tar.gz"] = Route(manifests_tarball(), etag='"v1"')
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: fetch(server.url("/m.tar.gz"), cache), range(4)))
    assert len({r.local_path for r in results}) == 1
    assert sum(1 for h in server.hits["/m.tar.gz"] if "If-None-Match" not in h) == 1
    assert not any((cache.root / "tmp").iterdir())


def test_404_is_permanent_and_not_retried(server, cache):
    with pytest.raises(SourceError, match="HTTP 404") as caught:
        fetch(server.url("/missing.tar.gz"), cache)
    assert not caught.value.transient
    assert len(server.hits["/missing.tar.gz"]) == 1


def test_5xx_is_retried_then_reported_as_transient(server, cache):
    server.routes["/flaky.tgz"] = Route(manifests_tarball(), failures_first=2)
    assert fetch(server.url("/flaky.tgz"), cache).local_path.is_dir()
    assert len(server.hits["/flaky.tgz"]) == 3
    server.routes["/down.tgz"] = Route(status=500)
    with pytest.raises(SourceError, match="after 3 attempts.*HTTP 500") as caught:
        fetch(server.url("/down.tgz"), cache)
    assert caught.value.transient and len(server.hits["/down.tgz"]) == 3


def test_a_name_that_does_not_resolve_is_transient_and_not_retried_at_once(cache, monkeypatch):
    """Asking the resolver again a moment later rarely helps: the reconcile's backoff retries it instead."""
    lookups = []
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if host == "no-such-host.invalid":
            lookups.append(host)
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with pytest.raises(SourceError, match="cannot resolve no-such-host.invalid.*DNS") as caught:
        fetch("https://no-such-host.invalid/manifests.tgz", cache)
    assert caught.value.transient
    assert lookups == ["no-such-host.invalid"], "retried within the fetch"


def test_an_interrupted_fetch_ends_at_once(server, cache):
    """Issue 39, item 1: a deleted or changed KfDef's fetch ran on to its deadline."""
    server.routes["/stalled.tgz"] = Route(stall=True)
    stalled = [Repo("manifests", server.url("/stalled.tgz"))]
    raised, took = interrupted_on_a_thread(
        lambda interrupt: resolve_sources(stalled, cache, replace(FAST, read_timeout=60), interrupt=interrupt),
        ready=lambda: bool(server.hits.get("/stalled.tgz")))
    assert [(e.message, e.transient) for e in raised] == [(f"interrupted: {REASON}", True)] and took < 2
    interrupted = Interrupt()
    interrupted.interrupt(REASON)
    with pytest.raises(SourceError, match=f"interrupted: {REASON}"):  # a fetch started after the interrupt
        resolve_sources(stalled, cache, FAST, interrupt=interrupted)


def test_read_timeout_is_transient(server, cache):
    server.routes["/slow.tgz"] = Route(stall=True)
    options = replace(FAST, read_timeout=0.2, retries=0)
    with pytest.raises(SourceError, match="Timeout|timed out") as caught:
        fetch(server.url("/slow.tgz"), cache, options)
    assert caught.value.transient


def test_short_body_is_retried(server, cache):
    body = manifests_tarball()
    server.routes["/short.tgz"] = Route(body[:-50], declared_length=len(body))
    with pytest.raises(SourceError, match="after 3 attempts") as caught:
        fetch(server.url("/short.tgz"), cache, replace(FAST, read_timeout=1))
    assert caught.value.transient


def test_truncated_gzip_is_reported_as_damaged(server, cache):
    server.routes["/cut.tgz"] = Route(manifests_tarball()[:200])
    with pytest.raises(SourceError, match="damaged or not a tar archive") as caught:
        fetch(server.url("/cut.tgz"), cache)
    assert not caught.value.transient
    assert not any((cache.root / "trees").iterdir())


def test_plain_http_needs_the_insecure_flag(server, cache, monkeypatch):
    server.routes["/m.tgz"] = Route(manifests_tarball())
    with pytest.raises(SourceError, match="plain http:// is refused"):
        fetch(server.url("/m.tgz"), cache, FetchOptions())
    assert "/m.tgz" not in server.hits
    monkeypatch.setenv("KFDEF_ALLOW_INSECURE_HTTP", "1")
    monkeypatch.setenv("KFDEF_ALLOWED_SOURCE_NETWORKS", "127.0.0.1/32")
    monkeypatch.setenv("KFDEF_CA_BUNDLE", "/etc/ssl/custom.pem")
    options = FetchOptions.from_env(retries=0)
    assert (options.allow_insecure_http, options.ca_bundle, options.retries) == (True, "/etc/ssl/custom.pem", 0)
    assert fetch(server.url("/m.tgz"), cache, replace(options, ca_bundle=None)).local_path.is_dir()


def test_download_size_limit(server, cache):
    server.routes["/big.tgz"] = Route(manifests_tarball())
    with pytest.raises(SourceError, match="download limit"):
        fetch(server.url("/big.tgz"), cache, replace(FAST, max_download_bytes=100))


def test_credentials_never_appear_in_errors(server, cache):
    uri = server.url("/private.tgz").replace("http://", "http://alice:s3cr3tpw@") + "?token=abcdef123"
    with pytest.raises(SourceError) as caught:
        fetch(uri, cache)
    text = str(caught.value)
    assert "s3cr3tpw" not in text and "abcdef123" not in text and "alice" not in text
    assert "***@127.0.0.1" in text and "token=***" in text
    assert redact_uri("git+https://u:p@h/r.git?ref=v1#d") == "git+https://***@h/r.git?ref=v1#d"


# --- hostile archives -------------------------------------------------------------------------------------

HOSTILE = {
    "traversal": (lambda a: add_file(a, "top/../../evil.txt"), "leaves the archive"),
    "absolute": (lambda a: add_file(a, "/tmp/evil.txt"), "absolute"),
    "symlink-absolute": (lambda a: add_special(a, "top/link", tarfile.SYMTYPE, "/etc/passwd"), "points outside"),
    "symlink-escape": (lambda a: add_special(a, "top/link", tarfile.SYMTYPE, "../../etc"), "points outside"),
    "symlink-chain": (lambda a: (add_special(a, "d/x", tarfile.SYMTYPE, "../e"), add_special(a, "e/", tarfile.DIRTYPE),
                                 add_special(a, "d/y", tarfile.SYMTYPE, "x/../../outside")), "points outside"),
    "write-through-link": (lambda a: (add_special(a, "here", tarfile.SYMTYPE, "."),
                                      add_special(a, "up", tarfile.SYMTYPE, "here/.."),
                                      add_file(a, "up/evil.txt")), "points outside"),
    "hardlink-escape": (lambda a: add_special(a, "top/hard", tarfile.LNKTYPE, "../../etc/passwd"), "hard link"),
    "hardlink-missing": (lambda a: add_special(a, "top/hard", tarfile.LNKTYPE, "top/nothing"), "hard link"),
    "device": (lambda a: add_special(a, "top/dev", tarfile.CHRTYPE), "device"),
    "fifo": (lambda a: add_special(a, "top/fifo", tarfile.FIFOTYPE), "device, fifo"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_unsafe_archives_are_refused(case, tmp_path, cache, local):
    add, message = HOSTILE[case]
    archive = tmp_path / f"{case}.tar.gz"
    archive.write_bytes(tar_bytes(add))
    with pytest.raises(SourceError, match=message) as caught:
        fetch(str(archive), cache, local)
    assert "unsafe archive refused" in str(caught.value)
    assert not (tmp_path / "evil.txt").exists() and not any((cache.root / "trees").iterdir())


def test_decompression_bomb_and_file_limits(tmp_path, cache, local):
    zeros = tmp_path / "bomb.tar.gz"
    zeros.write_bytes(tar_bytes(lambda a: add_file(a, "top/zeros", bytes(4 * 1024 * 1024))))
    assert zeros.stat().st_size < 20_000
    with pytest.raises(SourceError, match="per file"):
        fetch(str(zeros), cache, replace(local, max_file_bytes=1024 * 1024))
    with pytest.raises(SourceError, match="unpacks to more than"):
        fetch(str(zeros), cache, replace(local, max_unpacked_bytes=1024 * 1024))
    many = tmp_path / "many.tar.gz"
    many.write_bytes(tar_bytes(lambda a: [add_file(a, f"top/{i}") for i in range(20)]))
    with pytest.raises(SourceError, match="more than 10 entries"):
        fetch(str(many), cache, replace(local, max_files=10))


# --- local files and directories --------------------------------------------------------------------------

def test_file_uri_plain_path_and_relative_path_to_a_tarball(tmp_path, cache, local):
    archive = tmp_path / "m.tar.gz"
    archive.write_bytes(manifests_tarball())
    by_uri, by_path = fetch(f"file://{archive}", cache, local), fetch(str(archive), cache, local)
    by_relative = fetch("m.tar.gz", cache, replace(local, base_dir=tmp_path))
    assert by_uri.local_path == by_path.local_path == by_relative.local_path
    assert by_uri.local_path.name == "manifests-1.0"


def test_directory_is_used_in_place_with_a_content_revision(tmp_path, cache, local):
    tree = tmp_path / "repo"
    (tree / "argo").mkdir(parents=True)
    (tree / "argo" / "kustomization.yaml").write_text("resources: []\n")
    first = fetch(f"file://{tree}", cache, local)
    assert first.local_path == tree.resolve() and first.revision.startswith("dir-sha256:")
    assert fetch(str(tree), cache, local).revision == first.revision
    (tree / "argo" / "kustomization.yaml").write_text("resources: [x]\n")
    assert fetch(str(tree), cache, local).revision != first.revision
    (tree / "escape").symlink_to("/etc")
    with pytest.raises(SourceError, match="points outside"):
        fetch(str(tree), cache, local)


def test_a_directory_inside_or_holding_the_work_directory_is_refused(tmp_path, cache, local):
    """Issue 39, item 5: the work directory holds every KfDef's sources; a source above it would read them all."""
    (tmp_path / "cache" / "sources").mkdir(parents=True)
    for uri, where in ((tmp_path / "cache" / "sources", "is inside"), (tmp_path, "holds")):
        with pytest.raises(SourceError, match=f"{where} the operator's own work directory") as caught:
            fetch(str(uri), cache, local)
        assert not caught.value.transient


@pytest.mark.timeout(30)  # before: hashing opened the named pipe and waited for a writer for ever
@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_named_pipes_and_sockets_in_a_local_directory_are_refused(tmp_path, cache, local, kind):
    """Issue 39, item 4: a FIFO in an allowed directory held a work thread past every deadline."""
    tree = tmp_path / "repo"
    (tree / "app").mkdir(parents=True)
    (tree / "app" / "kustomization.yaml").write_text("resources: []\n")
    if kind == "fifo":
        os.mkfifo(tree / "app" / "special")
    else:
        listening = socket.socket(socket.AF_UNIX)
        listening.bind(str(tree / "app" / "special"))
    what = "a named pipe (FIFO)" if kind == "fifo" else "a socket"
    with pytest.raises(SourceError, match=re.escape(f"app/special is {what}; a local source may hold only regular "
                                                    "files, directories and symlinks")) as caught:
        fetch(str(tree), cache, local)
    assert not caught.value.transient
    with pytest.raises(SourceError, match=re.escape(f"the path is {what}, neither a directory nor a tar archive")):
        fetch(str(tree / "app" / "special"), cache, local)


def test_a_local_directory_is_hashed_within_the_fetch_deadline(tmp_path, cache, local):
    """Issue 39, item 4: hashing a large local directory ignored the deadline."""
    tree = tmp_path / "repo"
    tree.mkdir()
    (tree / "big.yaml").write_bytes(b"#" * (8 * 1024 * 1024))
    with pytest.raises(SourceError, match="not fetched within the 0.001 s deadline") as caught:
        fetch(str(tree), cache, replace(local, timeout=0.001))
    assert caught.value.transient
    assert fetch(str(tree), cache, local).revision.startswith("dir-sha256:")


def test_refusals_name_the_repo_not_the_operators_layout(tmp_path, cache, local, monkeypatch):
    """Issue 39, item 7: neither the admin's roots nor the operator's directories show in what a KfDef is told."""
    operator_home = tmp_path / "operator"
    operator_home.mkdir()
    monkeypatch.chdir(operator_home)
    (tmp_path / "cache" / "sources").mkdir(parents=True)
    (tmp_path / "shortcut").symlink_to(tmp_path / "cache" / "sources")
    told = {}
    for uri in ("/etc", "file:///var/run/secrets", "no/such/dir", str(tmp_path / "shortcut")):
        with pytest.raises(SourceError) as caught:
            fetch(uri, cache, local)
        told[uri] = str(caught.value)
    for uri, message in told.items():
        assert message.startswith(f"repo 'manifests' ({uri}): the path "), message
        assert str(tmp_path) not in message.removeprefix(f"repo 'manifests' ({uri})"), message
    assert "KFDEF_LOCAL_SOURCE_ROOTS" in told["/etc"] and "does not exist" in told["no/such/dir"]
    assert "is inside the operator's own work directory" in told[str(tmp_path / "shortcut")]


def test_missing_path_explains_where_it_looked(tmp_path, cache, local):
    with pytest.raises(SourceError, match="does not exist.*relative to") as caught:
        fetch("nope/manifests", cache, replace(local, base_dir=tmp_path))
    assert not caught.value.transient


# --- git --------------------------------------------------------------------------------------------------

@pytest.fixture
def upstream(tmp_path):
    """A repo with tag v1.0 (sub/ says one), branch feature (sub/ says two) and main one commit ahead of v1.0."""
    path = tmp_path / "upstream"
    repo = git.Repo.init(path, initial_branch="main")
    with repo.config_writer() as config:
        config.set_value("user", "name", "Test").set_value("user", "email", "test@example.org")

    def commit(text: str) -> str:
        (path / "sub").mkdir(exist_ok=True)
        (path / "sub" / "version.txt").write_text(text)
        repo.index.add(["sub/version.txt"])
        return repo.index.commit(text).hexsha

    tagged = commit("one")
    repo.create_tag("v1.0")
    repo.create_head("feature")
    repo.heads.feature.checkout()
    commit("two")
    repo.heads.main.checkout()
    head = commit("three")
    return path, tagged, head


def test_git_tag_branch_default_head_and_subdirectory(upstream, cache, local):
    path, tagged, head = upstream
    at_tag = fetch(f"git+file://{path}?ref=v1.0#sub", cache, local)
    assert (at_tag.revision, (at_tag.local_path / "version.txt").read_text()) == (tagged, "one")
    assert (fetch(f"git+file://{path}?ref=feature#sub", cache, local).local_path / "version.txt").read_text() == "two"
    default = fetch(f"git+file://{path}", cache, local)
    assert default.revision == head and (default.local_path / "sub" / "version.txt").read_text() == "three"


def test_git_commit_already_exported_needs_no_fetch(upstream, cache, local, monkeypatch):
    path, tagged, _ = upstream
    first = fetch(f"git+file://{path}?ref={tagged}", cache, local)
    monkeypatch.setattr(git_module, "_fetch", lambda *a, **k: pytest.fail("fetched again"))
    assert fetch(f"git+file://{path}?ref={tagged}", cache, local) == first



def test_git_trees_are_keyed_by_url_and_credentials_as_well_as_commit(cache):
    """A tree exported for one URL (and its credentials) is never another URL's, even at the same commit."""
    sha = "a" * 40
    entries = {git_module._tree_entry(cache, git_module.parse_git_uri(uri), sha) for uri in (
        "git+https://host/org/private.git", "git+https://user:token@host/org/private.git",
        "git+https://other:token@host/org/private.git", "git+https://host/org/public.git")}
    assert len(entries) == 4 and all(entry.name.endswith(sha) for entry in entries)

def test_git_unknown_ref_missing_subdir_and_unreachable_repo(upstream, cache, local, tmp_path):
    path, _, _ = upstream
    with pytest.raises(SourceError, match="ref 'v9' is neither") as unknown:
        fetch(f"git+file://{path}?ref=v9", cache, local)
    assert not unknown.value.transient
    with pytest.raises(SourceError, match="subdirectory 'nope' does not exist"):
        fetch(f"git+file://{path}?ref=v1.0#nope", cache, local)
    with pytest.raises(SourceError, match="git fetch failed") as unreachable:
        fetch(f"git+file://{tmp_path}/no-such-repo", cache, local)
    assert unreachable.value.transient
    assert "no-such-repo' does not appear to be a git repository" in str(unreachable.value), "git's own message"


def _processes_naming(text: str) -> list[str]:
    """Command lines of the live processes naming ``text`` (a zombie's is empty)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in line:
            found.append(line)
    return found


def test_git_fetch_is_killed_with_its_helpers_at_the_deadline(cache):
    """A server that accepts and never answers: the fetch ends at the deadline, and git's transport helper
    (git-remote-http, blocked on the socket) ends with git."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept_until_closed() -> None:
        with contextlib.suppress(OSError):  # the listener closed at the end of the test
            while True:
                accepted.append(listener.accept()[0])
    threading.Thread(target=accept_until_closed, daemon=True).start()
    url = f"127.0.0.1:{listener.getsockname()[1]}/stalled.git"
    started = time.monotonic()
    try:
        with pytest.raises(SourceError, match=r"git fetch refused: not done within the 1 s deadline") as caught:
            fetch(f"git+http://{url}", cache, replace(FAST, timeout=1))
        assert caught.value.transient and time.monotonic() - started < 5
        assert accepted, "git never connected"
        assert _processes_naming(url) == []
    finally:
        listener.close()
        for connection in accepted:
            connection.close()


def test_without_a_git_executable_only_git_sources_fail(tmp_path):
    """gitpython will not load without git: the operator still imports, and only git sources fail."""
    (tmp_path / "plain").mkdir()
    script = "\n".join((
        "from kfdef_operator.cli import main",  # the whole product imports
        "from kfdef_operator.api.kfdef import Repo",
        "from kfdef_operator.source.cache import SourceCache",
        "from kfdef_operator.source.errors import SourceError",
        "from kfdef_operator.source.options import FetchOptions",
        "from kfdef_operator.source.resolve import resolve_source",
        f"cache, options = SourceCache({str(tmp_path / 'c')!r}), FetchOptions(local_roots=({str(tmp_path)!r},))",
        f"print(resolve_source(Repo('m', {str(tmp_path / 'plain')!r}), cache, options).local_path)",
        f"try: resolve_source(Repo('m', 'git+file://{tmp_path}/r.git'), cache, options)",
        "except SourceError as error: print(error)"))
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    plain, git_error = done.stdout.splitlines()
    assert plain == str(tmp_path / "plain")
    assert "git fetch failed: git cannot be run (Failed to initialize: Bad git executable." in git_error


def test_git_uri_parsing():
    assert parse_git_uri("git+https://github.com/o/r.git?ref=v1.2.0#stacks/x") == git_module.GitLocation(
        "https://github.com/o/r.git", "v1.2.0", "stacks/x")
    assert parse_git_uri("git+ssh://git@h/r.git").url == "ssh://git@h/r.git"
    with pytest.raises(ValueError):
        parse_git_uri("git+https://h/r.git#../up")


def test_resolve_sources_maps_every_repo(tmp_path, cache, local):
    (tmp_path / "a").mkdir()
    resolved = resolve_sources([Repo("one", str(tmp_path / "a")), Repo("two", f"file://{tmp_path}/a")], cache, local)
    assert sorted(resolved) == ["one", "two"] and resolved["two"].name == "two"


def test_git_connects_only_where_the_policy_allows(cache):
    for uri, refusal in (("git+https://localhost:1/r.git", "localhost resolves to"),
                         ("git+ssh://git@10.1.2.3/r.git", "10.1.2.3 is an internal address (private)")):
        with pytest.raises(SourceError, match=re.escape(refusal)):
            fetch(uri, cache, FetchOptions())
    assert not list((cache.root / "git").iterdir())
    repo = Repo("manifests", "git+https://127.0.0.1:8443/r.git")
    config, env = git_module._transport(repo, parse_git_uri(repo.uri), FAST)
    assert "http.curloptResolve=127.0.0.1:8443:127.0.0.1" in config and "http.followRedirects=false" in config
    assert env["GIT_ALLOW_PROTOCOL"] == "https" and env["GIT_TERMINAL_PROMPT"] == "0"
