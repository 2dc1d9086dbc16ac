"""Git sources: ``git+https://host/org/repo.git?ref=v1.2.0#sub/dir`` (also ``git+ssh``, ``git+http``, ``git+file``).

The repository is fetched into a bare mirror in the cache and the commit exported with ``git archive``, streamed
straight into the safe extractor (a small pack can hold a huge tree). gitpython's command layer (``git.cmd.Git``)
runs the git binary with the environment below; the fetch runs under supervision, in a process group of its own
(git's helpers too: remote-https, index-pack, ssh), with only the tail of its messages kept, and is killed at the
fetch's deadline and when the mirror grows by more than ``max_download_bytes``. Trust is the same as for tarballs:

- ``git+http`` needs ``KFDEF_ALLOW_INSECURE_HTTP``; git never follows an HTTP redirect
  (``http.followRedirects=false``): use the repository's final URL.
- The host's addresses are checked against the network policy and git connects to exactly those
  (``http.curloptResolve``). For ``ssh`` the check is made just before ssh resolves the name itself.
- ``git+file`` paths must be inside the operator's local source roots.
- ``GIT_ALLOW_PROTOCOL`` limits git to the URI's own transport, and git never prompts.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from kfdef_operator.api.kfdef import Repo, relative_path_problem
from kfdef_operator.source.archive import inside, safe_extract
from kfdef_operator.source.cache import CacheFull, SourceCache, disk_usage, remove_path
from kfdef_operator.source.deadline import Deadline
from kfdef_operator.source.errors import SourceError, redact_uri
from kfdef_operator.source.local import check_local_root
from kfdef_operator.source.network import AddressRefused, uses_proxy
from kfdef_operator.source.options import FetchOptions

if TYPE_CHECKING:
    from git.cmd import Git

_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
_POLL_SECONDS = 0.2
_DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22}
_MESSAGE_TAIL = 64 * 1024  # bytes of git's stderr kept: a server's messages neither block git nor fill memory
_MESSAGES_WAIT_SECONDS = 2.0  # for the end of stderr once git is done (a helper outside its session may hold it)


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


class _GitFailed(Exception):
    pass


def git_tree(repo: Repo, cache: SourceCache, options: FetchOptions, *, allowance: int,
             deadline: Deadline) -> tuple[Path, str]:
    """(tree, commit) of the repo's ref in the cache, fetching and exporting what is missing."""
    try:
        location = parse_git_uri(repo.uri)
    except ValueError as exc:
        raise SourceError(repo.name, repo.uri, str(exc)) from None
    commit = location.ref if _FULL_SHA.fullmatch(location.ref) else ""
    tree = _tree_entry(cache, location, commit)
    if not (commit and cache.claim(tree)):
        config, env = _transport(repo, location, options)
        mirror = cache.root / "git" / cache.key(location.url)
        with cache.lock(f"git-{mirror.name}"):
            try:
                with cache.reserve(options.max_download_bytes, timeout=deadline.remaining()):
                    _fetch(repo, mirror, location, config, env, options, deadline)
                commit = _resolve_ref(mirror, location.ref, deadline)
            except _GitFailed as exc:
                raise SourceError(repo.name, repo.uri, f"git fetch failed: {exc}; check the URL, credentials and "
                                                       "network", transient=True) from None
            except CacheFull as error:
                raise SourceError(repo.name, repo.uri, str(error), transient=True) from None
            if not commit:
                raise SourceError(repo.name, repo.uri, f"ref {location.ref!r} is neither a branch, a tag nor a "
                                                       "commit of the repository; fix ?ref= in the URI")
            tree = _tree_entry(cache, location, commit)
            if not cache.claim(tree):
                _export(repo, cache, options, mirror, commit, tree, allowance=allowance, deadline=deadline)
    path = tree / location.subdir if location.subdir else tree
    if not path.is_dir() or not inside(path.resolve(), tree.resolve()):
        raise SourceError(repo.name, repo.uri, f"subdirectory {location.subdir!r} does not exist at commit {commit}")
    return path, commit


