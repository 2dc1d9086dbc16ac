"""Local sources: ``/abs/path``, ``relative/path`` and ``file:`` URIs naming a directory or a tar archive.

The operator reads files with its own identity, so a KfDef naming ``/var/run/secrets/...``, the operator's home
or its work directory would read what its author cannot. Local sources are therefore allowed only inside the
directories the operator's admin lists (``KFDEF_LOCAL_SOURCE_ROOTS``; none by default), after symlinks are
resolved, and never inside ``FetchOptions.private_dirs`` (the operator's work directory, which holds every
other KfDef's sources) nor above one (a source holding the work directory would read it whole).
``kfdef-operator build`` runs as its user and reads whatever the user can.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from urllib.parse import unquote, urlsplit

from kfdef_operator.api.kfdef import Repo
from kfdef_operator.source.archive import inside
from kfdef_operator.source.deadline import Deadline
from kfdef_operator.source.errors import SourceError
from kfdef_operator.source.options import FetchOptions

_CHUNK = 1024 * 1024
_ONLY = "a local source may hold only regular files, directories and symlinks"


def local_path(repo: Repo, options: FetchOptions) -> Path:
    """The absolute path a local ``repo.uri`` names (not yet checked against the roots)."""
    parts = urlsplit(repo.uri)
    if parts.scheme.lower() == "file":
        if parts.netloc not in ("", "localhost"):
            raise SourceError(repo.name, repo.uri, f"file: URI names host {parts.netloc!r}; use file:///path")
        raw = unquote(parts.path)
    else:
        raw = repo.uri
    path = Path(raw).expanduser()
    return path if path.is_absolute() else (options.base_dir or Path.cwd()) / path


def check_local_root(repo: Repo, path: Path, options: FetchOptions) -> Path:
    """``path`` with its symlinks resolved, if the operator allows reading it; else a SourceError.

    Checked before anything is read, so whether a file outside the roots exists is not revealed either. The
    refusal names the repo by its URI as the KfDef spells it, never the operator's layout (its roots, its work
    directory, the path a relative URI or a symlink resolves to), and says why only of paths inside the roots.
    """
    real = path.resolve()
    if options.local_roots is None:
        return real
    if not any(inside(real, Path(root).resolve()) for root in options.local_roots):
        raise SourceError(repo.name, repo.uri, "the path is outside the directories this operator reads local "
                                               "sources from (its admin lists them in KFDEF_LOCAL_SOURCE_ROOTS); "
                                               "use an https:// or git+https:// source, or ask the operator's admin "
                                               "for a root")
    for private in (Path(d).resolve() for d in options.private_dirs):
        if inside(real, private) or inside(private, real):
            where = "is inside" if inside(real, private) else "holds"
            raise SourceError(repo.name, repo.uri, f"the path {where} the operator's own work directory, which is "
                                                   "never read as a source")
    return real


def local_source(repo: Repo, options: FetchOptions, deadline: Deadline) -> tuple[Path, str | None]:
    """(path, revision) of a local directory, used in place; (path, None) for a local archive file. The
    directory is hashed within ``deadline``."""
    path = local_path(repo, options)
    real = check_local_root(repo, path, options)
    if real.is_dir():
        return real, "dir-sha256:" + directory_digest(repo, real, deadline)
    if real.is_file():
        return real, None
    kind = _special(real.lstat().st_mode) if real.exists() else None
    if kind is not None:
        raise SourceError(repo.name, repo.uri, f"the path is {kind}, neither a directory nor a tar archive")
    relative = f" (relative paths are relative to {options.base_dir})" if options.base_dir else ""
    raise SourceError(repo.name, repo.uri, f"the path does not exist; check spec.repos[].uri{relative}")


def _special(mode: int) -> str | None:
    """What a file of ``mode`` is when it is neither a regular file, a directory nor a symlink, else None. Such a
    file is never read: a named pipe without a writer blocks its reader for ever, a device is not a file of the
    tree at all."""
    for kind, what in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if kind(mode):
            return what
    return None


def file_digest(repo: Repo, path: Path, deadline: Deadline, *, shown: str = "the archive") -> str:
    """sha256 of the regular file at ``path`` (``shown`` as people know it), read within ``deadline``.

    Opened without following a symlink and without blocking, then checked again on the open file: a file swapped
    for a named pipe or a device since it was listed is refused, never waited on."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise SourceError(repo.name, repo.uri, f"{shown} cannot be read: {error.strerror}") from None
    hasher = hashlib.sha256()
    with open(descriptor, "rb") as stream:
        kind = _special(os.fstat(descriptor).st_mode)
        if kind is not None:
            raise SourceError(repo.name, repo.uri, f"{shown} is {kind}; {_ONLY}")
        while chunk := stream.read(_CHUNK):
            deadline.check()
            hasher.update(chunk)
    return hasher.hexdigest()


def directory_digest(repo: Repo, root: Path, deadline: Deadline) -> str:
    """Digest of paths, executable bits, file bytes and link targets, computed within ``deadline``; refuses links
    leaving ``root`` and named pipes, sockets and devices."""
    hasher = hashlib.sha256()
    real_root = root.resolve()
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            deadline.check()
            path = Path(directory, name)
            relative = path.relative_to(root).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                if not inside(path.resolve(), real_root):
                    raise SourceError(repo.name, repo.uri, f"symlink {relative} points outside the directory")
                hasher.update(f"L {relative} {os.readlink(path)}\n".encode())
                continue
            kind = _special(mode)
            if kind is not None:
                raise SourceError(repo.name, repo.uri, f"{relative} is {kind}; {_ONLY}")
            executable = mode & stat.S_IXUSR
            digest = file_digest(repo, path, deadline, shown=relative)
            hasher.update(f"F {relative} {1 if executable else 0} {digest}\n".encode())
    return hasher.hexdigest()
