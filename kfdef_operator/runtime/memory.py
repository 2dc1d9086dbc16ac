"""Giving memory back to the system after a run.

A reconcile decodes a KfDef's whole render and the server's answers (a CRD can weigh hundreds of KiB), and frees
them when it ends. CPython hands most freed blocks to the C allocator, which keeps them in its heap: the process
stays as large as its largest run. Asking glibc to trim its heap returns the free pages at once, so that the
operator at rest holds what it keeps (desired states, watch caches), not what its last run needed.
"""

from __future__ import annotations

import ctypes
import ctypes.util


def _malloc_trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def release_free_memory() -> None:
    """Return the C heap's free pages to the system (a no-op without glibc)."""
    if _TRIM is not None:
        _TRIM(0)
