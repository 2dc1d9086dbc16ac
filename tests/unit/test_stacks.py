"""kfdef_dev.stacks: the release archives fetched from a mirror on 127.0.0.1 and assembled into exactly the trees of
the stacks directory (``../shared/stacks``), every piece verified, and one line when there is nothing to get them from.

The mirror serves upstream-shaped pieces made from the stacks directory: v1.2.0's archive as it is, the v1.11.0 tag
archive with the vendoring undone, an argo-workflows v3.7.3 archive holding the vendored ``manifests/`` (and a file
beside it that must not be used), the jobset release manifest and the four kfdef files.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import http.server
import io
import re
import tarfile
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kfdef_dev import stacks
from kfdef_dev.stacks import Entry, StacksError, Tree, read_tree
from tests.unit.conftest import STACKS

pytestmark = pytest.mark.stacks

VENDORED_ARGO = re.compile(r"(?:\.\./)+vendor/argo-workflows/manifests/(?P<folder>\S+)")
VENDORED_JOBSET = "- jobset-v0.10.1-manifests.yaml"


def shared_tree(archive: str, top: str) -> Tree:
    return read_tree((STACKS / archive).read_bytes(), top)


def upstream_v1_11_0(assembled: Tree) -> Tree:
    """The v1.11.0 tag's tree: the vendored folder and file removed, the six remote entries put back as upstream
    writes them (``- https://github.com/argoproj/argo-workflows/manifests/<folder>?ref=v3.7.3``, and the jobset
    release URL)."""
    tree = {path: entry for path, entry in assembled.items()
            if not path.startswith("vendor/") and path != f"{stacks.JOBSET_DIR}/{stacks.JOBSET_FILE}"}
    restored = 0
    for path, entry in tree.items():
        if path.startswith(stacks.ARGO_KUSTOMIZATIONS):
            text, count = VENDORED_ARGO.subn(
                r"https://github.com/argoproj/argo-workflows/manifests/\g<folder>?ref=v3.7.3", entry.data.decode())
            tree[path], restored = Entry(text.encode()), restored + count
    jobset = f"{stacks.JOBSET_DIR}/kustomization.yaml"
    assert restored == 5 and VENDORED_JOBSET in tree[jobset].data.decode()
    tree[jobset] = Entry(tree[jobset].data.replace(VENDORED_JOBSET.encode(), f"- {stacks.JOBSET_V0_10_1.url}".encode()))
    return tree


def github_archive(tree: Tree, top: str) -> bytes:
    """A tag archive packed the plain way (owners, times and compression unlike the pinned archives)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for path, entry in tree.items():
            info = tarfile.TarInfo(f"{top}/{path}")
            info.size, info.mode, info.mtime = len(entry.data), 0o775 if entry.executable else 0o664, 1700000000
            tar.addfile(info, io.BytesIO(entry.data))
    return gzip.compress(raw.getvalue(), compresslevel=1)


