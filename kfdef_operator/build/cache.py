"""Rendered applications kept on disk, so an unchanged KfDef is not rendered again.

Rendering a Kubeflow stack runs kustomize over hundreds of objects (seconds);
an operator restart re-reconciles every KfDef. The result of a render is
fully determined by the KfDef (spec, name, namespace, uid), the revisions of
its sources, the kustomize binary and this operator's version, so it is
stored under a digest of those, one file per KfDef (the latest render only).
A missing, stale or unreadable entry just means rendering again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from kfdef_operator import __version__
from kfdef_operator.build.kustomize import KustomizeError, kustomize_command
from kfdef_operator.api.kfdef import KfDef
from kfdef_operator.build.render import RenderedApplication
from kfdef_operator.source.resolve import ResolvedSource
from kfdef_operator.api.types import JSON

log = logging.getLogger(__name__)

Renderer = Callable[[KfDef, Mapping[str, ResolvedSource], Path], list[RenderedApplication]]


def _kustomize_identity() -> str:
    """Which kustomize renders: its path and modification time (a rebuilt binary is another one)."""
    try:
        command = kustomize_command()
        return f"{command}:{os.stat(command[0]).st_mtime_ns}"
    except (KustomizeError, OSError) as error:
        return f"unavailable: {error}"  # the render itself will report it


def render_key(body: JSON, sources: Mapping[str, ResolvedSource]) -> str:
    """Digest of everything a render depends on."""
    meta = body.get("metadata") or {}
    identity = {
        "spec": body.get("spec") or {},
        "kfdef": [meta.get("namespace"), meta.get("name"), meta.get("uid")],
        "revisions": sorted((s.name, s.revision, str(s.local_path)) for s in sources.values()),
        "operator": __version__,
        "kustomize": _kustomize_identity(),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()


class RenderCache:
    """One cached render per KfDef under ``root``; ``render`` is the renderer used on a miss."""

    def __init__(self, root: Path, renderer: Renderer) -> None:
        self.root = root
        self._renderer = renderer

    def _path(self, body: JSON) -> Path:
        meta = body.get("metadata") or {}
        return self.root / f"{meta.get('namespace')}_{meta.get('name')}.json"

    def render(self, body: JSON, kfdef: KfDef, sources: Mapping[str, ResolvedSource],
               workdir: Path) -> list[RenderedApplication]:
        """The KfDef's rendered applications, from the cache when nothing they depend on changed."""
        key = render_key(body, sources)
        path = self._path(body)
        try:
            entry = json.loads(path.read_text())
            if entry.get("key") == key:
                return [RenderedApplication(a["name"], a["mode"], a["objects"], 0.0, tuple(a["warnings"]))
                        for a in entry["applications"]]
        except (OSError, ValueError, KeyError, TypeError):
            pass  # no usable entry: render
        rendered = self._renderer(kfdef, sources, workdir)
        self._store(path, key, rendered)
        return rendered

    def _store(self, path: Path, key: str, rendered: list[RenderedApplication]) -> None:
        entry = {"key": key, "applications": [
            {"name": a.name, "mode": a.mode, "objects": a.objects, "warnings": list(a.warnings)} for a in rendered]}
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.root, delete=False, suffix=".tmp") as handle:
                json.dump(entry, handle, separators=(",", ":"))
            os.replace(handle.name, path)
        except OSError as error:  # a read-only or full disk costs speed, never correctness
            log.warning("could not cache the render in %s: %s", path, error)
