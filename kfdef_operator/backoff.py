"""Retry delays: exponential backoff and jitter, one formula for every layer (pure).

The bottom layer of the stack (below ``api``): every layer retries something (a download, an API request, a
watch, a heal, a reconcile), and this module imports nothing of the product.
"""

from __future__ import annotations

import math
import random

# The exponent is bounded before the power is taken (2.0 ** 1100 overflows); 2 ** 64 times any base in use is far
# above every cap, so the bound never shortens a delay.
_MAX_EXPONENT = 64


def exponential(attempt: int, *, base: float, cap: float = math.inf) -> float:
    """Seconds before retry ``attempt`` (0-based; a negative one counts as 0): ``base`` doubling with each attempt,
    at most ``cap``."""
    return min(base * 2.0 ** min(max(attempt, 0), _MAX_EXPONENT), cap)


def jittered(seconds: float, fraction: float) -> float:
    """``seconds`` spread uniformly by ± ``fraction`` of it, so that many waiters do not come back at once."""
    return seconds * (1.0 + random.uniform(-fraction, fraction))
