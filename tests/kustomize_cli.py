"""The pinned kustomize CLI, as a user runs it: what the operator's renders (through the render helper) are compared
against. It is the control plane's ``kustomize`` (``tools/build-control-plane.sh``), found through ``KFDEF_K8SBIN``
or the build cache, and its YAML is read with the project's safe loader."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from kfdef_operator.build.kustomize import PINNED_VERSION, scrubbed_environment
from kfdef_operator.build.safe_yaml import SafeLoader


def cli_path() -> Path:
    """The pinned kustomize CLI; fails the test that needs it with the remedy when it is not built."""
    bin_dir = os.environ.get("KFDEF_K8SBIN")
    if bin_dir and (Path(bin_dir) / "kustomize").is_file():
        return Path(bin_dir) / "kustomize"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kfdef-operator"
    built = sorted(cache.glob(f"k8sbin-*-kustomize{PINNED_VERSION.lstrip('v')}-*/kustomize"))
    if not built:
        raise FileNotFoundError("the pinned kustomize CLI is not built: run `make control-plane`")
    return built[-1]


def cli_build(path: Path, *, load_restrictor: str = "LoadRestrictionsRootOnly",
              timeout: float = 300) -> list[dict[str, Any]]:
    """``kustomize build --load-restrictor=... path``, its objects in output order."""
    with tempfile.TemporaryDirectory(prefix="kfdef-kustomize-cli-") as home:
        done = subprocess.run([str(cli_path()), "build", f"--load-restrictor={load_restrictor}", str(path)],
                              capture_output=True, timeout=timeout, check=False, env=scrubbed_environment(Path(home)),
                              stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"kustomize build {path} failed: {done.stderr.decode(errors='replace')[-2000:]}")
    return [doc for doc in yaml.load_all(done.stdout, Loader=SafeLoader) if doc is not None]
