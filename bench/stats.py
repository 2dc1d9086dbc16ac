"""Summaries of repeated measurements (median, min, max, p99 with raw samples)."""

from __future__ import annotations

import math
import statistics
from typing import Any


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100): with 50 samples p99 is the largest."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(samples: list[float], unit: str, **extra: Any) -> dict[str, Any]:
    """The results-file entry of one scenario."""
    if not samples:
        raise ValueError("no samples")
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples),
            "n": len(samples), "unit": unit, "samples": [round(s, 4) for s in samples], **extra}
