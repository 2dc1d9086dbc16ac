"""The real Kubeflow release archives (``../shared/stacks``, or ``$KFDEF_STACKS_DIR``) the release tests and the
benchmark deploy, and the repair v1.11.0's example needs under the pinned kustomize."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]

ROOT = Path(__file__).resolve().parents[1]
STACKS = Path(os.environ.get("KFDEF_STACKS_DIR") or ROOT.parent / "shared" / "stacks")
ARCHIVES = {"v1.2.0": "kubeflow-manifests-v1.2.0.tar.gz", "v1.11.0": "kubeflow-manifests-v1.11.0.tar.gz"}
MODERN_SAMPLE = ROOT / "kfdefs" / "kubeflow-v1.11.0-kustomize.yaml"


def v1_11_0_profile_repair(tree: Path) -> list[JSON]:
    """Kustomize patches giving v1.11.0's example Profile the name and owner kustomize 5.7.1 gives it.

    ``example/`` names its user Profile through ``replacements`` that select it by its placeholder name
    ``$(profile-name)``; kustomize 5.8 reads a selected name as a regular expression, which that placeholder never
    matches, so the Profile keeps it and the API server refuses it. The release pins kustomize 5.7.1. The values
    come from the release's own ``params.env``.
    """
    params = dict(line.split("=", 1) for line in (tree / "common/user-namespace/base/params.env").read_text().split())
    return [{"target": {"group": "kubeflow.org", "kind": "Profile"}, "patch": yaml.safe_dump([
        {"op": "replace", "path": "/metadata/name", "value": params["profile-name"]},
        {"op": "replace", "path": "/spec/owner/name", "value": params["user"]}])}]
