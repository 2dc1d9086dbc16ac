"""YAML from untrusted files, read with limits on size and nesting.

A manifest tree is written by someone with less power than the operator, so every YAML file the operator itself
parses (kustomizations, kustomize plugin configurations, ``configurations:`` files) is first checked against
:data:`MAX_YAML_BYTES` and :data:`MAX_DEPTH`. The nesting check walks libyaml's event stream, which uses a heap
stack rather than recursion, and stops at the first level too deep; only then is the document composed (recursive in
C) by the fast loader.
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

_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


class YamlLimitError(yaml.YAMLError):
    """A YAML document is too large or nested too deeply to be parsed safely."""


def check_depth(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> None:
    """Raise :class:`YamlLimitError` when a document of ``text`` nests deeper than ``max_depth``."""
    depth = 0
    for event in yaml.parse(text, Loader=SafeLoader):
        if isinstance(event, _OPEN):
            depth += 1
            if depth > max_depth:
                mark = event.start_mark
                where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
                raise YamlLimitError(f"nested deeper than {max_depth} levels{where}")
        elif isinstance(event, _CLOSE):
            depth -= 1


def load_all(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> list[Any]:
    """Every document of ``text`` (``None`` for empty ones), after the nesting check."""
    check_depth(text, max_depth=max_depth)
    return list(yaml.load_all(text, Loader=SafeLoader))


def load(text: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """The single document of ``text``, after the nesting check."""
    check_depth(text, max_depth=max_depth)
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
