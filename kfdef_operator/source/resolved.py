"""What a resolved source is, apart from how it is fetched: the render process imports only this."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ResolvedSource:
    """A repo as a local tree. ``uri`` is credential-free (safe for logs and status)."""

    name: str
    uri: str
    local_path: Path
    revision: str