@pytest.fixture(scope="session")
def upstream_pieces() -> dict[str, bytes]:
    """Upstream URL -> the bytes GitHub would answer with."""
    assembled = shared_tree(stacks.V1_11_0_ARCHIVE, stacks.MANIFESTS_V1_11_0.top)
    argo = {path: entry for path, entry in assembled.items() if path.startswith("vendor/argo-workflows/manifests/")}
    argo = {path.removeprefix("vendor/argo-workflows/"): entry for path, entry in argo.items()}
    argo["README.md"] = Entry(b"not part of the vendored folder\n")
    return {
        stacks.MANIFESTS_V1_2_0.url: (STACKS / stacks.V1_2_0_ARCHIVE).read_bytes(),
        stacks.MANIFESTS_V1_11_0.url: github_archive(upstream_v1_11_0(assembled), stacks.MANIFESTS_V1_11_0.top),
        stacks.ARGO_WORKFLOWS_V3_7_3.url: github_archive(argo, stacks.ARGO_WORKFLOWS_V3_7_3.top),
        stacks.JOBSET_V0_10_1.url: assembled[f"{stacks.JOBSET_DIR}/{stacks.JOBSET_FILE}"].data,
        **{piece.url: (STACKS / "kfdefs" / name).read_bytes() for name, piece in stacks.KFDEFS.items()},
    }


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve_mirror(directory: Path, pieces: dict[str, bytes]) -> Iterator[str]:
    """Each piece at ``<mirror>/<its URL without https://>``, served from 127.0.0.1 until the generator closes."""
    for url, data in pieces.items():
        path = directory / url.removeprefix("https://")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(QuietHandler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def clone(tmp_path) -> Path:
    """A checkout with no ../shared next to it."""
    (tmp_path / "clone").mkdir()
    return tmp_path / "clone"


def fetched_env(tmp_path: Path, mirror: str) -> dict[str, str]:
    return {"KFDEF_STACKS_MIRROR": mirror, "XDG_CACHE_HOME": str(tmp_path / "cache")}


def test_pieces_from_a_mirror_assemble_into_the_shared_trees(tmp_path, clone, upstream_pieces):
    with serve_mirror(tmp_path / "mirror", upstream_pieces) as mirror:
        env = fetched_env(tmp_path, mirror)
        directory = stacks.ensure_stacks(env, clone)

    assert directory == stacks.cache_dir(env) and directory.is_relative_to(tmp_path / "cache")
    for archive, top in ((stacks.V1_2_0_ARCHIVE, stacks.MANIFESTS_V1_2_0.top),
                         (stacks.V1_11_0_ARCHIVE, stacks.MANIFESTS_V1_11_0.top)):
        fetched, shared = read_tree((directory / archive).read_bytes(), top), shared_tree(archive, top)
        assert sorted(fetched) == sorted(shared), archive
        assert [path for path in shared if fetched[path] != shared[path]] == [], archive
    for name in stacks.KFDEF_FILES:
        assert (directory / "kfdefs" / name).read_bytes() == (STACKS / "kfdefs" / name).read_bytes()
    # The cache entry is complete: a second call neither fetches (the mirror is gone) nor changes it.
    assert stacks.ensure_stacks(env, clone) == directory


def test_the_packed_archives_are_deterministic():
    tree = {"b/x.sh": Entry(b"#!/bin/sh\n", executable=True), "a.yaml": Entry(b"a: 1\n"),
            "b/link": Entry(b"x.sh", symlink=True)}
    packed = stacks.pack_tree(tree, "top")
    assert packed == stacks.pack_tree(dict(reversed(tree.items())), "top")
    assert read_tree(packed, "top") == tree
    with tarfile.open(fileobj=io.BytesIO(packed)) as tar:
        assert tar.getnames() == ["top", "top/a.yaml", "top/b", "top/b/link", "top/b/x.sh"]


@pytest.mark.parametrize("piece", ["jobset", "v1.11.0"])
def test_a_corrupted_piece_is_refused_with_its_url_and_digests(tmp_path, clone, upstream_pieces, piece):
    pieces = dict(upstream_pieces)
    if piece == "jobset":
        url = stacks.JOBSET_V0_10_1.url
        pieces[url] += b"# one more line\n"
        expected, found = stacks.JOBSET_V0_10_1.sha256, hashlib.sha256(pieces[url]).hexdigest()
    else:
        url = stacks.MANIFESTS_V1_11_0.url
        tree = read_tree(pieces[url], stacks.MANIFESTS_V1_11_0.top)
        tree["README.md"] = Entry(tree["README.md"].data + b"\n")
        pieces[url] = github_archive(tree, stacks.MANIFESTS_V1_11_0.top)
        expected, found = stacks.MANIFESTS_V1_11_0.sha256, stacks.tree_digest(tree)
    with serve_mirror(tmp_path / "mirror", pieces) as mirror, pytest.raises(StacksError) as refused:
        env = fetched_env(tmp_path, mirror)
        stacks.ensure_stacks(env, clone)

    message = str(refused.value)
    assert stacks.mirrored(url, env["KFDEF_STACKS_MIRROR"]) in message
    assert f"is {found}, expected {expected}" in message
    assert list((tmp_path / "cache").glob("**/*stacks-*")) == []  # neither the entry nor a half-assembled one


def unreachable(url: str, timeout: float) -> None:
    raise urllib.error.URLError(OSError(101, "Network is unreachable"))


@pytest.mark.parametrize("mirrored", [False, True])
def test_offline_with_nothing_names_both_remedies_in_one_line(tmp_path, clone, monkeypatch, mirrored):
    if mirrored:
        closed = http.server.HTTPServer(("127.0.0.1", 0), QuietHandler)
        closed.server_close()  # a port nothing listens on
        env = fetched_env(tmp_path, f"http://127.0.0.1:{closed.server_address[1]}")
    else:
        monkeypatch.setattr(urllib.request, "urlopen", unreachable)
        env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    with pytest.raises(StacksError) as offline:
        stacks.ensure_stacks(env, clone)

    message = str(offline.value)
    assert "\n" not in message
    assert "set KFDEF_STACKS_DIR" in message and str(tmp_path / "shared" / "stacks") in message
    host = env["KFDEF_STACKS_MIRROR"].removeprefix("http://") if mirrored else "github.com"
    assert f"allow the network to {host}" in message


def test_a_configured_directory_is_used_as_it_is(tmp_path, clone):
    assert stacks.ensure_stacks({"KFDEF_STACKS_DIR": str(STACKS)}, clone) == STACKS
    with pytest.raises(StacksError, match=f"KFDEF_STACKS_DIR={tmp_path} lacks kubeflow-manifests-v1.2.0.tar.gz"):
        stacks.ensure_stacks({"KFDEF_STACKS_DIR": str(tmp_path)}, clone)
