"""What every conversion shares: the object type, the conversion signature and its error (pure).

A conversion takes a deep copy of an object (still carrying its old apiVersion), rewrites it in place into the
successor's shape and returns notes on meaning it could not keep exactly.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

JsonObject = dict[str, Any]
Conversion = Callable[[JsonObject], tuple[str, ...]]


class NotConvertible(Exception):
    """A conversion found the object cannot be expressed in the successor version; the message says why."""


def fill_missing(target: JsonObject, defaults: Mapping[str, Any]) -> None:
    """Sets each default (recursively for nested mappings) where ``target`` has no value."""
    for key, default in defaults.items():
        if isinstance(default, Mapping) and isinstance(target.get(key), dict):
            fill_missing(target[key], default)
        elif key not in target:
            target[key] = copy.deepcopy(default)


def same_shape(obj: JsonObject) -> tuple[str, ...]:
    """The successor has the same fields: only the apiVersion changes."""
    return ()
