"""Unit-test fixtures: Kubeflow's v1.2.0 release tree (``$KFDEF_STACKS_DIR`` or ``../shared/stacks``), unpacked once
per session the way the operator unpacks a tarball source."""

from __future__ import annotations

from pathlib import Path

import pytest

from kfdef_dev.stacks import STACKS_HINT, configured_stacks_dir
from kfdef_operator.api.kfdef import Repo
from kfdef_operator.source.cache import SourceCache
from kfdef_operator.source.options import FetchOptions
from kfdef_operator.source.resolve import ResolvedSource, resolve_source

STACKS = configured_stacks_dir()


@pytest.fixture(scope="session")
def kubeflow_v1_2_source(tmp_path_factory) -> ResolvedSource:
    """The v1.2.0 release tarball (kfctl's stacks) as a resolved source."""
    archive = STACKS / "kubeflow-manifests-v1.2.0.tar.gz"
    if not archive.is_file():
        pytest.fail(f"{archive} is missing: {STACKS_HINT}")
    return resolve_source(Repo("manifests", str(archive)), SourceCache(tmp_path_factory.mktemp("sources")),
                          FetchOptions.from_env({}, local_roots=(STACKS,)))  # the one directory it may read


@pytest.fixture(scope="session")
def kubeflow_v1_2(kubeflow_v1_2_source: ResolvedSource) -> Path:
    return kubeflow_v1_2_source.local_path
