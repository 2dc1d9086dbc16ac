"""Does a live object still hold what this operator applied? (pure)

The desired object is compared as a *subset* of the live one: fields the
server defaults (``imagePullPolicy``, ``protocol: TCP``...) or other managers
add do not count as drift, nor zero values the server omits (``value: ""``,
``readOnly: false``) or quantities it writes in canonical form (``2000m`` is
``2``), while a changed or removed desired value does.
The comparison errs on the side of "maybe drifted"; the caller confirms a
suspicion with a server-side dry-run before writing anything.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from kfdef_operator.api.types import JSON

_IGNORED_METADATA = frozenset({
    "creationTimestamp", "resourceVersion", "uid", "generation", "managedFields", "selfLink",
    "ownerReferences", "finalizers", "deletionTimestamp", "deletionGracePeriodSeconds",
})


# Maps whose values are resource quantities, which the server stores in canonical form ("2000m" -> "2").
_QUANTITY_MAPS = frozenset({"limits", "requests", "hard", "capacity", "allocatable", "overhead"})
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX: dict[str | None, Decimal] = {
    None: Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal(10) ** 3,
           "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12, "P": Decimal(10) ** 15,
           "E": Decimal(10) ** 18, **{s: Decimal(2) ** (10 * (i + 1)) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti",
                                                                                           "Pi", "Ei"))}}


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == []


def _omitted(value: Any) -> bool:
    """A value the server does not return: empty, or a zero value its Go types omit (``""``, ``0``, ``false``)."""
    return _empty(value) or value in ("", 0)  # False == 0


def _quantity(value: Any) -> Decimal | None:
    match = _QUANTITY.fullmatch(str(value))
    if match is None:
        return None
    try:
        return Decimal(match[1]) * _SUFFIX[match[2]]
    except InvalidOperation:
        return None


def _scalar_equal(want: Any, have: Any, quantity: bool) -> bool:
    if want == have:
        return True
    if not (isinstance(want, (int, float, str)) and isinstance(have, (int, float, str))):
        return False
    # int-or-string: "8080" vs 8080, 1 vs "1".
    if str(want) == str(have):
        return True
    if quantity:
        value = _quantity(want)
        return value is not None and value == _quantity(have)
    return False


def is_subset(want: Any, have: Any, key: str = "", quantity: bool = False) -> bool:
    """Every value in ``want`` is present and equal in ``have`` (lists position by position).

    ``key`` is the key ``want`` sits under, ``quantity`` whether it is a value of a map of resource quantities
    (compared by value). Only these go down the tree, never the path of keys: a path built at every node of a
    CRD's schema (thousands) was most of the comparison's cost.
    """
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return _empty(want) and _empty(have)
        quantities = key in _QUANTITY_MAPS
        return all(
            is_subset(value, have.get(child), child, quantities) if child in have else _omitted(value)
            for child, value in want.items()
        )
    if isinstance(want, list):
        if not isinstance(have, list):
            return _empty(want) and _empty(have)
        return len(want) == len(have) and all(is_subset(w, h, key, quantity)
                                              for w, h in zip(want, have, strict=True))
    if want is None:
        return have is None or _empty(have)
    return _scalar_equal(want, have, quantity)


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
