"""The apply phase read from kube-apiserver's audit log: the operator's writes of stack objects only."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.cluster import stack_writes_span

T0 = 1_800_000_000.0


def _event(received: float, done: float, *, resource: str = "deployments", agent: str = "kfdef-operator/0.1",
           subresource: str = "", uri: str = "/apis/apps/v1/namespaces/a/deployments/x") -> dict:
    def stamp(seconds: float) -> str:
        return datetime.fromtimestamp(T0 + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    ref = {"resource": resource, **({"subresource": subresource} if subresource else {})}
    return {"verb": "patch", "userAgent": agent, "objectRef": ref, "requestURI": uri,
            "requestReceivedTimestamp": stamp(received), "stageTimestamp": stamp(done)}


def _plane(tmp_path: Path, events: list[dict], *, before: str = "") -> SimpleNamespace:
    log = tmp_path / "audit.log"
    log.write_text(before + "".join(json.dumps(event) + "\n" for event in events) + '{"cut short')
    return SimpleNamespace(audit_log=log)


def test_the_operators_writes_of_stack_objects(tmp_path: Path) -> None:
    plane = _plane(tmp_path, [
        _event(0.5, 0.6, resource="kfdefs", subresource="status"),        # its status
        _event(1.0, 1.2),                                                  # first stack object
        _event(1.1, 1.3, resource="events"),
        _event(1.2, 1.25, agent="kube-controller-manager/v1.36.4"),        # someone else's
        _event(2.0, 9.0, uri="/apis/apps/v1/namespaces/a/deployments/x?dryRun=All"),
        _event(4.0, 4.5, resource="customresourcedefinitions", agent="kopf/1.38"),
        _event(5.0, 5.1, resource="deployments", subresource="status"),
        _event(7.0, 7.2),                                                  # after `until`: a heal
    ])
    begin, end = stack_writes_span(plane, 0, until=T0 + 6.0)
    assert (begin - T0, end - T0) == (pytest.approx(1.0), pytest.approx(4.5))


def test_only_what_follows_the_offset(tmp_path: Path) -> None:
    earlier = json.dumps(_event(0.0, 0.1)) + "\n"
    plane = _plane(tmp_path, [_event(3.0, 3.5)], before=earlier)
    begin, end = stack_writes_span(plane, len(earlier), until=T0 + 10)
    assert (begin - T0, end - T0) == (pytest.approx(3.0), pytest.approx(3.5))


def test_none_without_such_writes(tmp_path: Path) -> None:
    assert stack_writes_span(_plane(tmp_path, [_event(1.0, 1.1, resource="kfdefs")]), 0, until=T0 + 10) is None
    assert stack_writes_span(SimpleNamespace(audit_log=tmp_path / "missing.log"), 0, until=T0) is None
