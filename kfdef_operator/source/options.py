"""Settings for fetching sources: network trust, the total deadline, size limits, where local sources may be.

The defaults are the operator's: nothing but public https (and git over https/ssh) is fetched, no local path
is read, and every limit fits the operator's 2 GiB cache volume (``docs/sources.md#budgets``). The CLI
(``kfdef-operator build``), which runs with its user's own identity, widens them explicitly.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from kfdef_operator.source.network import NetworkPolicy, parse_networks

MiB = 1024 * 1024
GiB = 1024 * MiB

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?)?B?\s*$", re.I)
_SIZE_UNITS = {"": 1, "k": 1000, "ki": 1024, "m": 1000**2, "mi": 1024**2, "g": 1000**3, "gi": 1024**3,
               "t": 1000**4, "ti": 1024**4}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}


def parse_size(text: str, setting: str) -> int:
    """Bytes from ``1073741824``, ``1Gi``, ``512Mi``, ``2G``... (Kubernetes quantities without exponents)."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{setting}: {text!r} is not a size (e.g. 1Gi, 512Mi or a number of bytes)")
    return int(float(match.group(1)) * _SIZE_UNITS[(match.group(2) or "").lower()])


def parse_duration(text: str, setting: str) -> float:
    """Seconds from ``90``, ``90s``, ``5m``, ``1h`` or ``500ms``."""
    match = _DURATION.fullmatch(text)
    if not match:
        raise ValueError(f"{setting}: {text!r} is not a duration (e.g. 60s, 5m, 1h or a number of seconds)")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def _flag(value: str) -> bool:
    return value.lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class FetchOptions:
    """Network, trust and safety settings for resolving sources."""

    timeout: float = 60.0  #: total seconds for resolving one repo: every attempt, redirect, pause and the unpacking
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    retries: int = 3  #: further attempts after the first, on connection errors and HTTP 5xx
    backoff_seconds: float = 1.0  #: first retry delay; doubles each time
    max_redirects: int = 10
    max_download_bytes: int = 128 * MiB  #: per tarball download, and per git fetch
    max_unpacked_bytes: int = 128 * MiB  #: disk space per KfDef: all of its fetched sources together, unpacked
    max_files: int = 50_000
    max_file_bytes: int = 16 * MiB
    ca_bundle: str | None = None
    allow_insecure_http: bool = False
    networks: NetworkPolicy = field(default_factory=NetworkPolicy)
    #: Directories local sources (paths, ``file:``, ``git+file:``) may be in; None: anywhere (the CLI).
    local_roots: tuple[Path, ...] | None = ()
    #: Directories never read as a source, even inside a root (the operator's own work directory).
    private_dirs: tuple[Path, ...] = ()
    base_dir: Path | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> FetchOptions:
        """Defaults, then the environment (``docs/sources.md#settings``), then ``overrides``.

        Raises ValueError naming the variable whose value cannot be used.
        """
        env = os.environ if environ is None else environ
        options = cls(ca_bundle=env.get("KFDEF_CA_BUNDLE") or None,
                      allow_insecure_http=_flag(env.get("KFDEF_ALLOW_INSECURE_HTTP", "")),
                      networks=NetworkPolicy(
                          allowed=parse_networks(env.get("KFDEF_ALLOWED_SOURCE_NETWORKS", ""),
                                                 "KFDEF_ALLOWED_SOURCE_NETWORKS"),
                          cluster=parse_networks(env.get("KFDEF_CLUSTER_NETWORKS", ""), "KFDEF_CLUSTER_NETWORKS")),
                      local_roots=tuple(Path(p) for p in env.get("KFDEF_LOCAL_SOURCE_ROOTS", "").split(os.pathsep)
                                        if p))
        if env.get("KFDEF_FETCH_TIMEOUT"):
            options = replace(options, timeout=parse_duration(env["KFDEF_FETCH_TIMEOUT"], "KFDEF_FETCH_TIMEOUT"))
        if env.get("KFDEF_FETCH_READ_TIMEOUT"):
            options = replace(options, read_timeout=parse_duration(env["KFDEF_FETCH_READ_TIMEOUT"],
                                                                   "KFDEF_FETCH_READ_TIMEOUT"))
        return replace(options, **overrides)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CacheLimits:
    """How much the source cache may hold, and how long an entry no KfDef uses is kept."""

    max_size: int = 1 * GiB  #: bytes of archives, trees, git mirrors and staging together
    ttl: float = 3600.0  #: seconds an entry no KfDef uses is kept after its last use
    grace: float = 60.0  #: entries used this recently are never removed (a reconcile may be about to use them)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> CacheLimits:
        """Defaults, then ``KFDEF_SOURCE_CACHE_MAX_SIZE`` and ``KFDEF_SOURCE_CACHE_TTL``."""
        env = os.environ if environ is None else environ
        limits = cls()
        if env.get("KFDEF_SOURCE_CACHE_MAX_SIZE"):
            limits = replace(limits, max_size=parse_size(env["KFDEF_SOURCE_CACHE_MAX_SIZE"],
                                                         "KFDEF_SOURCE_CACHE_MAX_SIZE"))
        if env.get("KFDEF_SOURCE_CACHE_TTL"):
            limits = replace(limits, ttl=parse_duration(env["KFDEF_SOURCE_CACHE_TTL"], "KFDEF_SOURCE_CACHE_TTL"))
        return limits
