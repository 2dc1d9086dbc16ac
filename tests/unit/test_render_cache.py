"""The on-disk render cache: an unchanged KfDef is not rendered twice, any change renders again, and its files
are trusted only when they are well-formed JSON."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import yaml

from kfdef_operator.api.kfdef import parse_kfdef
from kfdef_operator.build import cache as cache_module
from kfdef_operator.build.cache import RenderCache, applications_from_json
from kfdef_operator.build.render import render
from tests.unit.test_render import FIXTURES, local_sources


def counting_cache(tmp_path, settings="kustomize=pinned;remote-bases=refused"):
    calls = []

    def renderer(*args, interrupt=None):
        calls.append(args)
        return render(*args)

    return RenderCache(tmp_path / "cache", renderer, lambda: settings), calls


def body() -> dict:
    obj = yaml.safe_load((FIXTURES / "kfdefs" / "local-legacy.yaml").read_text())
    obj["metadata"].update({"name": "kf", "uid": "uid-1"})
    return obj


@pytest.mark.kustomize
def test_a_second_render_of_the_same_kfdef_and_sources_comes_from_the_cache(tmp_path):
    cache, calls = counting_cache(tmp_path)
    first = cache.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    again = RenderCache(cache.root, calls.append, cache._settings).render(body(), parse_kfdef(body()), local_sources(),
                                                                          tmp_path / "w2")
    assert len(calls) == 1  # the second cache object (a restarted operator) never called its renderer
    assert [(a.name, a.mode, a.objects) for a in again] == [(a.name, a.mode, a.objects) for a in first]


@pytest.mark.kustomize
def test_a_changed_spec_or_source_revision_renders_again(tmp_path):
    cache, calls = counting_cache(tmp_path)
    cache.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    edited = copy.deepcopy(body())
    edited["spec"]["applications"] = edited["spec"]["applications"][:1]
    cache.render(edited, parse_kfdef(edited), local_sources(), tmp_path / "work")
    moved = {k: dataclasses.replace(s, revision="other") for k, s in local_sources().items()}
    cache.render(edited, parse_kfdef(edited), moved, tmp_path / "work")
    assert len(calls) == 3


@pytest.mark.kustomize
def test_an_unreadable_entry_is_rendered_again(tmp_path):
    cache, calls = counting_cache(tmp_path)
    cache.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    for entry in cache.root.glob("*.json"):
        entry.write_text("{not json")
    rendered = cache.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    assert len(calls) == 2 and rendered


@pytest.mark.kustomize
def test_other_renderer_settings_render_again(tmp_path):
    """A render made while remote bases were allowed (or with another kustomize) is not reused."""
    cache, calls = counting_cache(tmp_path)
    cache.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    other, _ = counting_cache(tmp_path, settings="kustomize=pinned;remote-bases=allowed")
    other._renderer = cache._renderer
    other.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    assert len(calls) == 2


@pytest.mark.kustomize
def test_a_render_by_other_build_code_renders_again(tmp_path, monkeypatch):
    """A patched or development build of the same version never serves the old code's renders."""
    cache, calls = counting_cache(tmp_path)
    cache.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    monkeypatch.setattr(cache_module, "BUILD_CODE", "another build")
    cache.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    assert len(calls) == 2


def test_the_build_code_digest_follows_every_module(tmp_path):
    package = tmp_path / "build"
    shutil.copytree(Path(cache_module.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    before = cache_module.code_digest(package)
    assert before == cache_module.BUILD_CODE
    (package / "render.py").write_text((package / "render.py").read_text() + "\n# patched\n")
    assert cache_module.code_digest(package) != before


@pytest.mark.kustomize
@pytest.mark.parametrize("tamper", [
    lambda e: e["applications"][0].update(objects="not a list"),
    lambda e: e["applications"][0].update(mode="exec"),
    lambda e: e["applications"][0]["objects"].append([1, 2]),
    lambda e: e["applications"][0].update(warnings=[{"not": "text"}]),
    lambda e: e.update(applications={"a": 1}),
    lambda e: e["applications"][0]["objects"].append({"deep": json.loads("[" * 200 + "]" * 200)}),
], ids=["objects not a list", "unknown mode", "object not a mapping", "warning not text", "not a list",
        "nested too deep"])
def test_a_malformed_entry_with_the_right_key_is_rendered_again(tmp_path, tamper):
    cache, calls = counting_cache(tmp_path)
    cache.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    [entry_path] = cache.root.glob("*.json")
    entry = json.loads(entry_path.read_text())
    tamper(entry)
    entry_path.write_text(json.dumps(entry))
    rendered = cache.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    assert len(calls) == 2 and all(isinstance(o, dict) for a in rendered for o in a.objects)
    with pytest.raises(ValueError):
        applications_from_json(entry["applications"])


def test_names_that_could_leave_the_cache_directory_are_refused(tmp_path):
    cache, _ = counting_cache(tmp_path)
    kfdef = parse_kfdef(body())
    for name in ("..", "a/../../b"):
        with pytest.raises(ValueError, match="cannot be used as a file name"):
            cache.render(body(), dataclasses.replace(kfdef, name=name), local_sources(), tmp_path / "work")
    assert not list(tmp_path.glob("*.json")) and not (tmp_path / "cache").exists()
