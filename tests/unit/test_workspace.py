"""The build layer's per-KfDef directories: removed with their KfDef, and when it was deleted while the
operator was not running."""

from __future__ import annotations

import os
import time

from kfdef_operator.build import workspace
from kfdef_operator.build.cache import RenderCache


def _kfdef_files(work_dir, cache, namespace, name, age=0.0):
    directory = workspace.render_dir(work_dir, namespace, name)
    (directory / "kustomize").mkdir(parents=True)
    cache.root.mkdir(parents=True, exist_ok=True)
    cache.path_for(namespace, name).write_text("{}")
    then = time.time() - age
    for path in (directory, cache.path_for(namespace, name)):
        os.utime(path, (then, then))
    return directory, cache.path_for(namespace, name)


def test_forget_removes_the_render_directory_and_the_cached_render(tmp_path):
    cache = RenderCache(tmp_path / "rendered", lambda *a: [], lambda: "")
    directory, cached = _kfdef_files(tmp_path, cache, "ns", "kf")
    other = _kfdef_files(tmp_path, cache, "ns", "other")
    workspace.forget(tmp_path, cache, "ns", "kf")
    assert not directory.exists() and not cached.exists()
    assert all(p.exists() for p in other)


def test_collect_removes_what_no_live_kfdef_owns_once_it_is_old_enough(tmp_path):
    cache = RenderCache(tmp_path / "rendered", lambda *a: [], lambda: "")
    live = _kfdef_files(tmp_path, cache, "ns", "live", age=10_000)
    deleted = _kfdef_files(tmp_path, cache, "gone", "kf", age=10_000)
    recent = _kfdef_files(tmp_path, cache, "ns", "new", age=5)
    (cache.root / "tmpx1234.tmp").write_text("")  # an interrupted write
    os.utime(cache.root / "tmpx1234.tmp", (0, 0))
    removed = workspace.collect(tmp_path, cache, {("ns", "live")}, grace=600)
    assert sorted(p.name for p in removed) == ["gone_kf.json", "kf", "tmpx1234.tmp"]
    assert all(p.exists() for p in live + recent) and not any(p.exists() for p in deleted)
    assert not (tmp_path / "render" / "gone").exists()
    assert cache.entries() and {(ns, name) for ns, name, _ in cache.entries()} == {("ns", "live"), ("ns", "new")}
