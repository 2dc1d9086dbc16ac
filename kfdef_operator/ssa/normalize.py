"""Rendered objects made fit for server-side apply (pure)."""

from __future__ import annotations

import base64
import copy

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.aggregation import without_controller_rules


def normalize(obj: JSON) -> JSON:
    """A rendered object made fit for server-side apply (a copy).

    Drops ``status``, server-populated metadata and the rules of an
    aggregated ClusterRole (kube-controller-manager writes those, see
    :mod:`kfdef_operator.ssa.aggregation`), and turns Secret ``stringData``
    into ``data`` so that the live object compares equal.
    """
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.setdefault("metadata", {})
    for key in ("creationTimestamp", "resourceVersion", "uid", "generation", "managedFields", "selfLink"):
        meta.pop(key, None)
    if out.get("kind") == "Secret" and out.get("apiVersion") == "v1" and out.get("stringData"):
        data = out.setdefault("data", {}) or {}
        for key, value in out.pop("stringData").items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        out["data"] = data
    return without_controller_rules(out)
