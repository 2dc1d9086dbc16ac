"""Rendered objects made fit for server-side apply (pure)."""

from __future__ import annotations

import base64

from kfdef_operator.api.types import JSON
from kfdef_operator.ssa.aggregation import without_controller_rules


def normalize(obj: JSON) -> JSON:
    """A rendered object made fit for server-side apply (a new object; ``obj`` is left as it was).

    Only what changes is copied (the top level, ``metadata``, a Secret's
    ``data``): the rest, ``spec`` above all, is shared with ``obj``, since
    deep-copying every rendered object took a tenth of a no-op reconcile's CPU.
    Drops ``status``, server-populated metadata and the rules of an
    aggregated ClusterRole (kube-controller-manager writes those, see
    :mod:`kfdef_operator.ssa.aggregation`), and turns Secret ``stringData``
    into ``data`` so that the live object compares equal.
    """
    out = dict(obj)
    out.pop("status", None)
    meta = out["metadata"] = dict(out.get("metadata") or {})
    for key in ("creationTimestamp", "resourceVersion", "uid", "generation", "managedFields", "selfLink"):
        meta.pop(key, None)
    string_data, data = out.get("stringData"), out.get("data") or {}
    # Mappings only: any other shape goes to the API server as written, which refuses it with its own message.
    if (out.get("kind") == "Secret" and out.get("apiVersion") == "v1" and string_data
            and isinstance(string_data, dict) and isinstance(data, dict)):
        del out["stringData"]
        out["data"] = {**data, **{key: base64.b64encode(str(value).encode()).decode()
                                  for key, value in string_data.items()}}
    return without_controller_rules(out)
