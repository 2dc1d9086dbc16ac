"""Giving memory back to the system after a run, and not taking more than needed per connection.

A reconcile decodes a KfDef's whole render and the server's answers (a CRD can weigh hundreds of KiB), and frees
them when it ends. CPython hands most freed blocks to the C allocator, which keeps them in its heap: the process
stays as large as its largest run. Asking glibc to trim its heap returns the free pages at once, so that the
operator at rest holds what it keeps (desired states, watch caches), not what its last run needed.
"""

from __future__ import annotations

import asyncio.sslproto
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


TLS_READ_BUFFER = 64 * 1024
"""Bytes each TLS connection reads at a time (asyncio's default is 256 KiB)."""


def limit_tls_read_buffers(size: int = TLS_READ_BUFFER) -> None:
    """Give every TLS connection opened from now on a read buffer of ``size`` bytes.

    asyncio allocates (and zeroes, so the pages are resident) a 256 KiB read buffer for each TLS connection it
    opens. The operator holds one connection per watched kind (HTTP/1.1 watches cannot share one) besides its
    request pool: a Kubeflow release keeps a couple of hundred open, about 50 MiB of buffers. A watch event or an
    answer larger than the buffer is read in several passes, so a smaller buffer costs a few more reads of a
    large listing and nothing else. Process-wide: call it before the first connection.
    """
    asyncio.sslproto.SSLProtocol.max_size = size
