"""Resolve a KfDef's ``repos[].uri`` into local directory trees through the source cache.

URI forms (see also ``docs/sources.md``):

``https://host/path.tar.gz``, ``http://...``
    A (gzip/bzip2/xz or plain) tar archive (:mod:`.http`). ``http://`` is refused unless
    ``FetchOptions.allow_insecure_http``.
``file:///abs/archive.tar.gz``, ``file:///abs/dir``, ``/abs/path``, ``relative/path``
    A local tar archive or directory (:mod:`.local`), only inside ``FetchOptions.local_roots``. Relative paths
    are relative to ``FetchOptions.base_dir`` (the CLI uses the KfDef file's directory). Directories are used
    in place.
``git+https://host/org/repo.git?ref=v1.2.0#sub/dir`` (also ``git+ssh://``, ``git+http://``, ``git+file:///``)
    A git repository at ``ref`` (:mod:`.git`); the fragment selects the subdirectory that becomes the root.

Revisions: ``sha256:<hex>`` of an archive, the git commit sha, or ``dir-sha256:<hex>`` of a directory's
content (paths, modes, bytes).

Each repo is resolved within ``FetchOptions.timeout`` seconds in all (:class:`.deadline.Deadline`), and a
KfDef's fetched sources together unpack to at most ``FetchOptions.max_unpacked_bytes``. Error messages never
contain URI credentials.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from kfdef_operator.api.kfdef import Repo
from kfdef_operator.source.archive import unpacked
from kfdef_operator.source.cache import SourceCache, disk_usage
from kfdef_operator.source.deadline import Deadline, DeadlineExceeded, stopping
from kfdef_operator.source.errors import SourceError, redact_uri
from kfdef_operator.source.git import git_tree, parse_git_uri
from kfdef_operator.source.http import download
from kfdef_operator.source.interrupt import Interrupt
from kfdef_operator.source.local import file_digest, local_source
from kfdef_operator.source.options import FetchOptions
from kfdef_operator.source.resolved import ResolvedSource

log = logging.getLogger(__name__)


def resolve_sources(repos: Sequence[Repo], cache: SourceCache, options: FetchOptions, *,
                    user: str | None = None, interrupt: Interrupt | None = None) -> dict[str, ResolvedSource]:
    """Resolve every repo; raise ``SourceError`` for the first that fails.

    With ``user`` (the KfDef, ``namespace/name``), the cache entries its sources now use are recorded as that
    KfDef's (:meth:`SourceCache.record_use`), so the cache's collector keeps them while it lives. ``interrupt``
    ends the fetch in progress at once, as its deadline would.
    """
    resolved: dict[str, ResolvedSource] = {}
    entries: set[Path] = set()
    counted: set[Path] = set()
    unpacked_bytes = 0
    for repo in repos:
        source, used = _resolve(repo, cache, options, allowance=options.max_unpacked_bytes - unpacked_bytes,
                                interrupt=interrupt)
        resolved[repo.name] = source
        entries |= used
        tree = cache.entry_of(source.local_path)
        if tree is not None and tree not in counted:  # two repos may share a tree
            counted.add(tree)
            unpacked_bytes += disk_usage(tree)
            if unpacked_bytes > options.max_unpacked_bytes:
                raise SourceError(repo.name, repo.uri, f"the KfDef's sources take more than "
                                                       f"{options.max_unpacked_bytes} bytes on disk in total; use "
                                                       "fewer or smaller repos")
    if user is not None:
        cache.record_use(user, entries)
    return resolved


def resolve_source(repo: Repo, cache: SourceCache, options: FetchOptions) -> ResolvedSource:
    """One repo, on its own (the whole ``max_unpacked_bytes`` allowance)."""
    return _resolve(repo, cache, options, allowance=options.max_unpacked_bytes)[0]


def _resolve(repo: Repo, cache: SourceCache, options: FetchOptions, *, allowance: int,
             interrupt: Interrupt | None = None) -> tuple[ResolvedSource, set[Path]]:
    """The resolved repo and the cache entries it uses."""
    scheme = urlsplit(repo.uri).scheme.lower()
    started = time.monotonic()
    used: set[Path] = set()
    try:
        with Deadline(options.timeout, interrupt=interrupt) as deadline:
            if scheme in ("http", "https"):
                archive, digest = download(repo, cache, options, deadline)
                path, revision = unpacked(repo, cache, options, archive, digest, allowance=allowance,
                                          deadline=deadline)
                used |= {archive, cache.root / "http" / f"{cache.key(repo.uri)}.json"}
            elif scheme.startswith("git+"):
                path, revision = git_tree(repo, cache, options, allowance=allowance, deadline=deadline)
                used.add(cache.root / "git" / cache.key(parse_git_uri(repo.uri).url))
            else:
                path, local_revision = local_source(repo, options, deadline)
                if local_revision is None:  # a tarball
                    path, revision = unpacked(repo, cache, options, path, file_digest(repo, path, deadline),
                                              allowance=allowance, deadline=deadline)
                else:
                    revision = local_revision
    except DeadlineExceeded:
        if interrupt is not None and interrupt.reason is not None:
            raise SourceError(repo.name, repo.uri, f"interrupted: {interrupt.reason}", transient=True) from None
        if stopping():
            raise SourceError(repo.name, repo.uri, "interrupted: the operator is stopping", transient=True) from None
        raise SourceError(repo.name, repo.uri, f"not fetched within the {options.timeout:g} s deadline "
                                               "(KFDEF_FETCH_TIMEOUT): the server is too slow or stalls, or the "
                                               "source is too large", transient=True) from None
    tree = cache.entry_of(path)
    if tree is not None:
        used.add(tree)
    log.info("resolved repo %s (%s) at %s in %.2fs", repo.name, redact_uri(repo.uri), revision,
             time.monotonic() - started)
    return ResolvedSource(repo.name, redact_uri(repo.uri), path, revision), used
