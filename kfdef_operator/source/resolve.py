"""Resolve a KfDef's ``repos[].uri`` into local directory trees through a content cache.

URI forms (see also ``docs/sources.md``):

``https://host/path.tar.gz``, ``http://...``
    A (gzip/bzip2/xz or plain) tar archive, fetched with ``requests``. ``http://`` is refused unless
    ``FetchOptions.allow_insecure_http`` (env ``KFDEF_ALLOW_INSECURE_HTTP=1``). Proxy variables
    (``HTTPS_PROXY``, ``NO_PROXY``...) are honoured; ``FetchOptions.ca_bundle`` (env ``KFDEF_CA_BUNDLE``)
    adds a CA bundle for TLS interception proxies and private servers.
``file:///abs/archive.tar.gz``, ``file:///abs/dir``, ``/abs/path``, ``relative/path``
    A local tar archive or directory. Relative paths are relative to ``FetchOptions.base_dir`` (the CLI
    uses the KfDef file's directory), else the current directory. Directories are used in place.
``git+https://host/org/repo.git?ref=v1.2.0#sub/dir`` (also ``git+ssh://``, ``git+http://``, ``git+file:///``)
    A git repository at ``ref`` (a tag, a branch or a commit; default: the remote's HEAD), fetched with
    gitpython into a bare mirror and exported with ``git archive``. The optional fragment selects a
    subdirectory, which becomes the repo's root.

An archive whose entries all sit under a single top-level directory resolves to that directory, as kfctl
did (GitHub's ``archive/<ref>.tar.gz`` has ``manifests-<ref>/``).

Revisions: ``sha256:<hex>`` of an archive, the git commit sha, or ``dir-sha256:<hex>`` of a directory's
content (paths, modes, bytes).

Cache layout under ``SourceCache.root``: ``archives/sha256-<hex>`` (downloaded bodies), ``http/<key>.json``
(ETag/Last-Modified of a URI, for conditional GETs), ``trees/<key>/`` (unpacked archives and git exports,
keyed by digest or commit), ``git/<key>/`` (bare mirrors), ``locks/`` and ``tmp/``. Everything is built
in ``tmp/`` and renamed into place, and each URI is fetched under a file lock, so concurrent reconciles
share the cache safely. An unchanged source is neither downloaded (304 Not Modified) nor unpacked again.

Extraction is defensive: absolute paths, ``..``, links leaving the tree, device and fifo entries are
refused, as are archives over ``max_files`` entries, ``max_unpacked_bytes`` in total or an entry over
``max_file_bytes`` (decompression bombs). Error messages never contain URI credentials.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import posixpath
import re
import shutil
import stat
import tarfile
import tempfile
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Iterator, Mapping, Sequence
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import requests

from kfdef_operator.api.kfdef import Repo, relative_path_problem

log = logging.getLogger(__name__)

_MiB = 1024 * 1024
_CHUNK = 1024 * 1024
_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class FetchOptions:
    """Network, trust and safety settings for resolving sources."""

    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    retries: int = 3  #: further attempts after the first, on connection errors and HTTP 5xx
    backoff_seconds: float = 1.0  #: first retry delay; doubles each time
    max_download_bytes: int = 512 * _MiB
    max_unpacked_bytes: int = 2048 * _MiB
    max_files: int = 100_000
    max_file_bytes: int = 256 * _MiB
    ca_bundle: str | None = None
    allow_insecure_http: bool = False
    git_timeout: float = 600.0
    base_dir: Path | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> "FetchOptions":
        """Defaults, then ``KFDEF_CA_BUNDLE`` / ``KFDEF_ALLOW_INSECURE_HTTP`` / ``KFDEF_FETCH_READ_TIMEOUT``
        (seconds), then ``overrides``."""
        env = os.environ if environ is None else environ
        options = cls(ca_bundle=env.get("KFDEF_CA_BUNDLE") or None,
                      allow_insecure_http=env.get("KFDEF_ALLOW_INSECURE_HTTP", "").lower() in ("1", "true", "yes"))
        if env.get("KFDEF_FETCH_READ_TIMEOUT"):
            options = replace(options, read_timeout=float(env["KFDEF_FETCH_READ_TIMEOUT"]))
        return replace(options, **overrides)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ResolvedSource:
    """A repo as a local tree. ``uri`` is credential-free (safe for logs and status)."""

    name: str
    uri: str
    local_path: Path
    revision: str


class SourceError(RuntimeError):
    """A repo could not be resolved. ``transient`` errors (network, 5xx) are worth retrying later."""

    def __init__(self, repo: str, uri: str, message: str, *, transient: bool = False):
        self.repo = repo
        self.uri = redact_uri(uri)
        self.message = scrub(message, uri)
        self.transient = transient
        super().__init__(f"repo {repo!r} ({self.uri}): {self.message}")


def redact_uri(uri: str) -> str:
    """``uri`` without user info and with query values other than ``ref`` masked."""
    parts = urlsplit(uri)
    if not parts.scheme:
        return uri
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = "&".join(f"{k}={v if k == 'ref' else '***'}" for k, v in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def scrub(text: str, uri: str) -> str:
    """``text`` (e.g. a library's error) with the credentials of ``uri`` masked."""
    parts = urlsplit(uri)
    secrets = []
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        secrets += [userinfo, unquote(userinfo)] + [unquote(s) for s in userinfo.split(":")]
    secrets += [v for k, v in parse_qsl(parts.query) if k != "ref"] + [parts.query]
    for secret in sorted({s for s in secrets if len(s) >= 3}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


class SourceCache:
    """The on-disk content cache (layout in the module docstring). Safe for concurrent use."""

    def __init__(self, root: Path):
        self.root = Path(root)
        for sub in ("archives", "http", "trees", "git", "locks", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        with open(self.root / "locks" / f"{name}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def staging(self) -> Path:
        return Path(tempfile.mkdtemp(dir=self.root / "tmp"))

    def publish(self, staged: Path, final: Path) -> Path:
        """Rename ``staged`` to ``final``; if another writer won the race, keep theirs (same content)."""
        try:
            os.rename(staged, final)
        except OSError:
            if not final.exists():
                raise
            _remove(staged)
        return final


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def resolve_sources(repos: Sequence[Repo], cache: SourceCache, options: FetchOptions) -> dict[str, ResolvedSource]:
    """Resolve every repo; raise ``SourceError`` for the first that fails."""
    return {repo.name: resolve_source(repo, cache, options) for repo in repos}


def resolve_source(repo: Repo, cache: SourceCache, options: FetchOptions) -> ResolvedSource:
    scheme = urlsplit(repo.uri).scheme.lower()
    started = time.monotonic()
    if scheme in ("http", "https"):
        archive, digest = _download(repo, cache, options)
        path, revision = _unpacked(repo, cache, options, archive, digest)
    elif scheme.startswith("git+"):
        path, revision = _git_tree(repo, cache, options)
    else:
        path, revision = _local(repo, cache, options)
    log.info("resolved repo %s (%s) at %s in %.2fs", repo.name, redact_uri(repo.uri), revision,
             time.monotonic() - started)
    return ResolvedSource(repo.name, redact_uri(repo.uri), path, revision)


# --- local paths ------------------------------------------------------------------------------------------

def _local(repo: Repo, cache: SourceCache, options: FetchOptions) -> tuple[Path, str]:
    parts = urlsplit(repo.uri)
    if parts.scheme.lower() == "file":
        if parts.netloc not in ("", "localhost"):
            raise SourceError(repo.name, repo.uri, f"file: URI names host {parts.netloc!r}; use file:///path")
        raw = unquote(parts.path)
    else:
        raw = repo.uri
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = (options.base_dir or Path.cwd()) / path
    if path.is_dir():
        return path, "dir-sha256:" + _directory_digest(repo, path)
    if path.is_file():
        digest = _file_digest(path)
        return _unpacked(repo, cache, options, path, digest)
    raise SourceError(repo.name, repo.uri, f"{path} does not exist; check spec.repos[].uri (relative paths are "
                                           f"relative to {options.base_dir or Path.cwd()})")


def _file_digest(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as stream:
        for chunk in iter(lambda: stream.read(_CHUNK), b""):
            hasher.update(chunk)
    return hasher.hexdigest()


def _directory_digest(repo: Repo, root: Path) -> str:
    """Digest of paths, executable bits, file bytes and link targets; refuses links leaving ``root``."""
    hasher = hashlib.sha256()
    real_root = root.resolve()
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            path = Path(directory, name)
            relative = path.relative_to(root).as_posix()
            if path.is_symlink():
                if not _inside(path.resolve(), real_root):
                    raise SourceError(repo.name, repo.uri, f"symlink {relative} points outside the directory")
                hasher.update(f"L {relative} {os.readlink(path)}\n".encode())
                continue
            executable = os.stat(path).st_mode & stat.S_IXUSR
            hasher.update(f"F {relative} {1 if executable else 0} {_file_digest(path)}\n".encode())
    return hasher.hexdigest()


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


# --- http(s) ----------------------------------------------------------------------------------------------

def _download(repo: Repo, cache: SourceCache, options: FetchOptions) -> tuple[Path, str]:
    """Fetch the archive at ``repo.uri`` (or confirm the cached one with a conditional GET)."""
    if urlsplit(repo.uri).scheme.lower() == "http" and not options.allow_insecure_http:
        raise SourceError(repo.name, repo.uri, "plain http:// is refused (no integrity or privacy); use https:// "
                                               "or set KFDEF_ALLOW_INSECURE_HTTP=1 if you must")
    key = cache.key(repo.uri)
    meta_path = cache.root / "http" / f"{key}.json"
    with cache.lock(f"http-{key}"), requests.Session() as session:
        session.trust_env = True  # proxies, NO_PROXY and netrc from the environment
        meta = _read_meta(meta_path, cache)
        headers = {}
        if meta.get("etag"):
            headers["If-None-Match"] = meta["etag"]
        if meta.get("last_modified"):
            headers["If-Modified-Since"] = meta["last_modified"]
        last_error = ""
        for attempt in range(options.retries + 1):
            if attempt:
                time.sleep(options.backoff_seconds * 2 ** (attempt - 1))
            try:
                fetched = _get_once(repo, session, headers, cache, options)
            except _Retryable as exc:
                last_error = str(exc)
                log.warning("repo %s: attempt %d/%d failed: %s", repo.name, attempt + 1, options.retries + 1,
                            scrub(last_error, repo.uri))
                continue
            if fetched is None:  # 304 Not Modified
                return cache.root / "archives" / f"sha256-{meta['digest']}", meta["digest"]
            digest, etag, last_modified = fetched
            _write_meta(meta_path, cache, {"digest": digest, "etag": etag, "last_modified": last_modified})
            return cache.root / "archives" / f"sha256-{digest}", digest
    raise SourceError(repo.name, repo.uri, f"download failed after {options.retries + 1} attempts: {last_error}; "
                                           "check the server, proxy settings (HTTPS_PROXY/NO_PROXY) and "
                                           "network policy", transient=True)


class _Retryable(Exception):
    pass


def _get_once(repo: Repo, session: requests.Session, headers: dict[str, str], cache: SourceCache,
              options: FetchOptions) -> tuple[str, str, str] | None:
    """One GET: None for 304, else (digest, etag, last_modified) of the stored body."""
    try:
        response = session.get(repo.uri, headers=headers, stream=True, verify=options.ca_bundle or True,
                               timeout=(options.connect_timeout, options.read_timeout))
    except requests.exceptions.SSLError as exc:
        raise SourceError(repo.name, repo.uri, f"TLS verification failed ({exc}); if a proxy or private CA "
                                               "signs this server, set KFDEF_CA_BUNDLE") from None
    except (requests.ConnectionError, requests.Timeout) as exc:
        raise _Retryable(f"{type(exc).__name__}: {exc}") from None
    with response:
        if response.status_code == 304 and headers:
            return None
        if response.status_code >= 500:
            raise _Retryable(f"HTTP {response.status_code} {response.reason}")
        if response.status_code != 200:
            raise SourceError(repo.name, repo.uri, f"HTTP {response.status_code} {response.reason}; check that the "
                                                   "URI exists and is readable without a login")
        declared = int(response.headers.get("Content-Length") or 0)
        if declared > options.max_download_bytes:
            raise SourceError(repo.name, repo.uri, f"archive is {declared} bytes, over the {options.max_download_bytes}"
                                                   "-byte download limit")
        staged = cache.staging() / "body"
        try:
            digest = _stream_body(repo, response, staged, options)
            if declared and staged.stat().st_size != declared:
                raise _Retryable(f"body was {staged.stat().st_size} bytes, Content-Length said {declared}")
            cache.publish(staged, cache.root / "archives" / f"sha256-{digest}")
        finally:
            _remove(staged.parent)
        return digest, response.headers.get("ETag", ""), response.headers.get("Last-Modified", "")


def _stream_body(repo: Repo, response: requests.Response, target: Path, options: FetchOptions) -> str:
    hasher = hashlib.sha256()
    size = 0
    try:
        with open(target, "wb") as out:
            for chunk in response.iter_content(_CHUNK):
                size += len(chunk)
                if size > options.max_download_bytes:
                    raise SourceError(repo.name, repo.uri, f"archive exceeds the {options.max_download_bytes}-byte "
                                                           "download limit")
                hasher.update(chunk)
                out.write(chunk)
    except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
        raise _Retryable(f"download interrupted: {type(exc).__name__}: {exc}") from None
    return hasher.hexdigest()


def _read_meta(path: Path, cache: SourceCache) -> dict[str, str]:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not (cache.root / "archives" / f"sha256-{meta.get('digest')}").is_file():
        return {}  # the body is gone: fetch unconditionally
    return meta


def _write_meta(path: Path, cache: SourceCache, meta: dict[str, str]) -> None:
    staged = cache.staging()
    (staged / "meta.json").write_text(json.dumps(meta))
    os.replace(staged / "meta.json", path)
    _remove(staged)


# --- archives ---------------------------------------------------------------------------------------------

def _unpacked(repo: Repo, cache: SourceCache, options: FetchOptions, archive: Path, digest: str) -> tuple[Path, str]:
    tree = cache.root / "trees" / f"sha256-{digest}"
    if not tree.is_dir():
        staged = cache.staging()
        try:
            with open(archive, "rb") as stream:
                safe_extract(stream, staged, options, repo=repo)
            cache.publish(staged, tree)
        finally:
            _remove(staged)
    return _single_top_level(tree), f"sha256:{digest}"


def _single_top_level(tree: Path) -> Path:
    entries = list(tree.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return tree


def safe_extract(stream: IO[bytes], dest: Path, options: FetchOptions, *, repo: Repo) -> None:
    """Extract the tar archive in ``stream`` into the existing directory ``dest``, refusing anything unsafe."""
    def refuse(reason: str) -> SourceError:
        return SourceError(repo.name, repo.uri, f"unsafe archive refused: {reason}")

    root = dest.resolve()
    total = count = 0
    links: list[Path] = []
    try:
        # Random-access mode: gzip then raises EOFError on truncated data, where stream mode ("r|*")
        # silently stops at a damaged header.
        with tarfile.open(fileobj=stream, mode="r:*") as archive:
            for member in archive:
                count += 1
                if count > options.max_files:
                    raise refuse(f"more than {options.max_files} entries")
                name = _member_path(member.name)
                if name is None:
                    raise refuse(f"entry {member.name!r} is absolute or leaves the archive (..)")
                if name == ".":
                    continue
                target = root / name
                if not _inside(target.parent.resolve(), root):
                    raise refuse(f"entry {member.name!r} is written through a link leaving the archive")
                if target.is_symlink():  # a later entry replaces a link; never write through it
                    target.unlink()
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    if member.size > options.max_file_bytes:
                        raise refuse(f"entry {member.name!r} is {member.size} bytes, over the "
                                     f"{options.max_file_bytes}-byte limit per file")
                    total += member.size
                    if total > options.max_unpacked_bytes:
                        raise refuse(f"unpacks to more than {options.max_unpacked_bytes} bytes")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    source = archive.extractfile(member)
                    assert source is not None
                    with open(target, "wb") as out:
                        shutil.copyfileobj(source, out, _CHUNK)
                        if out.tell() != member.size:
                            raise EOFError(f"entry {member.name!r} is truncated")
                    os.chmod(target, 0o755 if member.mode & 0o111 else 0o644)
                elif member.issym():
                    linked = posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname))
                    if member.linkname.startswith("/") or linked == ".." or linked.startswith("../"):
                        raise refuse(f"symlink {member.name!r} -> {member.linkname!r} points outside the archive")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(member.linkname, target)
                    links.append(target)
                elif member.islnk():
                    linked_name = _member_path(member.linkname)
                    source_path = root / linked_name if linked_name not in (None, ".") else None
                    if source_path is None or not _inside(source_path.resolve(), root) or not source_path.is_file():
                        raise refuse(f"hard link {member.name!r} -> {member.linkname!r} does not name a file "
                                     "inside the archive")
                    total += source_path.stat().st_size
                    if total > options.max_unpacked_bytes:
                        raise refuse(f"unpacks to more than {options.max_unpacked_bytes} bytes")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source_path, target)
                else:
                    raise refuse(f"entry {member.name!r} is a device, fifo or other special file")
    except SourceError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise SourceError(repo.name, repo.uri, f"archive is damaged or not a tar archive ({exc}); if it was "
                                               "downloaded, the server may have sent an error page") from None
    for link in links:  # chains of individually harmless links can still leave the tree
        if not _inside(link.resolve(), root):
            raise refuse(f"symlink {link.relative_to(root)} resolves outside the archive")


def _member_path(name: str) -> str | None:
    """The archive member's normalised relative path, or None if absolute or leaving the archive."""
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return None
    normal = posixpath.normpath(name)
    if normal == ".." or normal.startswith("../"):
        return None
    return normal


# --- git --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GitLocation:
    """A parsed ``git+<scheme>://...?ref=<ref>#<subdir>`` URI."""

    url: str
    ref: str
    subdir: str


def parse_git_uri(uri: str) -> GitLocation:
    parts = urlsplit(uri)
    if not parts.scheme.lower().startswith("git+"):
        raise ValueError(f"not a git+ URI: {redact_uri(uri)}")
    ref = dict(parse_qsl(parts.query)).get("ref", "")
    subdir = parts.fragment.strip("/")
    problem = relative_path_problem(subdir) if subdir else None
    if problem:
        raise ValueError(f"subdirectory {problem}")
    url = urlunsplit((parts.scheme[4:], parts.netloc, parts.path, "", ""))
    return GitLocation(url, ref, subdir)


def _git_tree(repo: Repo, cache: SourceCache, options: FetchOptions) -> tuple[Path, str]:
    import git  # gitpython; imported here so the operator starts without git unless a git repo is used

    try:
        location = parse_git_uri(repo.uri)
    except ValueError as exc:
        raise SourceError(repo.name, repo.uri, str(exc)) from None
    commit = location.ref if _FULL_SHA.match(location.ref) else ""
    if not (commit and (cache.root / "trees" / f"git-{commit}").is_dir()):
        key = cache.key(location.url)
        with cache.lock(f"git-{key}"):
            try:
                mirror = _fetched_mirror(git, cache.root / "git" / key, location, options)
                commit = _resolve_ref(git, mirror, location.ref)
            except git.GitCommandError as exc:
                raise SourceError(repo.name, repo.uri, f"git fetch failed: {_git_stderr(exc)}; check the URL, "
                                                       "credentials and network", transient=True) from None
            if not commit:
                raise SourceError(repo.name, repo.uri, f"ref {location.ref!r} is neither a branch, a tag nor a "
                                                       "commit of the repository; fix ?ref= in the URI")
            _export(repo, cache, options, mirror, commit)
    tree = cache.root / "trees" / f"git-{commit}"
    path = tree / location.subdir if location.subdir else tree
    if not path.is_dir() or not _inside(path.resolve(), tree.resolve()):
        raise SourceError(repo.name, repo.uri, f"subdirectory {location.subdir!r} does not exist at commit {commit}")
    return path, commit


def _fetched_mirror(git, directory: Path, location: GitLocation, options: FetchOptions):  # type: ignore[no-untyped-def]
    mirror = git.Repo(directory) if (directory / "HEAD").exists() else git.Repo.init(directory, bare=True)
    mirror.git.update_environment(GIT_TERMINAL_PROMPT="0")
    if options.ca_bundle:  # the same trust for git+https as for tarball downloads
        mirror.git.update_environment(GIT_SSL_CAINFO=options.ca_bundle)
    mirror.git.fetch(location.url, "--force", "--prune", "+HEAD:refs/remotes/origin/HEAD",
                     "+refs/heads/*:refs/remotes/origin/*", "+refs/tags/*:refs/tags/*",
                     kill_after_timeout=options.git_timeout)
    return mirror


def _resolve_ref(git, mirror, ref: str) -> str:  # type: ignore[no-untyped-def]
    candidates = [f"refs/tags/{ref}", f"refs/remotes/origin/{ref}", ref] if ref else ["refs/remotes/origin/HEAD"]
    for candidate in candidates:
        try:
            return str(mirror.git.rev_parse("--verify", "--quiet", f"{candidate}^{{commit}}"))
        except git.GitCommandError:
            continue
    return ""


def _export(repo: Repo, cache: SourceCache, options: FetchOptions, mirror, commit: str) -> None:  # type: ignore[no-untyped-def]
    tree = cache.root / "trees" / f"git-{commit}"
    if tree.is_dir():
        return
    staged = cache.staging()
    try:
        with open(staged / "export.tar", "wb") as out:
            mirror.archive(out, treeish=commit, format="tar")
        (staged / "tree").mkdir()
        with open(staged / "export.tar", "rb") as stream:
            safe_extract(stream, staged / "tree", options, repo=repo)
        cache.publish(staged / "tree", tree)
    finally:
        _remove(staged)


def _git_stderr(exc: Exception) -> str:
    stderr = getattr(exc, "stderr", "") or str(exc)
    return " ".join(str(stderr).split())[-500:]
