"""YAML from untrusted files, read with limits on size and nesting.

A manifest tree is written by someone with less power than the operator, so every YAML file the operator itself
parses (kustomizations, kustomize plugin configurations, ``configurations:`` files) is first checked against
:data:`MAX_YAML_BYTES`, :data:`MAX_DEPTH` and :data:`MAX_ALIASED_NODES`. The check walks libyaml's event stream,
which uses a heap stack rather than recursion, and stops at the first level too deep or the first alias that makes the
document too large; only then is the document composed (recursive in C) by the fast loader.

Aliases cost nothing to compose (an alias is the same Python object again) but everything to walk: ten levels of
ten references each fit in 600 bytes and expand to ten billion nodes, which any walk of the parsed value (the
``!!binary`` check, a rewrite, a dump to JSON) would visit one by one. Counting each alias as the nodes it stands
for bounds every later walk, whatever it does, as kustomize's own YAML reader bounds alias expansion.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

MAX_YAML_BYTES = 4 * 1024 * 1024
"""Largest YAML file the operator parses itself (Kubeflow's largest kustomization is about 20 KB)."""

MAX_DEPTH = 128
"""Deepest nesting of mappings and sequences accepted anywhere (Kubeflow v1.11's deepest CRD schema: 43)."""

MAX_ALIASED_NODES = 100_000
"""Most nodes the aliases of one YAML stream may stand for, beyond the nodes it writes out (Kubeflow v1.2's most
aliased file, knative-eventing's cluster-role.yaml: 1,364 nodes written, 109 more through its 14 aliases)."""

_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


class YamlLimitError(yaml.YAMLError):
    """A YAML document is too large, nested too deeply or aliased too much to be parsed safely."""


def _where(event: yaml.Event) -> str:
    mark = event.start_mark
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""


def check_limits(text: str | bytes, *, max_depth: int = MAX_DEPTH, max_aliased: int = MAX_ALIASED_NODES) -> None:
    """Raise :class:`YamlLimitError` when a document of ``text`` nests deeper than ``max_depth``, or when its
    aliases, expanded, stand for more than ``max_aliased`` nodes in all."""
    aliased = 0
    expanded = 0                          # nodes of the stream so far, each alias counted as the nodes it stands for
    opened: list[tuple[str | None, int]] = []  # open collections: (anchor, ``expanded`` before them)
    sizes: dict[str, int] = {}            # anchor -> nodes it stands for, in the current document
    for event in yaml.parse(text, Loader=SafeLoader):
        if isinstance(event, yaml.DocumentStartEvent):
            sizes.clear()
        elif isinstance(event, yaml.AliasEvent):
            size = sizes.get(event.anchor or "", 1)  # an unknown anchor: the composer refuses the document
            aliased += size
            expanded += size
            if aliased > max_aliased:
                raise YamlLimitError(f"its aliases stand for more than {max_aliased} nodes{_where(event)}")
        elif isinstance(event, yaml.ScalarEvent):
            expanded += 1
            if event.anchor is not None:
                sizes[event.anchor] = 1
        elif isinstance(event, _OPEN):
            opened.append((event.anchor, expanded))
            expanded += 1
            if len(opened) > max_depth:
                raise YamlLimitError(f"nested deeper than {max_depth} levels{_where(event)}")
        elif isinstance(event, _CLOSE):
            anchor, before = opened.pop()
            if anchor is not None:
                sizes[anchor] = expanded - before


def load_all(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> list[Any]:
    """Every document of ``text`` (``None`` for empty ones), after the limits are checked."""
    check_limits(text, max_depth=max_depth)
    return list(yaml.load_all(text, Loader=SafeLoader))


def load(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """The single document of ``text``, after the limits are checked."""
    check_limits(text, max_depth=max_depth)
    return yaml.load(text, Loader=SafeLoader)


def read_file(path: Path, *, max_bytes: int = MAX_YAML_BYTES, max_depth: int = MAX_DEPTH,
              all_documents: bool = False, opener: Callable[[str, int], int] | None = None) -> Any:
    """Parse the YAML file at ``path`` (one document, or a list of all when ``all_documents``) within the limits,
    opened by ``opener`` when given (as the builtin ``open`` takes it).

    Raises ``OSError`` when it cannot be read and :class:`yaml.YAMLError` (:class:`YamlLimitError` for the limits)
    when it is not acceptable YAML.
    """
    with open(path, "rb", opener=opener) as stream:
        data = stream.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise YamlLimitError(f"larger than the {max_bytes}-byte limit for YAML the operator parses")
    return load_all(data, max_depth=max_depth) if all_documents else load(data, max_depth=max_depth)


def nesting_depth(value: Any) -> int:
    """How deeply ``value`` (parsed YAML or JSON) nests mappings and lists; computed without recursion."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        pending.extend((child, depth + 1) for child in children)
    return deepest


def binary_field(value: Any) -> str | None:
    """Where ``value`` (parsed YAML) holds a ``!!binary`` scalar, as ``bases[0]`` or ``openapi.path``; None when it
    holds none. Kustomize reads such a value as text, a Python reader as bytes, so the operator's own readers of
    kustomizations refuse it rather than read it differently."""
    pending: list[tuple[Any, str]] = [(value, "")]
    while pending:
        item, where = pending.pop()
        if isinstance(item, bytes):
            return where or "(the document)"
        if isinstance(item, dict):
            pending.extend((child, f"{where}.{key}" if where else str(key)) for key, child in item.items())
        elif isinstance(item, list):
            pending.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
    return None
