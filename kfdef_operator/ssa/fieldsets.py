"""Field sets of server-side apply's ``managedFields`` (``FieldsV1``): paths, differences, unions, values (pure).

A ``FieldsV1`` tree maps path elements to subtrees: ``f:<name>`` a field, ``k:<JSON object>`` the item of a keyed
list whose key fields hold those values, ``v:<JSON value>`` the item of a set, ``i:<n>`` an item by position; the
key ``.`` marks the node itself as owned (a map or list item that exists because of its manager). A
:data:`FieldPath` is the tuple of those elements from the object's root, spelled as in the tree.

Only what the operator reads of others' field sets lives here: which parts of one tree another does not hold
(:func:`outside`), the union of trees (:func:`union`), where a path leads in an object (:func:`locate`,
:func:`value_at`) and how it reads for a person (:func:`describe`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from kfdef_operator.api.types import JSON

FieldPath = tuple[str, ...]
#: What :func:`value_at` answers for a path that leads nowhere in an object.
MISSING: Any = object()

_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-]+")


def outside(theirs: JSON, ours: JSON, ignored: Callable[[FieldPath], bool] = lambda path: False,
            prefix: FieldPath = ()) -> Iterator[FieldPath]:
    """The topmost nodes of the tree ``theirs`` that the tree ``ours`` has no node at: a map, list item or field
    that only they hold is one path, not one per field below it. A node both hold (``.`` or not) is shared.
    Paths ``ignored`` are left out, with what lies below them; a node only they hold that has such a path below it
    is not one path but its parts around that one."""
    for element, child in theirs.items():
        path = (*prefix, element)
        if element == "." or ignored(path):
            continue
        subtree = child if isinstance(child, dict) else {}
        if element in ours:
            yield from outside(subtree, ours[element] if isinstance(ours[element], dict) else {}, ignored, path)
        elif _ignores_below(subtree, ignored, path):
            yield from outside(subtree, {}, ignored, path)
        else:
            yield path


def _ignores_below(tree: JSON, ignored: Callable[[FieldPath], bool], prefix: FieldPath) -> bool:
    return any(element != "." and (ignored(path := (*prefix, element))
                                   or isinstance(child, dict) and _ignores_below(child, ignored, path))
               for element, child in tree.items())


def union(*trees: JSON) -> JSON:
    """Every node of every tree, as one tree."""
    merged: dict[str, Any] = {}
    for tree in trees:
        for element, child in tree.items():
            merged[element] = union(merged.get(element) or {}, child if isinstance(child, dict) else {})
    return merged


def locate(obj: Any, path: FieldPath) -> list[str | int] | None:
    """The JSON pointer tokens of ``path`` in ``obj`` (list items by their position now), or None when the path
    leads nowhere (an item no longer there, a field removed)."""
    tokens: list[str | int] = []
    node = obj
    for element in path:
        kind, _, text = element.partition(":")
        if kind == "f" and isinstance(node, dict) and text in node:
            tokens.append(text)
            node = node[text]
            continue
        if not isinstance(node, list):
            return None
        try:
            wanted = json.loads(text) if kind in ("k", "v") else int(text)
        except ValueError:
            return None
        if kind == "i":
            index = wanted if isinstance(wanted, int) and 0 <= wanted < len(node) else None
        else:
            index = next((i for i, item in enumerate(node) if _matches(kind, item, wanted)), None)
        if index is None:
            return None
        tokens.append(index)
        node = node[index]
    return tokens


def _matches(kind: str, item: Any, wanted: Any) -> bool:
    if kind == "v":
        return bool(item == wanted)
    return isinstance(item, dict) and isinstance(wanted, dict) and all(
        key in item and item[key] == value for key, value in wanted.items())


def value_at(obj: Any, path: FieldPath) -> Any:
    """The value ``path`` leads to in ``obj``, or :data:`MISSING`."""
    tokens = locate(obj, path)
    if tokens is None:
        return MISSING
    node = obj
    for token in tokens:
        node = node[token]
    return node


def pointer(tokens: list[str | int]) -> str:
    """A JSON pointer (RFC 6901) from :func:`locate`'s tokens."""
    return "".join("/" + str(token).replace("~", "~0").replace("/", "~1") for token in tokens)


def describe(path: FieldPath) -> str:
    """``spec.template.spec.containers[name=app].image``, ``metadata.labels[app.kubernetes.io/name]``: a path as a
    person reads it (a set's item as ``[="value"]``, an item by position as ``[3]``)."""
    text = ""
    for element in path:
        kind, _, rest = element.partition(":")
        if kind == "f":
            text += f".{rest}" if _PLAIN_NAME.fullmatch(rest) else f"[{rest}]"
        elif kind == "k":
            try:
                keys = json.loads(rest)
            except ValueError:
                keys = None
            if isinstance(keys, dict):
                text += "[" + ",".join(f"{key}={_scalar(value)}" for key, value in keys.items()) + "]"
            else:
                text += f"[{rest}]"
        elif kind == "v":
            text += f"[={rest}]"
        else:
            text += f"[{rest}]"
    return text.lstrip(".")


def _scalar(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
