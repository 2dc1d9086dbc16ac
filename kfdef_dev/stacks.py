"""``python -m kfdef_dev stacks``: the Kubeflow release archives the tests and benchmarks run, found or fetched.

``tests/unit``, ``tests/releases`` and ``bench/`` read a *stacks directory*: ``kubeflow-manifests-v1.2.0.tar.gz``,
``kubeflow-manifests-v1.11.0.tar.gz`` (each a GitHub-style archive with one top folder) and ``kfdefs/`` (the four
kfctl v1.2.0 KfDef files). It is ``$KFDEF_STACKS_DIR``, else ``../shared/stacks`` next to the checkout, else this
module fetches every piece from its upstream and assembles the directory, as ``../shared/stacks/README.md``
describes it, into ``~/.cache/kfdef-operator/stacks-<key>/`` (``$XDG_CACHE_HOME`` honoured), once.

Every fetched piece is checked against a pin before use. GitHub does not keep the gzip bytes of its tag archives
stable, so an archive is pinned by the sha256 of its unpacked tree (:func:`tree_digest`: paths, kinds, executable
bits, contents and symlink targets, no times or owners); a single file by its plain sha256. The assembled v1.11.0
tree is pinned too, so the vendoring is checked as well as its inputs. The archives written are deterministic (fixed
times, owners and order). ``$KFDEF_STACKS_MIRROR`` (a base URL) replaces ``https://`` in every upstream URL, so
``https://github.com/a/b`` is fetched from ``$KFDEF_STACKS_MIRROR/github.com/a/b``.

``python -m kfdef_dev stacks`` prints the directory; ``python -m kfdef_dev stacks -- COMMAND...`` runs COMMAND with
``KFDEF_STACKS_DIR`` set to it (``make test`` does so outside the network namespace, which has no network).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
V1_2_0_ARCHIVE = "kubeflow-manifests-v1.2.0.tar.gz"
V1_11_0_ARCHIVE = "kubeflow-manifests-v1.11.0.tar.gz"
#: Where the pieces come from (GitHub answers archive and release downloads with redirects to the other hosts).
UPSTREAM_HOSTS = ("github.com", "codeload.github.com", "raw.githubusercontent.com",
                  "release-assets.githubusercontent.com", "objects.githubusercontent.com")
#: A fixed time for every member of the archives written here: the same pins give the same bytes.
ARCHIVE_MTIME = 1767225600  # 2026-01-01T00:00:00Z
_FETCH_TIMEOUT_S = 120.0
#: What to do when a test finds no archives.
STACKS_HINT = ("run the tests through `make test` (or `make unit`), which finds or fetches them, or set "
               "KFDEF_STACKS_DIR to the directory `python -m kfdef_dev stacks` prints")


class StacksError(RuntimeError):
    """The release archives could not be found, fetched or verified."""


class UpstreamUnreachable(StacksError):
    """An upstream (or mirror) host could not be reached at all: offline, as opposed to a wrong answer."""


@dataclass(frozen=True)
class Entry:
    """A file (its contents) or a symlink (its target, as bytes) of an unpacked tree."""

    data: bytes
    executable: bool = False
    symlink: bool = False


#: An unpacked archive: POSIX path relative to the top folder -> file or symlink. Folders are implied by the paths
#: (git has no empty ones).
Tree = dict[str, Entry]


@dataclass(frozen=True)
class Piece:
    """One upstream download and its pin.

    With ``top`` the download is a tag archive with that one top folder, and ``sha256`` is the :func:`tree_digest` of
    its ``folder`` (the whole tree when empty), the only part used; otherwise ``sha256`` is that of the file.
    """

    url: str
    sha256: str
    top: str = ""
    folder: str = ""


# -- the pins (computed from ../shared/stacks; see docs/development.md for how the v1.11.0 upstream tree was derived)
MANIFESTS_V1_2_0 = Piece("https://github.com/kubeflow/manifests/archive/refs/tags/v1.2.0.tar.gz",
                         "99990ac70e2b15042f0ba77a6853245a266195c4c2da46bc9302c28e087bd35c", top="manifests-1.2.0")
MANIFESTS_V1_11_0 = Piece("https://github.com/kubeflow/manifests/archive/refs/tags/v1.11.0.tar.gz",
                          "252434b60f63c55a740e97a1e0bdadc6dda6e4e5afb6942c9b8bf39f6ce5da93", top="manifests-1.11.0")
ARGO_WORKFLOWS_V3_7_3 = Piece("https://github.com/argoproj/argo-workflows/archive/refs/tags/v3.7.3.tar.gz",
                              "f8c59d86af80f208777895f4fee0d4c543453d09c0db0b337bad6ca08691be4f",
                              top="argo-workflows-3.7.3", folder="manifests")
JOBSET_V0_10_1 = Piece("https://github.com/kubernetes-sigs/jobset/releases/download/v0.10.1/manifests.yaml",
                       "06f3709da7dae25961e09d283b839d4ed624da5bbea34b613882cdcf6f15a76a")
KFDEFS = {name: Piece(f"https://raw.githubusercontent.com/kubeflow/manifests/v1.2-branch/kfdef/{name}", sha256)
          for name, sha256 in {
              "kfctl_aws.v1.2.0.yaml": "6c54f4983790be03c7d507fbda3ed172d1663d65c3e00f5cb7597d7244683679",
              "kfctl_istio_dex.v1.2.0.yaml": "82e72b6ee75522738c0493ef71499aae8512858648ee7fbb6263b08036c4aaff",
              "kfctl_k8s_istio.v1.2.0.yaml": "5600ead1b916d95f9f50b563efee8232dfb0616923617b243d0dfa49646d9d8a",
              "kfctl_openshift.v1.2.0.yaml": "8928502407be559514e66d4218b492f801cfb6e95a942b0f866fabbe1d749644",
          }.items()}
KFDEF_FILES = tuple(KFDEFS)
#: The v1.11.0 tree with argo-workflows and jobset vendored: what ../shared/stacks holds.
ASSEMBLED_V1_11_0_SHA256 = "375b887de82e29b9aa3cdf984e53cda3204ac62bc6e021d24e807171e845fc76"

# -- the vendoring of v1.11.0's two remote bases
ARGO_VENDOR_DIR = "vendor/argo-workflows/manifests"
ARGO_KUSTOMIZATIONS = "applications/pipeline/upstream/third-party/argo/"
ARGO_REMOTE = re.compile(r"https://github\.com/argoproj/argo-workflows/manifests/(?P<folder>[^?\s]+)\?ref=v3\.7\.3")
ARGO_REMOTE_COUNT = 5
JOBSET_DIR = "applications/trainer/upstream/third-party/jobset"
JOBSET_FILE = "jobset-v0.10.1-manifests.yaml"


# -- trees ----------------------------------------------------------------------------------------------------------

def read_tree(archive: bytes, top: str) -> Tree:
    """The files and symlinks of a tar archive whose members all sit under the one folder ``top``."""
    tree: Tree = {}
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
        for member in tar:
            if member.name.rstrip("/") == top and member.isdir():
                continue
            if not member.name.startswith(top + "/"):
                raise StacksError(f"archive member {member.name!r} lies outside its top folder {top}/")
            path = member.name[len(top) + 1:].rstrip("/")
            if member.isdir():
                continue
            if member.issym():
                tree[path] = Entry(member.linkname.encode(), symlink=True)
            elif member.isfile():
                reader = tar.extractfile(member)
                assert reader is not None  # a regular file always has contents
                tree[path] = Entry(reader.read(), executable=bool(member.mode & 0o100))
            else:
                raise StacksError(f"archive member {member.name!r} is neither a file, a folder nor a symlink")
    return tree


def tree_digest(tree: Tree) -> str:
    """sha256 over every path in order with its kind, executable bit and the sha256 of its contents or target."""
    digest = hashlib.sha256()
    for path in sorted(tree):
        entry = tree[path]
        kind = "symlink" if entry.symlink else "executable" if entry.executable else "file"
        digest.update(f"{kind} {hashlib.sha256(entry.data).hexdigest()} {path}\0".encode())
    return digest.hexdigest()


def subtree(tree: Tree, folder: str) -> Tree:
    """The part of ``tree`` under ``folder``, with paths relative to it."""
    prefix = folder.rstrip("/") + "/"
    return {path[len(prefix):]: entry for path, entry in tree.items() if path.startswith(prefix)}


def pack_tree(tree: Tree, top: str) -> bytes:
    """``tree`` as a gzipped tar under ``top/``: folders first, paths in order, fixed times and owners."""
    folders = {top}
    for path in tree:
        parent = posixpath.dirname(path)
        while parent:
            folders.add(f"{top}/{parent}")
            parent = posixpath.dirname(parent)
    members = sorted([(name, None) for name in folders] + [(f"{top}/{path}", entry) for path, entry in tree.items()],
                     key=lambda item: item[0].split("/"))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, entry in members:
            info = tarfile.TarInfo(name)
            info.mtime, info.uname, info.gname = ARCHIVE_MTIME, "root", "root"
            if entry is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif entry.symlink:
                info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, entry.data.decode()
                tar.addfile(info)
            else:
                info.size, info.mode = len(entry.data), 0o755 if entry.executable else 0o644
                tar.addfile(info, io.BytesIO(entry.data))
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, mtime=0) as stream:
        stream.write(raw.getvalue())
    return packed.getvalue()


def vendored_argo_folder(kustomization: str, remote: re.Match[str]) -> str:
    """The relative path, from ``kustomization``'s folder, of the vendored folder a remote argo base names."""
    return posixpath.relpath(f"{ARGO_VENDOR_DIR}/{remote['folder']}", posixpath.dirname(kustomization))


