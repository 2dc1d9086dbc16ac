"""Which source cache entries to remove: the policy of :meth:`SourceCache.collect`, as a pure function."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from kfdef_operator.source.options import CacheLimits


@dataclass(frozen=True)
class CacheEntry:
    """A top-level cache entry (``trees/<key>``, ``archives/<digest>``, ...): its disk usage and last use."""

    path: Path
    size: int
    last_used: float  #: seconds since the epoch


def select_removals(entries: Sequence[CacheEntry], *, keep: Collection[Path], now: float, limits: CacheLimits,
                    need: int = 0) -> list[CacheEntry]:
    """The entries to remove.

    Never an entry in ``keep`` (used by a live KfDef) nor one used within ``limits.grace``. Of the rest: every
    entry unused for ``limits.ttl``; then, least recently used first, as many as it takes for the remaining
    entries plus ``need`` bytes to fit ``limits.max_size`` (if they cannot, as many as there are).
    """
    removable = [e for e in entries if e.path not in keep and now - e.last_used >= limits.grace]
    chosen = [e for e in removable if now - e.last_used >= limits.ttl]
    total = sum(e.size for e in entries) - sum(e.size for e in chosen)
    expired = set(chosen)
    for entry in sorted((e for e in removable if e not in expired), key=lambda e: e.last_used):
        if total + need <= limits.max_size:
            break
        chosen.append(entry)
        total -= entry.size
    return chosen
