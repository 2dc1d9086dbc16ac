"""Bounded disk: which source cache entries go, which stay, and how fetches share the space."""

from __future__ import annotations

import io
import os
import tarfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from kfdef_operator.api.kfdef import Repo
from kfdef_operator.source.cache import CacheFull, SourceCache
from kfdef_operator.source.errors import SourceError
from kfdef_operator.source.gc import CacheEntry, select_removals
from kfdef_operator.source.options import CacheLimits, FetchOptions, MiB
from kfdef_operator.source.resolve import resolve_sources

LIMITS = CacheLimits(max_size=100, ttl=3600, grace=60)
NOW = 1_000_000.0


def entry(name: str, size: int, idle: float) -> CacheEntry:
    return CacheEntry(Path("/cache/trees") / name, size, NOW - idle)


def names(chosen: list[CacheEntry]) -> list[str]:
    return [e.path.name for e in chosen]


def test_unused_entries_go_after_the_ttl_and_in_use_or_recent_ones_never():
    entries = [entry("old", 10, 4000), entry("old-in-use", 10, 9000), entry("fresh", 10, 30), entry("young", 10, 600)]
    assert names(select_removals(entries, keep={Path("/cache/trees/old-in-use")}, now=NOW, limits=LIMITS)) == ["old"]


def test_over_the_size_the_least_recently_used_go_first_until_it_fits():
    entries = [entry("a", 40, 100), entry("b", 40, 300), entry("c", 40, 200), entry("recent", 40, 10)]
    assert names(select_removals(entries, keep=set(), now=NOW, limits=LIMITS)) == ["b", "c"]  # 160 -> 80
    assert names(select_removals(entries, keep=set(), now=NOW, limits=LIMITS, need=30)) == ["b", "c", "a"]
    # what cannot be removed stays, even when the cache does not fit
    assert names(select_removals(entries, keep={e.path for e in entries[:3]}, now=NOW, limits=LIMITS)) == []


def tarball_file(path: Path, text: str) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        data = text.encode() * 1000
        info = tarfile.TarInfo("top/kustomization.yaml")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    path.write_bytes(buffer.getvalue())
    return path


def test_a_released_kfdefs_sources_are_collected_and_a_live_ones_kept(tmp_path):
    cache = SourceCache(tmp_path / "cache", CacheLimits(max_size=1024 * MiB, ttl=0, grace=0))
    options = FetchOptions(local_roots=(tmp_path,), private_dirs=(cache.root,))
    kept = resolve_sources([Repo("m", str(tarball_file(tmp_path / "a.tgz", "a")))], cache, options, user="ns/kept")
    gone = resolve_sources([Repo("m", str(tarball_file(tmp_path / "b.tgz", "b")))], cache, options, user="ns/gone")
    cache.release("ns/gone")
    collection = cache.collect()
    assert kept["m"].local_path.is_dir() and not gone["m"].local_path.exists()
    assert collection.removed == 1 and collection.freed_bytes > 0
    assert not list((cache.root / "tmp").iterdir())


def test_a_fetch_needing_more_room_than_the_sources_in_use_leave_fails_clearly(tmp_path):
    cache = SourceCache(tmp_path / "cache", CacheLimits(max_size=400 * 1024, ttl=3600, grace=0))
    options = FetchOptions(local_roots=(tmp_path,), private_dirs=(cache.root,), max_unpacked_bytes=300 * 1024)
    resolve_sources([Repo("m", str(tarball_file(tmp_path / "a.tgz", "a" * 200)))], cache, options, user="ns/one")
    with pytest.raises(SourceError, match=r"the source cache is full: .*KFDEF_SOURCE_CACHE_MAX_SIZE") as caught:
        resolve_sources([Repo("m", str(tarball_file(tmp_path / "b.tgz", "b")))], cache, options, user="ns/two")
    assert caught.value.transient
    cache.release("ns/one")  # the first KfDef is deleted: its tree makes room
    assert resolve_sources([Repo("m", str(tmp_path / "b.tgz"))], cache, options, user="ns/two")["m"].local_path.is_dir()


def test_concurrent_fetches_wait_for_each_others_room(tmp_path):
    cache = SourceCache(tmp_path / "cache", CacheLimits(max_size=10 * MiB, ttl=3600, grace=0))
    order: list[str] = []
    first_in = threading.Event()

    def first() -> None:
        with cache.reserve(8 * MiB, timeout=5):
            order.append("first in")
            first_in.set()
            time.sleep(0.3)
            order.append("first out")

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(5)
    with cache.reserve(8 * MiB, timeout=5):
        order.append("second in")
    thread.join()
    assert order == ["first in", "first out", "second in"]
    with pytest.raises(CacheFull):
        with cache.reserve(11 * MiB, timeout=0.1):
            pass


def test_stale_metadata_and_the_locks_of_removed_entries_go_but_not_while_a_fetch_holds_them(tmp_path):
    cache = SourceCache(tmp_path / "cache", CacheLimits(max_size=1024 * MiB, ttl=0, grace=0))
    (cache.root / "http" / "k1.json").write_text('{"digest": "gone"}')
    (cache.root / "locks" / "http-k1.lock").touch()
    (cache.root / "git" / "k2").mkdir()
    (cache.root / "locks" / "git-k2.lock").touch()
    old = time.time() - 10
    os.utime(cache.root / "git" / "k2", (old, old))
    with cache.lock("git-k2"):  # a fetch of that repository is running
        cache.collect()
        assert (cache.root / "git" / "k2").is_dir()
    cache.collect()
    assert not list((cache.root / "http").iterdir()) and not list((cache.root / "git").iterdir())
    assert sorted(p.name for p in (cache.root / "locks").iterdir()) == ["collector.lock"]


def test_without_limits_nothing_is_removed(tmp_path):
    cache = SourceCache(tmp_path / "cache")
    (cache.root / "trees" / "sha256-x").mkdir()
    old = time.time() - 10**6
    os.utime(cache.root / "trees" / "sha256-x", (old, old))
    assert cache.collect().removed == 0 and (cache.root / "trees" / "sha256-x").is_dir()
    with cache.reserve(10**15, timeout=0):
        pass


def test_cache_settings_from_the_environment():
    limits = CacheLimits.from_env({"KFDEF_SOURCE_CACHE_MAX_SIZE": "512Mi", "KFDEF_SOURCE_CACHE_TTL": "2h"})
    assert (limits.max_size, limits.ttl) == (512 * MiB, 7200)
    assert replace(CacheLimits.from_env({}), grace=60) == CacheLimits()
    with pytest.raises(ValueError, match="KFDEF_SOURCE_CACHE_MAX_SIZE: 'lots'"):
        CacheLimits.from_env({"KFDEF_SOURCE_CACHE_MAX_SIZE": "lots"})
    options = FetchOptions.from_env({"KFDEF_FETCH_TIMEOUT": "5m", "KFDEF_LOCAL_SOURCE_ROOTS": "/srv/a:/srv/b"})
    assert options.timeout == 300 and options.local_roots == (Path("/srv/a"), Path("/srv/b"))
    assert FetchOptions.from_env({}).local_roots == () and not FetchOptions.from_env({}).networks.allowed