def vendor_v1_11_0(manifests: Tree, argo_manifests: Tree, jobset_yaml: bytes) -> Tree:
    """v1.11.0 with its remote bases made local, as ../shared/stacks/README.md describes: argo-workflows' manifests/
    under ``vendor/`` and the five kustomization entries pointing at it by relative path; the jobset release manifest
    beside its kustomization, whose one URL entry becomes the file name."""
    tree = dict(manifests)
    tree.update({f"{ARGO_VENDOR_DIR}/{path}": entry for path, entry in argo_manifests.items()})
    tree[f"{JOBSET_DIR}/{JOBSET_FILE}"] = Entry(jobset_yaml)
    rewritten = 0
    for path in [p for p in tree if p.startswith(ARGO_KUSTOMIZATIONS) and p.endswith("/kustomization.yaml")]:
        text, count = ARGO_REMOTE.subn(functools.partial(vendored_argo_folder, path), tree[path].data.decode())
        tree[path] = Entry(text.encode())
        rewritten += count
    if rewritten != ARGO_REMOTE_COUNT:
        raise StacksError(f"v1.11.0 has {rewritten} argo-workflows v3.7.3 remote bases, not {ARGO_REMOTE_COUNT}")
    kustomization = f"{JOBSET_DIR}/kustomization.yaml"
    text = tree[kustomization].data.decode()
    if text.count(JOBSET_V0_10_1.url) != 1:
        raise StacksError(f"{kustomization} does not name {JOBSET_V0_10_1.url} exactly once")
    tree[kustomization] = Entry(text.replace(JOBSET_V0_10_1.url, JOBSET_FILE).encode())
    return tree


