"""The on-disk render cache: an unchanged KfDef is not rendered twice, any change renders again."""

from __future__ import annotations

import copy
import dataclasses

import yaml

from kfdef_operator.api.kfdef import parse_kfdef
from kfdef_operator.build.render import render
from kfdef_operator.build.cache import RenderCache
from tests.unit.test_render import FIXTURES, local_sources


def counting_cache(tmp_path):
    calls = []

    def renderer(*args):
        calls.append(args)
        return render(*args)

    return RenderCache(tmp_path / "cache", renderer), calls


def body() -> dict:
    obj = yaml.safe_load((FIXTURES / "kfdefs" / "local-legacy.yaml").read_text())
    obj["metadata"].update({"name": "kf", "uid": "uid-1"})
    return obj


def test_a_second_render_of_the_same_kfdef_and_sources_comes_from_the_cache(tmp_path):
    cache, calls = counting_cache(tmp_path)
    first = cache.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    again = RenderCache(cache.root, calls.append).render(body(), parse_kfdef(body()), local_sources(), tmp_path / "w2")
    assert len(calls) == 1  # the second cache object (a restarted operator) never called its renderer
    assert [(a.name, a.mode, a.objects) for a in again] == [(a.name, a.mode, a.objects) for a in first]


def test_a_changed_spec_or_source_revision_renders_again(tmp_path):
    cache, calls = counting_cache(tmp_path)
    cache.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    edited = copy.deepcopy(body())
    edited["spec"]["applications"] = edited["spec"]["applications"][:1]
    cache.render(edited, parse_kfdef(edited), local_sources(), tmp_path / "work")
    moved = {k: dataclasses.replace(s, revision="other") for k, s in local_sources().items()}
    cache.render(edited, parse_kfdef(edited), moved, tmp_path / "work")
    assert len(calls) == 3


def test_an_unreadable_entry_is_rendered_again(tmp_path):
    cache, calls = counting_cache(tmp_path)
    cache.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    for entry in cache.root.glob("*.json"):
        entry.write_text("{not json")
    rendered = cache.render(body(), parse_kfdef(body()), local_sources(), tmp_path / "work")
    assert len(calls) == 2 and rendered