def _tree_entry(cache: SourceCache, location: GitLocation, commit: str) -> Path:
    """The cached tree of ``commit`` as fetched from ``location.url``. The key holds the URL with its credentials
    (``user:token@``), so a KfDef naming a commit gets a tree already exported only when it names the same
    repository with the same credentials: a commit id alone never opens another KfDef's private tree."""
    return cache.root / "trees" / f"git-{cache.key(location.url)}-{commit}"


def _transport(repo: Repo, location: GitLocation, options: FetchOptions) -> tuple[list[str], dict[str, str]]:
    """git ``-c`` options, and the variables set on top of the operator's environment, for fetching ``location``,
    after the trust checks of its transport."""
    parts = urlsplit(location.url)
    scheme = parts.scheme.lower()
    config = ["-c", "http.followRedirects=false", "-c", "credential.interactive=false"]
    env = {"GIT_TERMINAL_PROMPT": "0", "GIT_ALLOW_PROTOCOL": scheme}
    if options.ca_bundle:  # the same trust for git+https as for tarball downloads
        env["GIT_SSL_CAINFO"] = options.ca_bundle
    if scheme == "http" and not options.allow_insecure_http:
        raise SourceError(repo.name, repo.uri, "plain git+http:// is refused (no integrity or privacy); use "
                                               "git+https:// or set KFDEF_ALLOW_INSECURE_HTTP=1 if you must")
    if scheme == "file":
        check_local_root(repo, Path(unquote(parts.path)), options)
        return config, env
    host, port = parts.hostname or "", parts.port or _DEFAULT_PORTS.get(scheme, 0)
    try:
        if scheme != "ssh" and uses_proxy(location.url):
            options.networks.vet_proxied(location.url, port)
            return config, env
        addresses = options.networks.resolve(host, port)
    except AddressRefused as refused:
        raise SourceError(repo.name, repo.uri, f"refused: {refused}") from None
    except OSError as exc:
        raise SourceError(repo.name, repo.uri, f"cannot resolve {host}: {exc}", transient=True) from None
    if scheme != "ssh":
        pinned = ",".join(f"[{a}]" if a.version == 6 else str(a) for a in addresses)
        config += ["-c", f"http.curloptResolve={host}:{port}:{pinned}"]
    return config, env


def _fetch(repo: Repo, mirror: Path, location: GitLocation, config: list[str], env: dict[str, str],
           options: FetchOptions, deadline: Deadline) -> None:
    """Fetch every branch and tag into the bare ``mirror``, within the deadline and the download limit."""
    command = _git_command()
    if not (mirror / "HEAD").exists():
        _run(command, ["init", "--bare", "--quiet", str(mirror)], env, deadline)
    before = disk_usage(mirror)
    with _Supervised(command, [*config, "--git-dir", str(mirror), "fetch", "--quiet", "--force", "--prune",
                               location.url, "+HEAD:refs/remotes/origin/HEAD", "+refs/heads/*:refs/remotes/origin/*",
                               "+refs/tags/*:refs/tags/*"], env, stdout=False) as fetch:
        while not fetch.done_within(min(_POLL_SECONDS, max(deadline.remaining(), 0.01))):
            problem = ""
            if deadline.expired:
                problem = f"not done within the {deadline.seconds:g} s deadline (KFDEF_FETCH_TIMEOUT)"
            elif disk_usage(mirror) - before > options.max_download_bytes:
                problem = (f"the repository is over the {options.max_download_bytes}-byte download limit; "
                           "use a tarball of the ref instead")
            if problem:
                fetch.kill()
                _drop_partial_packs(mirror)
                raise SourceError(repo.name, repo.uri, f"git fetch refused: {problem}",
                                  transient=deadline.expired) from None
        if fetch.wait() != 0:
            raise _GitFailed(fetch.messages())


def _drop_partial_packs(mirror: Path) -> None:
    pack_dir = mirror / "objects" / "pack"
    if pack_dir.is_dir():
        for leftover in pack_dir.glob("tmp_*"):
            remove_path(leftover)


def _resolve_ref(mirror: Path, ref: str, deadline: Deadline) -> str:
    candidates = [f"refs/tags/{ref}", f"refs/remotes/origin/{ref}", ref] if ref else ["refs/remotes/origin/HEAD"]
    command = _git_command()
    for candidate in candidates:
        try:
            return _run(command, ["--git-dir", str(mirror), "rev-parse", "--verify", "--quiet",
                                  f"{candidate}^{{commit}}"], {}, deadline).strip()
        except _GitFailed:
            continue
    return ""


