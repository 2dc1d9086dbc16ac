"""The audit log read while kube-apiserver writes it: a half-written last line is left for the next read.

A full run lost test_leader_killed_during_a_heal_the_object_is_healed_once to it once: JSONDecodeError,
"Unterminated string", on the line kube-controller-manager's request was still being written to.
"""

from __future__ import annotations

import json

from kfdef_dev.controlplane import complete_json_lines


def test_a_last_line_without_its_newline_is_not_read_yet() -> None:
    whole = json.dumps({"verb": "create", "user": {"username": "a"}})
    half = json.dumps({"verb": "patch", "userAgent": "kube-controller-manager"})[:30]
    assert complete_json_lines(f"{whole}\n{half}") == [json.loads(whole)]
    assert complete_json_lines(f"{whole}\n{half}") == complete_json_lines(f"{whole}\n")


def test_complete_lines_are_all_read_and_blank_ones_skipped() -> None:
    lines = [{"n": 1}, {"n": 2}]
    assert complete_json_lines("".join(json.dumps(line) + "\n" for line in lines) + "\n") == lines
    assert complete_json_lines("") == []