# -- fetching -------------------------------------------------------------------------------------------------------

def mirrored(url: str, mirror: str) -> str:
    """``url`` as served by ``mirror`` (``https://`` replaced by the mirror's base URL), or itself without one."""
    return f"{mirror.rstrip('/')}/{url.removeprefix('https://')}" if mirror else url


def download(url: str) -> bytes:
    print(f"[stacks] fetching {url}", file=sys.stderr, flush=True)
    try:
        with urllib.request.urlopen(url, timeout=_FETCH_TIMEOUT_S) as response:
            return bytes(response.read())
    except urllib.error.HTTPError as error:
        raise StacksError(f"{url}: HTTP {error.code} {error.reason}") from error
    except (urllib.error.URLError, OSError) as error:
        raise UpstreamUnreachable(f"{url}: {getattr(error, 'reason', error)}") from error


def fetch_tree(piece: Piece, mirror: str) -> Tree:
    """A tag archive downloaded, its ``folder`` (or whole tree) checked against the pin."""
    url = mirrored(piece.url, mirror)
    tree = read_tree(download(url), piece.top)
    tree = subtree(tree, piece.folder) if piece.folder else tree
    check(url, f"the tree digest of {piece.top}/{piece.folder}", tree_digest(tree), piece.sha256)
    return tree


def fetch_file(piece: Piece, mirror: str) -> bytes:
    """A single file downloaded and checked against its pin."""
    url = mirrored(piece.url, mirror)
    data = download(url)
    check(url, "sha256", hashlib.sha256(data).hexdigest(), piece.sha256)
    return data


def check(what: str, digest_name: str, found: str, expected: str) -> None:
    if found != expected:
        raise StacksError(f"{what}: {digest_name} is {found}, expected {expected}")


