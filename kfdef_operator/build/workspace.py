"""The build layer's share of the operator's work directory, per KfDef.

``render/<namespace>/<name>/`` is the render's working copy of the KfDef's packages (stacks mode keeps whole
repo copies there between renders) and ``rendered/<namespace>_<name>.json`` its cached render
(:class:`~kfdef_operator.build.cache.RenderCache`). Both go when their KfDef is deleted (:func:`forget`);
:func:`collect` removes those of KfDefs deleted while the operator was not running. Their size is bounded by
what the KfDef's sources may unpack to (``docs/sources.md#budgets``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Collection
from pathlib import Path

from kfdef_operator.build.cache import RenderCache
from kfdef_operator.build.confinement import path_segment
from kfdef_operator.source.cache import remove_path


def render_dir(work_dir: Path, namespace: str, name: str) -> Path:
    """The render working directory of KfDef ``namespace/name``."""
    return work_dir / "render" / path_segment(namespace) / path_segment(name)


def forget(work_dir: Path, render_cache: RenderCache, namespace: str, name: str) -> None:
    """Remove what the build layer keeps for KfDef ``namespace/name``."""
    remove_path(render_dir(work_dir, namespace, name))
    with contextlib.suppress(OSError):
        (work_dir / "render" / namespace).rmdir()  # only when empty
    remove_path(render_cache.path_for(namespace, name))


def collect(work_dir: Path, render_cache: RenderCache, keep: Collection[tuple[str, str]], *, grace: float,
            now: float | None = None) -> list[Path]:
    """Remove the render directories and cached renders of every KfDef not in ``keep`` (the live ones, as
    ``(namespace, name)``) and untouched for ``grace`` seconds; returns what was removed."""
    now = time.time() if now is None else now
    candidates = [(ns.name, d.name, d) for ns in _children(work_dir / "render") for d in _children(ns)]
    candidates += render_cache.entries()
    removed = []
    for namespace, name, path in candidates:
        try:
            idle = now - path.lstat().st_mtime
        except FileNotFoundError:
            continue
        if (namespace, name) not in keep and idle >= grace:
            remove_path(path)
            removed.append(path)
    for namespace_dir in _children(work_dir / "render"):
        with contextlib.suppress(OSError):  # only when empty
            namespace_dir.rmdir()
    return removed


def _children(directory: Path) -> list[Path]:
    return list(directory.iterdir()) if directory.is_dir() else []

