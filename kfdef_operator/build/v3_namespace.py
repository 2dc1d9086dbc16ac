"""Which kustomizations of a copied tree need, and can take, kustomize v3's meaning of ``namespace:``.

kustomize v5's ``namespace:`` also renames Namespace objects to that namespace; v3 (kfctl's) did not. The renderer
keeps v3's meaning by moving ``namespace:`` into an explicit NamespaceTransformer listed under ``transformers:``.
That is right only for kustomizations written for v3, and that transformer runs later than the built-in one would:
after ``replacements:``, which then no longer find the namespace they read (``fieldPath metadata.namespace is
missing for replacement source``), and after ``patchesJson6902``, whose targets may name the namespace. Trees
written for v5 also refer to Namespace objects by the names v5 gives them (a patch deleting
``notebook-controller-system``, renamed from ``system``). So a kustomization is rewritten only where that is

* **safe**: none of the kustomizations the build reads (from the entry points, through ``resources``, ``bases``
  and ``components``) uses a field kustomize v3.2 did not have (``replacements``, ``components``, ``labels``,
  ``sortOptions``, ...: such a tree was written for v5, and v5's meaning is the right one), and the kustomization
  has no ``patchesJson6902`` target that names a namespace; and
* **needed**: a Namespace object whose name differs from the kustomization's namespace passes through it (read
  from its resource files and, recursively, from the kustomizations it includes; a reference that cannot be read
  here, such as a remote one, counts as possibly holding one). Elsewhere v3 and v5 build the same objects.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from kfdef_operator.build import safe_yaml
from kfdef_operator.build.confinement import KUSTOMIZATION_FILES, is_remote

# Only files with a Namespace document are parsed: most resource files are large CRDs and Deployments.
_NAMESPACE_KIND = re.compile(r"^kind:\s*[\"']?Namespace[\"']?\s*$", re.MULTILINE)
_INCLUDES = ("resources", "bases", "components")
# Fields kustomize v3.2 (kfctl's) did not have; a kustomize component (kind Component) came with v3.7.
_NEWER_THAN_V3_2 = ("replacements", "components", "labels", "sortOptions", "helmCharts", "buildMetadata")


def _listed(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


class KustomizationTree:
    """The kustomizations of one copied tree under ``root``, each read once."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._files: dict[Path, tuple[Path, dict[str, Any]] | None] = {}
        self._namespaces: dict[Path, frozenset[str] | None] = {}

    def kustomization(self, directory: Path) -> tuple[Path, dict[str, Any]] | None:
        """``directory``'s kustomization file and content, or None when it has none that parses as a mapping."""
        directory = directory.resolve()
        if directory not in self._files:
            self._files[directory] = _read(directory)
        return self._files[directory]

    def everywhere(self) -> list[Path]:
        """Every directory of the tree that holds a kustomization."""
        return [Path(directory) for directory, _, _ in os.walk(self.root) if self.kustomization(Path(directory))]

    def reachable(self, entry_points: Iterable[Path]) -> list[Path]:
        """The kustomization directories the builds of ``entry_points`` read, inside the tree, in visiting order."""
        seen: dict[Path, None] = {}
        pending = [path.resolve() for path in entry_points]
        while pending:
            directory = pending.pop()
            if directory in seen or not self._inside(directory) or self.kustomization(directory) is None:
                continue
            seen[directory] = None
            for reference in self._references(directory):
                path = self._resolve(directory, reference)
                if path is not None and path.is_dir():
                    pending.append(path)
        return list(seen)

    def namespace_objects(self, directory: Path) -> frozenset[str] | None:
        """Names of the Namespace objects ``directory``'s kustomization includes; None when some include cannot be
        read here."""
        directory = directory.resolve()
        if directory in self._namespaces:
            return self._namespaces[directory]
        self._namespaces[directory] = None  # a cycle reads as unknown; kustomize reports it
        names: set[str] | None = set() if self.kustomization(directory) is not None else None
        for reference in self._references(directory):
            found = self._namespaces_in(self._resolve(directory, reference))
            if found is None:
                names = None
                break
            names |= found  # type: ignore[operator]  # not None: there is a kustomization to have references
        self._namespaces[directory] = None if names is None else frozenset(names)
        return self._namespaces[directory]

    def _references(self, directory: Path) -> list[object]:
        found = self.kustomization(directory)
        return [reference for key in _INCLUDES for reference in _listed(found[1].get(key))] if found else []

    def _inside(self, path: Path) -> bool:
        return path == self.root or self.root in path.parents

    def _resolve(self, directory: Path, reference: object) -> Path | None:
        """The local path a reference names inside the tree; None for remote ones and those leaving the tree."""
        if not isinstance(reference, str) or is_remote(reference):
            return None
        path = (directory / reference).resolve()
        return path if self._inside(path) else None

    def _namespaces_in(self, path: Path | None) -> frozenset[str] | None:
        if path is None:
            return None
        if path.is_dir():
            return self.namespace_objects(path)
        try:
            text = path.read_text()
            if not _NAMESPACE_KIND.search(text):
                return frozenset()
            documents = safe_yaml.load_all(text)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            return None
        return frozenset(str((doc.get("metadata") or {}).get("name")) for doc in documents
                         if isinstance(doc, dict) and doc.get("kind") == "Namespace")


def written_for_v3(kustomizations: Iterable[Mapping[str, Any]]) -> bool:
    """Whether kustomizations use only what kustomize v3.2 knew."""
    return not any(kustomization.get("kind") == "Component" or any(key in kustomization for key in _NEWER_THAN_V3_2)
                   for kustomization in kustomizations)


def to_rewrite(tree: KustomizationTree, directories: list[Path]) -> list[Path]:
    """Which of ``directories`` (those one build reads) get ``namespace:`` as a transformer (see the module doc)."""
    kustomizations = {directory: found[1] for directory in directories if (found := tree.kustomization(directory))}
    if not written_for_v3(kustomizations.values()):
        return []
    return [directory for directory, kustomization in kustomizations.items()
            if _needs_v3_meaning(directory, kustomization, tree)]


def _needs_v3_meaning(directory: Path, kustomization: Mapping[str, Any], tree: KustomizationTree) -> bool:
    namespace = kustomization.get("namespace")
    if not namespace or any(isinstance(patch, Mapping) and (patch.get("target") or {}).get("namespace")
                            for patch in _listed(kustomization.get("patchesJson6902"))):
        return False
    found = tree.namespace_objects(directory)
    return found is None or bool(found - {namespace})


def _read(directory: Path) -> tuple[Path, dict[str, Any]] | None:
    for name in KUSTOMIZATION_FILES:
        path = directory / name
        if path.is_file():
            try:
                loaded = safe_yaml.read_file(path)
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                return None
            return (path, loaded) if isinstance(loaded, dict) else None
    return None