def _export(repo: Repo, cache: SourceCache, options: FetchOptions, mirror: Path, commit: str, tree: Path, *,
            allowance: int, deadline: Deadline) -> None:
    try:
        with cache.reserve(allowance, timeout=deadline.remaining()):
            staged = cache.staging()
            try:
                with _Supervised(_git_command(), ["--git-dir", str(mirror), "archive", "--format=tar", commit], {},
                                 stdout=True) as archive:
                    deadline.on_expiry(archive.kill)
                    try:
                        safe_extract(archive.stdout, staged, options, repo=repo, max_bytes=allowance,
                                     deadline=deadline)
                    except BaseException:
                        archive.kill()
                        raise
                    finally:
                        archive.stdout.close()
                    exit_code = archive.wait()
                if exit_code != 0:
                    deadline.check()
                    raise SourceError(repo.name, repo.uri, f"git archive of commit {commit} failed (exit code "
                                                           f"{exit_code}: {archive.messages()}); the mirror may be "
                                                           "damaged", transient=True)
                cache.publish(staged, tree)
            finally:
                remove_path(staged)
    except CacheFull as error:
        raise SourceError(repo.name, repo.uri, str(error), transient=True) from None


def _git_command() -> Git:
    """gitpython's command layer, imported on first use: gitpython runs ``git version`` as it is imported and
    refuses to load without a git executable, which only git sources need."""
    try:
        from git.cmd import Git
    except ImportError as error:
        raise _GitFailed(f"git cannot be run ({' '.join(str(error).split())[:200]})") from None
    return Git()


def _run(command: Git, args: list[str], env: Mapping[str, str], deadline: Deadline) -> str:
    """The output of a short git command (init, rev-parse), killed when the deadline passes."""
    status, output, messages = command.execute([command.GIT_PYTHON_GIT_EXECUTABLE, *args], env=dict(env),
                                               with_extended_output=True, with_exceptions=False,
                                               kill_after_timeout=max(deadline.remaining(), 0.01))
    if status != 0:
        deadline.check()
        raise _GitFailed(" ".join(messages.split())[-500:] or f"git {args[0]} failed")
    return output


class _Supervised:
    """A git process started through gitpython (``Git.execute(as_process=True)``) in a session of its own, so that
    killing it ends the helpers git starts as well; its stderr is read on a thread that keeps the last
    ``_MESSAGE_TAIL`` bytes. Leaving the ``with`` block kills it if it still runs."""

    def __init__(self, command: Git, args: list[str], env: Mapping[str, str], *, stdout: bool) -> None:
        self._handle = command.execute([command.GIT_PYTHON_GIT_EXECUTABLE, *args], env=dict(env), as_process=True,
                                       with_stdout=stdout, start_new_session=True)
        assert self._handle.proc is not None  # set until the handle is terminated
        self._process: subprocess.Popen[bytes] = self._handle.proc
        self._tail = bytearray()
        self._reader = threading.Thread(target=self._keep_tail, args=(self._process.stderr,), daemon=True,
                                        name="git-messages")
        self._reader.start()

    @property
    def stdout(self) -> IO[bytes]:
        assert self._process.stdout is not None, "started with stdout=False"
        return self._process.stdout

    def _keep_tail(self, stream: IO[bytes]) -> None:
        try:
            for chunk in iter(lambda: stream.read(_MESSAGE_TAIL), b""):
                self._tail += chunk
                del self._tail[:-_MESSAGE_TAIL]
        except (OSError, ValueError):  # closed under it: gitpython's handle closes the pipes when it is collected
            pass

    def done_within(self, seconds: float) -> bool:
        try:
            self._process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL to git and every process of its session (safe to call again, or after it ended)."""
        if self._process.returncode is None:
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self) -> int:
        return self._process.wait()

    def messages(self) -> str:
        """The end of what git wrote to stderr, on one line."""
        self._reader.join(_MESSAGES_WAIT_SECONDS)
        return " ".join(self._tail.decode(errors="replace").split())[-500:]

    def __enter__(self) -> _Supervised:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
        self.wait()
        self._reader.join(_MESSAGES_WAIT_SECONDS)
