"""Summaries of repeated measurements (median, min, max, p99 with raw samples)."""

from __future__ import annotations

import math
import statistics
from typing import Any

from kfdef_operator.api.types import JSON


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100): with 50 samples p99 is the largest."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(samples: list[float], unit: str, **extra: Any) -> JSON:
    """The results-file entry of one scenario."""
    if not samples:
        raise ValueError("no samples")
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples),
            "n": len(samples), "unit": unit, "samples": [round(s, 4) for s in samples], **extra}


def steps_summary(samples: list[dict[str, float]]) -> JSON:
    """Median seconds of each step of the operator's apply (``Bench.steps``; runs whose steps were not all seen are
    left out), with the samples."""
    measured = [sample for sample in samples if sample]
    if not measured:
        return {}
    return {"median": {step: statistics.median(sample[step] for sample in measured) for step in measured[0]},
            "samples": measured}


def cpu_summary(samples: list[dict[str, float]]) -> JSON:
    """Median CPU seconds of each process over one path's runs (``Bench.cpu``), of their total, and the samples."""
    return {"median": {name: statistics.median(sample[name] for sample in samples) for name in samples[0]},
            "total": statistics.median(sum(sample.values()) for sample in samples), "samples": samples}
