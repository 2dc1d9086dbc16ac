"""A tracker's listing in pages (Tracker._relist): every page read and dispatched, what vanished reported once."""

from __future__ import annotations

import asyncio

from kfdef_operator.runtime.tracker import CRD_LIST_PAGE, LIST_PAGE, Tracker
from kfdef_operator.ssa.discovery import Resource

CONFIG_MAPS = Resource("", "v1", "ConfigMap", "configmaps", True)
CRDS = Resource("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False)


def _config_map(name: str) -> dict:
    return {"metadata": {"name": name, "namespace": "n", "uid": f"uid-{name}", "resourceVersion": "1"}}


class PagedKube:
    """Answers a listing of ConfigMaps in pages of two, as kube-apiserver answers ``limit`` and ``continue``."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.calls: list[dict] = []

    async def request(self, method: str, path: str, *, params: dict) -> dict:
        self.calls.append(dict(params))
        start = int(params.get("continue") or 0)
        page = self.names[start:start + 2]
        more = start + 2 < len(self.names)
        return {"metadata": {"resourceVersion": "42", **({"continue": str(start + 2)} if more else {})},
                "items": [_config_map(name) for name in page]}


def test_every_page_is_listed_and_dispatched_and_vanished_objects_are_reported() -> None:
    events: list[tuple[str, str]] = []
    kube = PagedKube(["a", "b", "c", "d", "e"])
    tracker = Tracker(kube, lambda kind, ref, *_: events.append((kind, ref.name)))  # type: ignore[arg-type]

    version = asyncio.run(tracker._relist(CONFIG_MAPS, ""))
    assert version == "42"
    assert events == [("ADDED", name) for name in "abcde"]
    assert [call.get("continue") for call in kube.calls] == [None, "2", "4"]
    assert all(call["limit"] == LIST_PAGE for call in kube.calls)

    events.clear()
    kube.names = ["a", "c", "e"]  # b and d deleted while no watch was open
    asyncio.run(tracker._relist(CONFIG_MAPS, ""))
    assert events == [("DELETED", "b"), ("DELETED", "d")]


def test_crds_are_listed_in_smaller_pages_than_other_kinds() -> None:
    """A release's CRDs are heavy (schemas): few per page bound the decoded listing; other kinds come as kubectl
    chunks them, so that a start sends a few listings rather than dozens."""
    kube = PagedKube(["a"])
    tracker = Tracker(kube, lambda *_: None)  # type: ignore[arg-type]
    asyncio.run(tracker._relist(CRDS, ""))
    asyncio.run(tracker._relist(CONFIG_MAPS, ""))
    assert [call["limit"] for call in kube.calls] == [CRD_LIST_PAGE, LIST_PAGE]
    assert CRD_LIST_PAGE < LIST_PAGE == 500
