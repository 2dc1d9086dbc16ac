"""Real Kubeflow release trees (``$KFDEF_STACKS_DIR`` or ``../shared/stacks``), rendered offline once per session.

The archives are used in place: the operator's own source layer unpacks them into a session cache, as it would a
``file:`` repo. ``make test`` sets ``KFDEF_STACKS_DIR``, fetching the archives when there is no ``../shared/stacks``
(``kfdef_dev/stacks.py``).
"""

from __future__ import annotations

import copy
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kfdef_dev.releases import ARCHIVES, MODERN_SAMPLE, STACKS
from kfdef_dev.stacks import STACKS_HINT
from kfdef_operator.api.kfdef import KfDef, Repo, parse_kfdef
from kfdef_operator.build.render import RenderedApplication, render
from kfdef_operator.source.cache import SourceCache
from kfdef_operator.source.options import FetchOptions
from kfdef_operator.source.resolve import ResolvedSource, resolve_source
from tests.kustomize_cli import cli_build

#: The kfctl KfDef files users downloaded for v1.2.0 (all of them use stacks rendering).
KFCTL_V1_2_0 = ("kfctl_k8s_istio.v1.2.0.yaml", "kfctl_aws.v1.2.0.yaml", "kfctl_istio_dex.v1.2.0.yaml",
                "kfctl_openshift.v1.2.0.yaml")

JSON = dict[str, Any]


@dataclass
class Rendered:
    """A KfDef rendered by the operator, next to ``kustomize build`` of the same entry points."""

    kfdef: KfDef
    applications: list[RenderedApplication]
    plain: dict[str, list[JSON]] = field(default_factory=dict)  # application name -> plain kustomize's objects

    @property
    def objects(self) -> list[JSON]:
        return [obj for app in self.applications for obj in app.objects]


@pytest.fixture(scope="session")
def release_trees(tmp_path_factory) -> dict[str, ResolvedSource]:
    """Each release archive resolved as a local ``file:`` repo named ``manifests``."""
    missing = [name for name in ARCHIVES.values() if not (STACKS / name).is_file()]
    if missing:
        pytest.fail(f"release archives {', '.join(missing)} not found in {STACKS}: {STACKS_HINT}")
    cache = SourceCache(tmp_path_factory.mktemp("sources"))
    options = FetchOptions(local_roots=(STACKS,))  # the one directory these local sources may come from
    return {version: resolve_source(Repo("manifests", (STACKS / archive).as_uri()), cache, options)
            for version, archive in ARCHIVES.items()}


def kfdef_for(document: JSON, tree: ResolvedSource) -> KfDef:
    """``document`` with every repo pointing at the local tree's archive instead of GitHub."""
    document = copy.deepcopy(document)
    for repo in document["spec"]["repos"]:
        repo["uri"] = tree.uri
    return parse_kfdef(document, default_name="kubeflow")


class PlainKustomize:
    """``kustomize build`` of entry points as kfctl or a user builds them, each (mode, path) once per session:
    stacks through kfctl's wrapper ``resources: [../../<path>]`` with load restrictor none, a plain entry point
    directly."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._built: dict[tuple[str, Path], list[JSON]] = {}

    def build(self, mode: str, package: Path) -> list[JSON]:
        key = (mode, package)
        if key not in self._built:
            if mode == "plain":
                self._built[key] = cli_build(package)
            else:
                wrapper = self.workdir / f"w{len(self._built)}" / "kustomize" / package.name
                wrapper.mkdir(parents=True)
                (wrapper / "kustomization.yaml").write_text(
                    yaml.safe_dump({"resources": [os.path.relpath(package, wrapper)]}))
                self._built[key] = cli_build(wrapper, load_restrictor="LoadRestrictionsNone")
        return self._built[key]


@pytest.fixture(scope="session")
def plain_kustomize(tmp_path_factory) -> PlainKustomize:
    return PlainKustomize(tmp_path_factory.mktemp("kfctl"))


def render_with_plain_builds(kfdef: KfDef, tree: ResolvedSource, workdir: Path, plain: PlainKustomize) -> Rendered:
    """The operator's render of ``kfdef`` and plain kustomize's build of each of its entry points."""
    applications = render(kfdef, {"manifests": tree}, workdir)
    rendered = Rendered(kfdef, applications)
    paths = {app.name: app.kustomize_config.repo_ref.path for app in kfdef.applications}  # type: ignore[union-attr]

    def build(app: RenderedApplication) -> list[JSON]:
        return plain.build(app.mode, tree.local_path / paths[app.name])

    with ThreadPoolExecutor(max_workers=2) as pool:
        rendered.plain = dict(zip((app.name for app in applications), pool.map(build, applications), strict=True))
    return rendered


@pytest.fixture(scope="session")
def v1_2_0(release_trees, plain_kustomize, tmp_path_factory) -> dict[str, Rendered]:
    """Every kfctl v1.2.0 KfDef file, rendered."""
    tree = release_trees["v1.2.0"]
    return {name: render_with_plain_builds(kfdef_for(yaml.safe_load((STACKS / "kfdefs" / name).read_text()), tree),
                                           tree, tmp_path_factory.mktemp(name), plain_kustomize)
            for name in KFCTL_V1_2_0}


@pytest.fixture(scope="session")
def v1_11_0(release_trees, plain_kustomize, tmp_path_factory) -> dict[str, Rendered]:
    """The shipped sample naming ``example/`` (plain mode), and the same entry point in kfctl's stacks mode."""
    sample = yaml.safe_load(MODERN_SAMPLE.read_text())
    as_stack = copy.deepcopy(sample)
    as_stack["spec"]["applications"][0]["name"] = "kubeflow-apps"
    tree = release_trees["v1.11.0"]
    return {mode: render_with_plain_builds(kfdef_for(document, tree), tree, tmp_path_factory.mktemp(mode),
                                           plain_kustomize)
            for mode, document in (("plain", sample), ("stacks", as_stack))}
