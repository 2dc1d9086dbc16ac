"""Open and copy the files of a tree so that the kernel refuses, when it opens them, any path that has left the tree.

A check of a path followed by an open by name races with whoever can change the tree in between: a directory or file
swapped for a symlink out of the tree after the check is followed by the open. Local sources are read in place, so
their owners can do exactly that while a render reads them. :func:`open_file` opens every file from a descriptor of
its root with ``openat2`` and ``RESOLVE_BENEATH`` (Linux 5.6): the kernel follows a symlink only while it stays below
that root, and refuses the open otherwise. A path reaching its file through an absolute symlink or one into another
root (which ``RESOLVE_BENEATH`` refuses even when it ends inside) is resolved here, then opened again with no symlink
followed at all, so a symlink swapped in after that resolution fails the open. It is the render helper's rule
(``tools/kfdef-render/internal/confinedfs/beneath.go``), for the operator's own reads.

:func:`copy_tree` copies a tree the same way: every directory is entered and every file opened from its parent's
descriptor without following a symlink, so a swap during the copy fails the copy instead of copying another tree.

Without ``openat2`` (an older kernel, or a seccomp profile refusing it) :func:`open_file` checks the resolved path and
then opens it, as before this module: :func:`kernel_enforced` says which.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import shutil
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

_SYS_OPENAT2 = 437  # the same number on every architecture (syscalls added since 5.1 share one table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.syscall.restype = ctypes.c_long


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class Outside(OSError):
    """The path leads outside the roots it was opened beneath (the kernel refused it, or it resolves outside)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(errno.EXDEV, "outside the tree it is read from", os.fspath(path))


def _openat2(directory: int, path: str, flags: int, resolve: int) -> int:
    how = _OpenHow(flags | os.O_CLOEXEC, 0, resolve)
    fd = _LIBC.syscall(ctypes.c_long(_SYS_OPENAT2), ctypes.c_int(directory), os.fsencode(path), ctypes.byref(how),
                       ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number), path)
    return int(fd)


@functools.cache
def kernel_enforced() -> bool:
    """Whether this kernel opens paths beneath a descriptor (``openat2``)."""
    root = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.close(_openat2(root, ".", os.O_PATH, _RESOLVE_BENEATH))
        return True
    except OSError as error:
        return error.errno not in (errno.ENOSYS, errno.EPERM)
    finally:
        os.close(root)


def _root_of(path: str, roots: Iterable[str]) -> tuple[str, str] | None:
    """The innermost of the (real, absolute) ``roots`` the clean absolute ``path`` is lexically below, and the
    path relative to it."""
    below = [root for root in roots if path == root or path.startswith(root.rstrip("/") + "/")]
    if not below:
        return None
    root = max(below, key=len)
    return root, os.path.relpath(path, root)


def _open_below(root: str, relative: str, flags: int, resolve: int) -> int:
    directory = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _openat2(directory, relative, flags, resolve)
    finally:
        os.close(directory)


def open_file(roots: Sequence[str | os.PathLike[str]], path: str | os.PathLike[str], flags: int = os.O_RDONLY) -> int:
    """A descriptor of ``path`` (cleaned), opened with ``flags`` so that the kernel refuses it if it leads outside
    ``roots``; raises :class:`Outside` then, ``OSError`` when it cannot be opened otherwise."""
    real_roots = [os.path.realpath(root) for root in roots]
    clean = os.path.normpath(os.path.abspath(path))
    if not kernel_enforced():
        if _root_of(os.path.realpath(clean), real_roots) is None:
            raise Outside(path)
        return os.open(clean, flags | os.O_CLOEXEC)
    below = _root_of(clean, real_roots)
    if below is not None:
        try:
            return _open_below(*below, flags, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS)
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise OSError(error.errno, error.strerror, os.fspath(path)) from None
    resolved = _root_of(os.path.realpath(clean), real_roots)  # an absolute symlink, or one into another root
    if resolved is None:
        raise Outside(path)
    try:
        return _open_below(*resolved, flags, _RESOLVE_BENEATH | _RESOLVE_NO_MAGICLINKS | _RESOLVE_NO_SYMLINKS)
    except OSError as error:
        if error.errno in (errno.EXDEV, errno.ELOOP):
            raise Outside(path) from None  # it changed since it was resolved
        raise OSError(error.errno, error.strerror, os.fspath(path)) from None


def opener(roots: Sequence[str | os.PathLike[str]]) -> Callable[[str, int], int]:
    """:func:`open_file` for ``roots`` as the ``opener`` of the builtin ``open``."""
    return functools.partial(open_file, roots)


def copy_tree(source: Path, target: Path, listed: Callable[[list[str]], None]) -> None:
    """Copy the directory ``source`` to ``target`` (created with its parents; it must not exist), symlinks as
    symlinks, files with their permission bits. Every directory is entered and every file opened without following a
    symlink, from its parent's descriptor; an entry that is neither a file, a directory nor a symlink (a FIFO, socket
    or device) fails the copy, as does an entry swapped for a symlink during it. ``listed`` gets each directory's
    entry names before they are copied (it may raise to stop the copy). Errors name the file by its path below
    ``source``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    directory = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _copy_directory(directory, source, target, listed)
    finally:
        os.close(directory)


def _copy_directory(directory: int, shown: Path, target: Path, listed: Callable[[list[str]], None]) -> None:
    os.mkdir(target)
    with os.scandir(directory) as listing:
        entries = list(listing)
    listed([entry.name for entry in entries])
    for entry in entries:
        if entry.is_symlink():
            os.symlink(os.readlink(entry.name, dir_fd=directory), target / entry.name)
        elif entry.is_dir(follow_symlinks=False):
            child = _open_entry(directory, entry.name, os.O_RDONLY | os.O_DIRECTORY, shown / entry.name)
            try:
                _copy_directory(child, shown / entry.name, target / entry.name, listed)
            finally:
                os.close(child)
        else:
            _copy_file(directory, entry.name, shown / entry.name, target / entry.name)


def _open_entry(directory: int, name: str, flags: int, shown: Path) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
    except OSError as error:
        raise OSError(error.errno, error.strerror, str(shown)) from None


def _copy_file(directory: int, name: str, shown: Path, target: Path) -> None:
    """Copy one file; O_NONBLOCK so that a FIFO put there is refused by fstat instead of blocking the open."""
    source = _open_entry(directory, name, os.O_RDONLY | os.O_NONBLOCK, shown)
    try:
        info = os.fstat(source)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file, a directory or a symlink", str(shown))
        os.set_blocking(source, True)
        with open(source, "rb", closefd=False) as reading, open(target, "xb") as writing:
            shutil.copyfileobj(reading, writing)
            os.fchmod(writing.fileno(), stat.S_IMODE(info.st_mode))
    except OSError as error:
        if error.filename is None:  # a write (e.g. EFBIG past the render's file-size limit): name the file
            raise OSError(error.errno, error.strerror, str(shown)) from None
        raise
    finally:
        os.close(source)
