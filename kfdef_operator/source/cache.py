"""The on-disk source cache: layout, locking, disk accounting and garbage collection.

Layout under ``SourceCache.root``: ``archives/sha256-<hex>`` (downloaded bodies), ``http/<key>.json``
(ETag/Last-Modified of a URI, for conditional GETs), ``trees/<key>/`` (unpacked archives and git exports,
keyed by digest or commit), ``git/<key>/`` (bare mirrors), ``locks/`` and ``tmp/`` (staging). Everything is
built in ``tmp/`` and renamed into place, and each URI is fetched under a file lock, so concurrent reconciles
share the cache safely.

Bounded disk. Each entry's modification time is its last use (touched whenever a resolve uses it). Entries the
sources of a live KfDef use (:meth:`SourceCache.record_use`) are never removed; the others are removed by
:meth:`SourceCache.collect` once unused for ``CacheLimits.ttl``, and sooner, least recently used first, when the
cache is over ``CacheLimits.max_size``. A fetch that needs new space first reserves its worst case
(:meth:`SourceCache.reserve`): it waits while other fetches hold the space and fails with :class:`CacheFull` when
the entries in use leave no room, so concurrent fetches never take the cache past its size.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kfdef_operator.source.gc import CacheEntry, select_removals
from kfdef_operator.source.options import CacheLimits, MiB

log = logging.getLogger(__name__)

SUBDIRS = ("archives", "http", "trees", "git", "locks", "tmp")
_COLLECTED = ("archives", "http", "trees", "git", "tmp")  # locks go with the entry they guard


class CacheFull(Exception):
    """The cache cannot make room for a fetch: the entries live KfDefs use fill it."""


@dataclass(frozen=True)
class Collection:
    """What one :meth:`SourceCache.collect` did."""

    removed: int
    freed_bytes: int
    used_bytes: int


def disk_usage(path: Path) -> int:
    """Bytes ``path`` occupies on disk (allocated blocks, as ``du`` and the kubelet count), links not followed."""
    try:
        stat = path.lstat()
    except FileNotFoundError:
        return 0
    total = stat.st_blocks * 512
    if path.is_dir() and not path.is_symlink():
        for directory, dirs, files in os.walk(path):
            for name in dirs + files:
                try:
                    total += os.lstat(os.path.join(directory, name)).st_blocks * 512
                except FileNotFoundError:
                    pass
    return total


def _newest_mtime(path: Path) -> float:
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for directory, dirs, files in os.walk(path):
            for name in dirs + files:
                with contextlib.suppress(FileNotFoundError):
                    newest = max(newest, os.lstat(os.path.join(directory, name)).st_mtime)
    return newest


def remove_path(path: Path) -> None:
    """Remove a file, link or directory tree; nothing if it is gone."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class SourceCache:
    """The on-disk content cache (layout in the module docstring). Safe for concurrent use.

    Without ``limits`` (the CLI) nothing is ever removed; with them (the operator) the cache stays within
    ``limits.max_size``.
    """

    def __init__(self, root: Path, limits: CacheLimits | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self.limits = limits
        self._clock = clock
        for sub in SUBDIRS:
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._in_use: dict[str, frozenset[Path]] = {}
        self._space = threading.Condition()
        self._reserved = 0

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    # -- locking -----------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, name: str, *, shared: bool = False) -> Iterator[None]:
        """Hold ``locks/<name>.lock``. The file may be removed by the collector (while holding the lock); a
        holder that locked a removed file retries on the new one, so two holders never overlap."""
        path = self.root / "locks" / f"{name}.lock"
        while True:
            handle = open(path, "a")
            try:
                fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
                try:
                    current = os.stat(path).st_ino
                except FileNotFoundError:
                    current = None
                if current == os.fstat(handle.fileno()).st_ino:
                    try:
                        yield
                    finally:
                        fcntl.flock(handle, fcntl.LOCK_UN)
                    return
            finally:
                handle.close()

    # -- building entries --------------------------------------------------------------------------------

    def staging(self) -> Path:
        return Path(tempfile.mkdtemp(dir=self.root / "tmp"))

    def claim(self, entry: Path) -> bool:
        """True if ``entry`` exists, marked as just used so the collector keeps it; False if it must be built."""
        with self.lock("collector", shared=True):
            try:
                os.utime(entry)
            except FileNotFoundError:
                return False
            return True

    def publish(self, staged: Path, final: Path) -> Path:
        """Rename ``staged`` to ``final``; if another writer won the race, keep theirs (same content)."""
        with self.lock("collector", shared=True):
            try:
                os.rename(staged, final)
            except OSError:
                if not final.exists():
                    raise
                remove_path(staged)
            os.utime(final)
        return final

    # -- accounting --------------------------------------------------------------------------------------

    def entry_of(self, path: Path) -> Path | None:
        """The top-level cache entry (``trees/<key>``, ...) holding ``path``, or None if outside the cache."""
        try:
            parts = Path(path).relative_to(self.root).parts
        except ValueError:
            return None
        return self.root / parts[0] / parts[1] if len(parts) >= 2 and parts[0] in _COLLECTED else None

    def record_use(self, user: str, entries: Iterable[Path]) -> None:
        """``user`` (a KfDef, ``namespace/name``) now uses exactly ``entries``; they are kept until released."""
        self._in_use[user] = frozenset(entries)

    def release(self, user: str) -> None:
        """``user`` is gone: what only it used may be collected (after ``limits.ttl``, or sooner under pressure)."""
        self._in_use.pop(user, None)

    def in_use(self) -> frozenset[Path]:
        return frozenset(p for entries in list(self._in_use.values()) for p in entries)

    def entries(self) -> list[CacheEntry]:
        found = []
        for sub in _COLLECTED:
            for path in (self.root / sub).iterdir():
                with contextlib.suppress(FileNotFoundError):
                    last_used = _newest_mtime(path) if sub == "tmp" else path.lstat().st_mtime
                    found.append(CacheEntry(path, disk_usage(path), last_used))
        return found

    @contextlib.contextmanager
    def reserve(self, nbytes: int, *, timeout: float) -> Iterator[None]:
        """Hold ``nbytes`` of the cache's size for a fetch that may write that much.

        Waits up to ``timeout`` seconds while other fetches hold the space, collecting unused entries first;
        raises :class:`CacheFull` when the entries in use leave no room, or when the wait ran out.
        """
        if self.limits is None:
            yield
            return
        limit = self.limits.max_size
        deadline = time.monotonic() + timeout
        with self._space:
            while True:
                used = sum(e.size for e in self.entries())
                if used + self._reserved + nbytes > limit:
                    used = self.collect(need=self._reserved + nbytes).used_bytes
                if used + self._reserved + nbytes <= limit:
                    break
                if used + nbytes > limit or not self._space.wait(max(0.0, deadline - time.monotonic())):
                    raise CacheFull(f"the source cache is full: {used // MiB} MiB of {limit // MiB} MiB are used by "
                                    f"the sources of {len(self._in_use)} KfDef(s) and {self._reserved // MiB} MiB "
                                    f"are held by fetches in progress, and this fetch may need {nbytes // MiB} MiB; "
                                    "it is retried, or raise KFDEF_SOURCE_CACHE_MAX_SIZE (and the cache volume)")
            self._reserved += nbytes
        try:
            yield
        finally:
            with self._space:
                self._reserved -= nbytes
                self._space.notify_all()

    # -- collection --------------------------------------------------------------------------------------

    def collect(self, keep: Iterable[Path] = (), *, need: int = 0) -> Collection:
        """Remove entries no live KfDef uses (nor ``keep``): those unused for ``limits.ttl``, then, least
        recently used first, as many as it takes to fit ``limits.max_size`` with ``need`` bytes to spare.

        Entries used within ``limits.grace`` are never removed; without ``limits`` nothing is.
        """
        if self.limits is None:
            return Collection(0, 0, sum(e.size for e in self.entries()))
        with self.lock("collector"):
            entries = self.entries()
            chosen = select_removals(entries, keep=self.in_use() | set(keep), now=self._clock(),
                                     limits=self.limits, need=need)
            chosen = [entry for entry in chosen if self._remove(entry.path)]
            # conditional-GET metadata of an archive no longer here is useless
            archives = {p.name for p in (self.root / "archives").iterdir()}
            for meta in (self.root / "http").iterdir():
                if _meta_digest(meta) not in archives:
                    self._remove(meta)
        freed = sum(e.size for e in chosen)
        used = sum(e.size for e in entries) - freed
        if chosen:
            log.info("source cache: removed %d unused entries (%d MiB); %d MiB of %d MiB in use", len(chosen),
                     freed // MiB, used // MiB, self.limits.max_size // MiB)
        return Collection(len(chosen), freed, used)

    def _remove(self, path: Path) -> bool:
        """Remove one entry; False (and kept) while a fetch of its URI holds the URI's lock."""
        name = {"http": f"http-{path.stem}", "git": f"git-{path.name}"}.get(path.parent.name)
        if name is None:
            remove_path(path)
            return True
        lock = self.root / "locks" / f"{name}.lock"
        with open(lock, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # waiting could deadlock: that fetch may be waiting for this collection
            remove_path(path)
            lock.unlink(missing_ok=True)  # waiters on the old file notice and lock the new one (see lock())
        return True


def _meta_digest(meta: Path) -> str:
    try:
        return "sha256-" + str(json.loads(meta.read_text()).get("digest"))
    except (OSError, ValueError, AttributeError):
        return ""
