"""Manifest repositories written for tests and benchmarks: kfctl v1.0-style kustomize packages, and a tree packed
as the tarball a release URL serves."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]


def _dump(path: Path, docs: list[JSON] | JSON) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    docs = docs if isinstance(docs, list) else [docs]
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))


def write_package(root: Path, path: str, objects: list[JSON], *, overlays: dict[str, JSON] | None = None,
                  params: dict[str, str] | None = None) -> None:
    """A v1.0-style package: ``<path>/base/{kustomization,objects}.yaml`` and optional overlays."""
    base = root / path / "base"
    files = []
    for index, obj in enumerate(objects):
        name = f"{index:02d}-{obj['kind'].lower()}.yaml"
        _dump(base / name, obj)
        files.append(name)
    kustomization: JSON = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                           "resources": files}
    if params is not None:
        (base / "params.env").write_text("".join(f"{k}={v}\n" for k, v in params.items()))
        kustomization["configMapGenerator"] = [{"name": f"{Path(path).name}-parameters", "envs": ["params.env"]}]
        kustomization["generatorOptions"] = {"disableNameSuffixHash": True}
    _dump(base / "kustomization.yaml", kustomization)
    for overlay, content in (overlays or {}).items():
        _dump(root / path / "overlays" / overlay / "kustomization.yaml",
              {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "bases": ["../../base"],
               **content})


def tarball(root: Path, *, top: str = "manifests") -> bytes:
    """``root`` as a .tar.gz with everything under one top-level directory (as GitHub serves archives)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(root, arcname=top)
    return buffer.getvalue()
