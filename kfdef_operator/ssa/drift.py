"""Does a live object still hold what this operator applied? (pure)

The desired object is compared as a *subset* of the live one: fields the
server defaults (``imagePullPolicy``, ``protocol: TCP``...) or other managers
add do not count as drift, while a changed or removed desired value does.
The comparison errs on the side of "maybe drifted"; the caller confirms a
suspicion with a server-side dry-run before writing anything.
"""

from __future__ import annotations

from typing import Any
from kfdef_operator.api.types import JSON


_IGNORED_METADATA = frozenset({
    "creationTimestamp", "resourceVersion", "uid", "generation", "managedFields", "selfLink",
    "ownerReferences", "finalizers", "deletionTimestamp", "deletionGracePeriodSeconds",
})


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == []


def _scalar_equal(want: Any, have: Any) -> bool:
    if want == have:
        return True
    # int-or-string and quantities: "8080" vs 8080, 1 vs "1".
    return isinstance(want, (int, float, str)) and isinstance(have, (int, float, str)) and str(want) == str(have)


def is_subset(want: Any, have: Any) -> bool:
    """Every value in ``want`` is present and equal in ``have`` (lists position by position)."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return _empty(want) and _empty(have)
        return all(
            is_subset(value, have.get(key)) if key in have else _empty(value)
            for key, value in want.items()
        )
    if isinstance(want, list):
        if not isinstance(have, list):
            return _empty(want) and _empty(have)
        return len(want) == len(have) and all(is_subset(w, h) for w, h in zip(want, have))
    if want is None:
        return have is None or _empty(have)
    return _scalar_equal(want, have)


def drifted(desired: JSON, live: JSON) -> bool:
    """Whether ``live`` may have lost values of ``desired`` (status and server metadata ignored)."""
    for key, value in desired.items():
        if key in ("status", "apiVersion", "kind"):
            continue
        if key == "metadata":
            want = {k: v for k, v in value.items() if k not in _IGNORED_METADATA}
            have = live.get("metadata") or {}
            if not is_subset(want, have):
                return True
            continue
        if not is_subset(value, live.get(key)):
            return True
    return False


def comparable(obj: JSON) -> JSON:
    """An object without the fields that change on every write, for equality of two server answers."""
    out = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in (obj.get("metadata") or {}).items()
            if k not in ("managedFields", "resourceVersion", "generation")}
    out["metadata"] = meta
    return out
