"""A KfDef file's applications rendered on this machine, as the operator renders them (``build`` and ``diff``).

The command runs with its user's own identity: sources are fetched through the user's source cache, from any
local path or network the user can reach; relative local paths are relative to the KfDef file (to the working
directory for stdin).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import TextIO

from kfdef_operator.api.kfdef import KfDef
from kfdef_operator.build.isolated import IsolatedRender
from kfdef_operator.build.render import RenderedApplication
from kfdef_operator.cli.errors import BadInput
from kfdef_operator.source.cache import SourceCache
from kfdef_operator.source.network import ANY, NetworkPolicy
from kfdef_operator.source.options import FetchOptions
from kfdef_operator.source.resolve import resolve_sources


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kfdef-operator" / "sources"


class Progress:
    """Per-application progress lines on stderr, only when stderr is a terminal."""

    def __init__(self, stream: TextIO, total: int):
        self.stream, self.total, self.finished = stream, total, 0
        self.enabled = stream.isatty()

    def note(self, text: str) -> None:
        if self.enabled:
            self.stream.write(f"{text}...\n")

    def done(self, app: RenderedApplication) -> None:
        self.finished += 1  # called from worker threads; a lost update only skews the counter shown
        if self.enabled:
            self.stream.write(f"\r[{self.finished}/{self.total}] {app.name} ({app.seconds:.1f}s)\x1b[K")
            self.stream.flush()

    def finish(self) -> None:
        if self.enabled and self.finished:
            self.stream.write("\n")


def render_kfdef(kfdef: KfDef, kfdef_file: str, *, cache_dir: Path | None, renderer: IsolatedRender,
                 progress: Progress) -> tuple[list[RenderedApplication], float]:
    """The rendered applications and the seconds it took (fetch included), rendered by ``renderer`` (the pinned
    kustomize, confined as the operator runs it)."""
    base_dir = Path.cwd() if kfdef_file == "-" else Path(kfdef_file).resolve().parent
    started = time.monotonic()
    progress.note(f"resolving {len(kfdef.repos)} repo(s)")
    # The command runs with its user's own identity: any local path and any network the user can reach.
    try:
        options = FetchOptions.from_env(base_dir=base_dir, local_roots=None, networks=NetworkPolicy(allowed=ANY))
    except ValueError as error:  # names the environment variable whose value cannot be used
        raise BadInput(str(error)) from None
    sources = resolve_sources(kfdef.repos, SourceCache(cache_dir or default_cache_dir()), options)
    with tempfile.TemporaryDirectory(prefix="kfdef-build-") as workdir:
        rendered = renderer(kfdef, sources, Path(workdir), progress=progress.done)
    progress.finish()
    return rendered, time.monotonic() - started
