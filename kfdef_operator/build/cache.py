"""Rendered applications kept on disk, so an unchanged KfDef is not rendered again.

Rendering a Kubeflow stack runs kustomize over hundreds of objects (seconds);
an operator restart re-reconciles every KfDef. The result of a render is
fully determined by the KfDef (spec, name, namespace, uid), the revisions of
its sources, the renderer's settings (the kustomize binary, the remote-bases
policy), this operator's version and the build code itself, so it is stored under a digest of those,
one file per KfDef (the latest render only). A missing, stale, unreadable or
malformed entry just means rendering again: entries are JSON, checked field by
field (:func:`applications_from_json`) like the answer of a render process.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from kfdef_operator import __version__
from kfdef_operator.api.kfdef import KfDef
from kfdef_operator.api.types import JSON
from kfdef_operator.build.confinement import path_segment
from kfdef_operator.build.render import MODES, RenderedApplication
from kfdef_operator.build.safe_yaml import MAX_DEPTH, nesting_depth
from kfdef_operator.source.interrupt import Interrupt
from kfdef_operator.source.resolved import ResolvedSource

log = logging.getLogger(__name__)


class Renderer(Protocol):
    """Renders a KfDef's applications in ``workdir``; ``interrupt``, once set, ends the render at once."""

    def __call__(self, kfdef: KfDef, sources: Mapping[str, ResolvedSource], workdir: Path, *,
                 interrupt: Interrupt | None = None) -> list[RenderedApplication]: ...


def code_digest(package: Path) -> str:
    """Digest of a package's Python files, so that a render by changed code (a development build, a patched
    image with the same version) is never served from the cache of the old one."""
    digest = hashlib.sha256()
    for path in sorted(package.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


#: The build layer's own code, read once: part of every render key.
BUILD_CODE = code_digest(Path(__file__).parent)


def render_key(body: JSON, sources: Mapping[str, ResolvedSource], settings: str) -> str:
    """Digest of everything a render depends on; ``settings`` describes the renderer's own."""
    meta = body.get("metadata") or {}
    identity = {
        "spec": body.get("spec") or {},
        "kfdef": [meta.get("namespace"), meta.get("name"), meta.get("uid")],
        "revisions": sorted((s.name, s.revision, str(s.local_path)) for s in sources.values()),
        "operator": __version__,
        "build_code": BUILD_CODE,
        "renderer": settings,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()


def applications_to_json(rendered: list[RenderedApplication]) -> list[JSON]:
    return [{"name": a.name, "mode": a.mode, "objects": a.objects, "seconds": a.seconds, "warnings": list(a.warnings),
             "confinement": a.confinement}
            for a in rendered]


def applications_from_json(data: Any) -> list[RenderedApplication]:
    """Rendered applications from JSON written by :func:`applications_to_json`, checked field by field (the
    writer may be a process that handled untrusted manifests); raises ``ValueError`` when anything is off."""
    if not isinstance(data, list):
        raise ValueError("applications must be a list")
    result = []
    for index, app in enumerate(data):
        if not isinstance(app, dict):
            raise ValueError(f"application {index} is not an object")
        name, mode, objects = app.get("name"), app.get("mode"), app.get("objects")
        seconds, warnings = app.get("seconds", 0.0), app.get("warnings", [])
        if not isinstance(name, str) or mode not in MODES:
            raise ValueError(f"application {index} has no valid name or mode")
        if not (isinstance(objects, list) and all(isinstance(o, dict) for o in objects)):
            raise ValueError(f"application {name!r}: objects must be a list of objects")
        if any(nesting_depth(o) > MAX_DEPTH for o in objects):
            raise ValueError(f"application {name!r}: an object nests deeper than {MAX_DEPTH} levels")
        if not (isinstance(warnings, list) and all(isinstance(w, str) for w in warnings)):
            raise ValueError(f"application {name!r}: warnings must be a list of strings")
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
            raise ValueError(f"application {name!r}: seconds must be a number")
        confinement = app.get("confinement", "")
        if not isinstance(confinement, str):
            raise ValueError(f"application {name!r}: confinement must be a string")
        result.append(RenderedApplication(name, mode, objects, float(seconds), tuple(warnings), confinement))
    return result


class RenderCache:
    """One cached render per KfDef under ``root``; ``renderer`` renders on a miss, ``settings`` describes what
    else its result depends on (for the key)."""

    def __init__(self, root: Path, renderer: Renderer, settings: Callable[[], str]) -> None:
        self.root = root
        self._renderer = renderer
        self._settings = settings

    def _path(self, kfdef: KfDef) -> Path:
        return self.path_for(kfdef.namespace, kfdef.name)

    def path_for(self, namespace: str, name: str) -> Path:
        """The entry of KfDef ``namespace/name`` (neither holds ``_``: they are DNS names)."""
        return self.root / f"{path_segment(namespace)}_{path_segment(name)}.json"

    def entries(self) -> list[tuple[str, str, Path]]:
        """(namespace, name, path) of every stored entry, and ("", "", path) of leftovers of interrupted writes."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.iterdir():
            namespace, _, name = path.stem.partition("_")
            found.append((namespace, name, path) if path.suffix == ".json" and name else ("", "", path))
        return found

    def render(self, body: JSON, kfdef: KfDef, sources: Mapping[str, ResolvedSource], workdir: Path, *,
               interrupt: Interrupt | None = None) -> list[RenderedApplication]:
        """The KfDef's rendered applications, from the cache when nothing they depend on changed (``interrupt``
        ends a render at once)."""
        key = render_key(body, sources, self._settings())
        path = self._path(kfdef)
        try:
            entry = json.loads(path.read_bytes())
            if isinstance(entry, dict) and entry.get("key") == key:
                return [RenderedApplication(a.name, a.mode, a.objects, 0.0, a.warnings)
                        for a in applications_from_json(entry.get("applications"))]
        except (OSError, ValueError, RecursionError):
            pass  # no usable entry: render
        rendered = self._renderer(kfdef, sources, workdir, interrupt=interrupt)
        self._store(path, key, rendered)
        return rendered

    def _store(self, path: Path, key: str, rendered: list[RenderedApplication]) -> None:
        entry = {"key": key, "applications": applications_to_json(rendered)}
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=self.root, delete=False, suffix=".tmp") as handle:
                # dumps, not dump: dump encodes in pure Python, six times slower (0.5 s for Kubeflow's render)
                handle.write(json.dumps(entry, separators=(",", ":")))
            os.replace(handle.name, path)
        except OSError as error:  # a read-only or full disk costs speed, never correctness
            log.warning("could not cache the render in %s: %s", path, error)