def assemble(destination: Path, mirror: str) -> None:
    """Fetch, verify and assemble every piece into ``destination``, which appears complete or not at all."""
    v1_2_0 = fetch_tree(MANIFESTS_V1_2_0, mirror)
    v1_11_0 = vendor_v1_11_0(fetch_tree(MANIFESTS_V1_11_0, mirror), fetch_tree(ARGO_WORKFLOWS_V3_7_3, mirror),
                             fetch_file(JOBSET_V0_10_1, mirror))
    kfdefs = {name: fetch_file(piece, mirror) for name, piece in KFDEFS.items()}
    check("the assembled v1.11.0 tree", "tree digest", tree_digest(v1_11_0), ASSEMBLED_V1_11_0_SHA256)
    destination.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".stacks-", dir=destination.parent))
    try:
        (work / V1_2_0_ARCHIVE).write_bytes(pack_tree(v1_2_0, MANIFESTS_V1_2_0.top))
        (work / V1_11_0_ARCHIVE).write_bytes(pack_tree(v1_11_0, MANIFESTS_V1_11_0.top))
        (work / "kfdefs").mkdir()
        for name, data in kfdefs.items():
            (work / "kfdefs" / name).write_bytes(data)
        work.chmod(0o755)
        try:
            work.rename(destination)  # complete or absent, never half-written
        except OSError:
            if missing_from(destination):  # else another run assembled it first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- finding --------------------------------------------------------------------------------------------------------

def missing_from(directory: Path) -> list[str]:
    """What a stacks directory lacks (nothing: it is complete)."""
    needed = [V1_2_0_ARCHIVE, V1_11_0_ARCHIVE, *(f"kfdefs/{name}" for name in KFDEF_FILES)]
    return [name for name in needed if not (directory / name).is_file()]


def configured_stacks_dir(env: Mapping[str, str] = os.environ, root: Path = ROOT) -> Path:
    """Where the tests look: ``$KFDEF_STACKS_DIR``, else ``../shared/stacks`` next to the checkout."""
    return Path(env.get("KFDEF_STACKS_DIR") or root.parent / "shared" / "stacks")


def cache_dir(env: Mapping[str, str]) -> Path:
    """The cache entry for these pins: a change of any pin makes a new one."""
    pins = [MANIFESTS_V1_2_0, MANIFESTS_V1_11_0, ARGO_WORKFLOWS_V3_7_3, JOBSET_V0_10_1, *KFDEFS.values()]
    key = hashlib.sha256(json.dumps([[p.url, p.sha256] for p in pins] + [ASSEMBLED_V1_11_0_SHA256]).encode())
    cache_root = Path(env.get("XDG_CACHE_HOME") or Path(env.get("HOME") or Path.home()) / ".cache")
    return cache_root / "kfdef-operator" / f"stacks-{key.hexdigest()[:12]}"


def ensure_stacks(env: Mapping[str, str] = os.environ, root: Path = ROOT) -> Path:
    """A complete stacks directory: the configured one, else the cache entry, fetched and assembled when absent."""
    configured = configured_stacks_dir(env, root)
    if not missing_from(configured):
        return configured
    if env.get("KFDEF_STACKS_DIR"):
        raise StacksError(f"KFDEF_STACKS_DIR={configured} lacks {', '.join(missing_from(configured))}")
    cached = cache_dir(env)
    if not missing_from(cached):
        return cached
    try:
        assemble(cached, env.get("KFDEF_STACKS_MIRROR", ""))
    except UpstreamUnreachable as error:
        mirror = env.get("KFDEF_STACKS_MIRROR")
        hosts = urllib.parse.urlsplit(mirror).netloc if mirror else ", ".join(UPSTREAM_HOSTS)
        raise StacksError(f"the Kubeflow release archives are not in {configured} and cannot be fetched ({error}): "
                          f"set KFDEF_STACKS_DIR to a directory holding them (or place them in {configured}), or "
                          f"allow the network to {hosts}") from error
    return cached


# -- command line ---------------------------------------------------------------------------------------------------

def register_stacks(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("stacks", help="find or fetch the Kubeflow release archives the tests run",
                                   description=__doc__.split("\n\n")[1])
    parser.add_argument("run", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="a command to run with KFDEF_STACKS_DIR set (default: print the directory)")
    parser.set_defaults(handler=run_stacks)


def run_stacks(args: argparse.Namespace) -> int:
    try:
        directory = ensure_stacks()
    except StacksError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    command = args.run[1:] if args.run[:1] == ["--"] else args.run
    if not command:
        print(directory)
        return 0
    os.execvpe(command[0], command, {**os.environ, "KFDEF_STACKS_DIR": str(directory)})
