"""The real Kubeflow release archives the release tests and the benchmark deploy (``$KFDEF_STACKS_DIR``,
``../shared/stacks``, or fetched by :mod:`kfdef_dev.stacks`), and the repair v1.11.0's example needs under the
pinned kustomize."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kfdef_dev.stacks import ROOT, V1_2_0_ARCHIVE, V1_11_0_ARCHIVE, configured_stacks_dir

JSON = dict[str, Any]

STACKS = configured_stacks_dir()
ARCHIVES = {"v1.2.0": V1_2_0_ARCHIVE, "v1.11.0": V1_11_0_ARCHIVE}
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
