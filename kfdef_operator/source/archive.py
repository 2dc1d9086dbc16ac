"""Unpacking tar archives into the source cache, refusing anything unsafe.

Absolute paths, ``..``, links leaving the tree, device and fifo entries are refused, as are archives over
``max_files`` entries, an entry over ``max_file_bytes`` and more bytes than the KfDef may still unpack
(decompression bombs). An archive whose entries all sit under a single top-level directory resolves to that
directory, as kfctl did (GitHub's ``archive/<ref>.tar.gz`` has ``manifests-<ref>/``).
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import tarfile
import zlib
from pathlib import Path
from typing import IO

from kfdef_operator.api.kfdef import Repo
from kfdef_operator.source.cache import CacheFull, SourceCache, remove_path
from kfdef_operator.source.deadline import Deadline
from kfdef_operator.source.errors import SourceError
from kfdef_operator.source.options import FetchOptions

_CHUNK = 1024 * 1024
_BLOCK = 4096


def inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def on_disk(size: int) -> int:
    """Bytes a file of ``size`` bytes occupies on disk (whole blocks, as ``du`` and the kubelet count)."""
    return -(-size // _BLOCK) * _BLOCK


def unpacked(repo: Repo, cache: SourceCache, options: FetchOptions, archive: Path, digest: str, *,
             allowance: int, deadline: Deadline) -> tuple[Path, str]:
    """The tree of ``archive`` (sha256 ``digest``) in the cache, unpacked unless it already is there."""
    tree = cache.root / "trees" / f"sha256-{digest}"
    if not cache.claim(tree):
        try:
            with cache.reserve(allowance, timeout=deadline.remaining()):
                staged = cache.staging()
                try:
                    # never blocking: a local archive swapped for a named pipe since it was hashed reads as empty
                    with open(os.open(archive, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as stream:
                        safe_extract(stream, staged, options, repo=repo, max_bytes=allowance, deadline=deadline)
                    cache.publish(staged, tree)
                finally:
                    remove_path(staged)
        except CacheFull as error:
            raise SourceError(repo.name, repo.uri, str(error), transient=True) from None
    return single_top_level(tree), f"sha256:{digest}"


def single_top_level(tree: Path) -> Path:
    entries = list(tree.iterdir())
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return tree


def safe_extract(stream: IO[bytes], dest: Path, options: FetchOptions, *, repo: Repo, max_bytes: int | None = None,
                 deadline: Deadline | None = None) -> None:
    """Extract the tar archive in ``stream`` into the existing directory ``dest``, refusing anything unsafe.

    ``max_bytes`` (default ``options.max_unpacked_bytes``) bounds the disk space written (files in whole blocks,
    a block per directory); ``deadline`` is checked between entries.
    """
    limit = options.max_unpacked_bytes if max_bytes is None else max_bytes

    def refuse(reason: str) -> SourceError:
        return SourceError(repo.name, repo.uri, f"unsafe archive refused: {reason}")

    def over_limit() -> SourceError:
        return refuse(f"unpacks to more than {limit} bytes on disk (a KfDef's sources may take "
                      f"{options.max_unpacked_bytes} bytes in total)")

    root = dest.resolve()
    total = count = 0
    links: list[Path] = []
    try:
        # Random-access mode where possible: gzip then raises EOFError on truncated data, where stream mode
        # ("r|*", for pipes) silently stops at a damaged header.
        with tarfile.open(fileobj=stream, mode="r:*" if stream.seekable() else "r|*") as archive:
            for member in archive:
                if deadline is not None:
                    deadline.check()
                count += 1
                if count > options.max_files:
                    raise refuse(f"more than {options.max_files} entries")
                if member.name.startswith("/") or re.match(r"^[A-Za-z]:", member.name):
                    # The filter would strip the slash; an archive naming absolute paths is refused instead.
                    raise refuse(f"entry {member.name!r} is absolute")
                try:
                    # The standard library's "data" filter (PEP 706) decides what may be unpacked; the size,
                    # count and time limits around it are ours.
                    member = tarfile.data_filter(member, str(root))
                except tarfile.FilterError as error:
                    raise refuse(_filter_refusal(error)) from None
                name = posixpath.normpath(member.name)
                if name == ".":
                    continue
                target = root / name
                if target.is_symlink():  # a later entry replaces a link; never write through it
                    target.unlink()
                if member.isdir():
                    total += _BLOCK
                    if total > limit:
                        raise over_limit()
                    target.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    if member.size > options.max_file_bytes:
                        raise refuse(f"entry {member.name!r} is {member.size} bytes, over the "
                                     f"{options.max_file_bytes}-byte limit per file")
                    total += on_disk(member.size)
                    if total > limit:
                        raise over_limit()
                    target.parent.mkdir(parents=True, exist_ok=True)
                    source = archive.extractfile(member)
                    assert source is not None
                    with open(target, "wb") as out:
                        shutil.copyfileobj(source, out, _CHUNK)
                        if out.tell() != member.size:
                            raise EOFError(f"entry {member.name!r} is truncated")
                    os.chmod(target, 0o755 if member.mode & 0o111 else 0o644)
                elif member.issym():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.symlink(member.linkname, target)
                    links.append(target)
                elif member.islnk():
                    source_path = root / posixpath.normpath(member.linkname)
                    if not source_path.is_file():
                        raise refuse(f"hard link {member.name!r} -> {member.linkname!r} does not name a file "
                                     "inside the archive")
                    total += on_disk(source_path.stat().st_size)
                    if total > limit:
                        raise over_limit()
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(source_path, target)
                else:  # the filter lets no other kind through; should one appear, it is refused all the same
                    raise refuse(f"entry {member.name!r} is a device, fifo or other special file")
    except SourceError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise SourceError(repo.name, repo.uri, f"archive is damaged or not a tar archive ({exc}); if it was "
                                               "downloaded, the server may have sent an error page") from None
    for link in links:  # chains of individually harmless links can still leave the tree
        if not inside(link.resolve(), root):
            raise refuse(f"symlink {link.relative_to(root)} resolves outside the archive")


def _filter_refusal(error: tarfile.FilterError) -> str:
    """Why the data filter refused a member, for a person reading the KfDef's status."""
    member = error.tarinfo
    name = member.name
    if isinstance(error, tarfile.AbsolutePathError):
        return f"entry {name!r} is absolute"
    if isinstance(error, tarfile.SpecialFileError):
        return f"entry {name!r} is a device, fifo or other special file"
    if isinstance(error, (tarfile.AbsoluteLinkError, tarfile.LinkOutsideDestinationError)):
        what = "hard link" if member.islnk() else "symlink"
        return f"{what} {name!r} -> {member.linkname!r} points outside the archive"
    if isinstance(error, tarfile.OutsideDestinationError):
        normal = posixpath.normpath(name)
        if normal == ".." or normal.startswith("../"):
            return f"entry {name!r} leaves the archive (..)"
        return f"entry {name!r} is written through a link leaving the archive"
    return f"entry {name!r}: {error}"
