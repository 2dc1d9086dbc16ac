"""The server-side apply body: UTF-8 JSON that a YAML parser reads back unchanged."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kfdef_operator.ssa.client import apply_patch_body

DASHBOARD = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "grafana-dashboards"},
             "data": {"title": "Pipelines \U0001F680 \u00e9t\u00e9 \u4e2d\u6587"}}


def test_text_outside_the_basic_multilingual_plane_is_sent_as_utf8_not_as_surrogate_escapes():
    body = apply_patch_body(DASHBOARD)
    assert "\U0001F680".encode() in body and b"\\ud83d" not in body
    assert yaml.safe_load(body) == json.loads(body) == DASHBOARD


@pytest.mark.parametrize("text", ["\x85", "\u2028", "\u2029", "\x7f", "\x9f", "\ufeff", "\ufffe", "\t\n\r\x00"])
def test_code_points_yaml_cannot_carry_literally_stay_escaped(text):
    body = apply_patch_body({"data": {"k": f"a{text}b"}})
    assert yaml.safe_load(body) == json.loads(body) == {"data": {"k": f"a{text}b"}}


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(st.characters(exclude_categories=["Cs"])),
                    lambda children: st.lists(children, max_size=3)
                    | st.dictionaries(st.text(st.characters(exclude_categories=["Cs"])), children, max_size=3),
                    max_leaves=8))
def test_any_value_reads_back_the_same_as_json_and_as_yaml(value):
    body = apply_patch_body({"value": value})
    assert json.loads(body) == {"value": value}
    assert yaml.load(body, Loader=yaml.SafeLoader) == {"value": value}
