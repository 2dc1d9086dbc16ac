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


def _glibc(function: str) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    """A function of glibc's allocator, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), function) if name else None
    except (OSError, AttributeError):
        return None


_TRIM = _glibc("malloc_trim")
_MALLOPT = _glibc("mallopt")
_M_ARENA_MAX = -8  # mallopt's parameter number (malloc.h)


def release_free_memory() -> None:
    """Return the C heap's free pages to the system (a no-op without glibc)."""
    if _TRIM is not None:
        _TRIM(0)


MALLOC_ARENAS = 2
"""Heaps glibc's allocator may keep for the process's threads (its default: eight per core)."""


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> None:
    """Let the C allocator keep at most ``arenas`` heaps, as ``MALLOC_ARENA_MAX`` does (a no-op without glibc).

    glibc gives a thread that finds the heaps busy a heap of its own, and keeps it. The threads that fetch and
    render decode a render's JSON (tens of MiB of objects, for a Kubeflow release) and hand it to the event loop,
    which frees it: the pages then stay resident in heaps no thread allocates from again, out of reach of
    :func:`release_free_memory` for the most part (v1.11.0 at rest after its first apply: 128 MiB with the
    default, median of 3 runs; 107 MiB with two, one run; ``python -m bench.memory``).
    The operator's few threads mostly wait, so sharing two heaps costs them nothing measurable. Process-wide:
    call it before the first thread starts.
    """
    if _MALLOPT is not None:
        _MALLOPT(_M_ARENA_MAX, arenas)


TLS_READ_BUFFER = 16 * 1024
"""Bytes each TLS connection reads at a time: one TLS record at most (asyncio's default is 256 KiB)."""


def limit_tls_read_buffers(size: int = TLS_READ_BUFFER) -> None:
    """Give every TLS connection opened from now on a read buffer of ``size`` bytes.

    asyncio allocates (and zeroes, so the pages are resident) a 256 KiB read buffer for each TLS connection it
    opens. The operator holds one connection per watched kind (HTTP/1.1 watches cannot share one) besides its
    request pool: a Kubeflow release keeps a couple of hundred open, about 50 MiB of buffers. A watch event or an
    answer larger than the buffer is read in several passes, so a smaller buffer costs a few more reads of a
    large listing and nothing else (16 KiB still hold a whole TLS record). Process-wide: call it before the first
    connection.
    """
    asyncio.sslproto.SSLProtocol.max_size = size
