"""The operator's parts on the in-memory API server (tests/fake_kube.py): a KfDef, a canned renderer, and the parts
the composition root wires (:func:`~kfdef_operator.controller.wiring.assemble`), started and stopped.

Only rendering is canned (:class:`CannedRender`, the renderer the operator's Settings take): kustomize is not what
these tests are about, and the render helper is a Go build. The KfDef's one source is a local directory.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kfdef_operator.api.names import kfdef_path
from kfdef_operator.build.isolated import IsolatedRender
from kfdef_operator.build.render import RenderedApplication
from kfdef_operator.controller.settings import Settings
from kfdef_operator.controller.wiring import Parts, assemble
from kfdef_operator.source.options import FetchOptions
from tests.fake_kube import FakeApiServer

NAME, NAMESPACE = "stack", "owners"
KFDEF = kfdef_path(NAMESPACE, NAME)
CM_COLLECTION = "/api/v1/namespaces/apps/configmaps"
EVENTS = f"/namespaces/{NAMESPACE}/events"

OBJECTS = (
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "first", "namespace": "apps"},
     "data": {"k": "v"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "second", "namespace": "apps"},
     "data": {"k": "v"}},
)


@dataclass(frozen=True)
class CannedRender(IsolatedRender):
    """Renders every KfDef as one application holding ``objects``, with ``warnings``."""

    objects: tuple[dict[str, Any], ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())

    def settings(self) -> str:
        return f"canned:{len(self.objects)}"

    def __call__(self, kfdef: Any, sources: Mapping[str, Any], workdir: Path, *,
                 progress: Callable[[RenderedApplication], None] | None = None,
                 interrupt: Any = None) -> list[RenderedApplication]:
        return [RenderedApplication("app", "plain", [dict(obj) for obj in self.objects], warnings=self.warnings)]


def kfdef(repo: Path, **metadata: Any) -> dict:
    """The KfDef rendering the application ``app`` of the local source ``repo``."""
    return {"apiVersion": "kfdef.apps.kubeflow.org/v1", "kind": "KfDef",
            "metadata": {"name": NAME, "namespace": NAMESPACE, **metadata},
            "spec": {"repos": [{"name": "manifests", "uri": str(repo)}],
                     "applications": [{"name": "app", "kustomizeConfig": {"repoRef": {"name": "manifests",
                                                                                      "path": "app"}}}]}}


def source(tmp_path: Path) -> Path:
    """A local source holding the application ``app`` (what it holds is the canned renderer's)."""
    (tmp_path / "repo" / "app").mkdir(parents=True)
    (tmp_path / "repo" / "app" / "kustomization.yaml").write_text("resources: []\n")
    return tmp_path / "repo"


def cluster() -> FakeApiServer:
    """An API server holding the KfDef's namespace."""
    server = FakeApiServer()
    server.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    return server


def settings(repo: Path, objects: tuple[dict[str, Any], ...] = OBJECTS, *, renderer: IsolatedRender | None = None,
             **overrides: Any) -> Settings:
    """Settings whose fetches may read ``repo`` and whose renderer renders ``objects`` (unless one is given)."""
    return Settings(work_dir=repo.parent / "work", renderer=renderer or CannedRender(objects=objects),
                    fetch_options=FetchOptions.from_env({}, local_roots=(repo.parent,)), work_threads=1,
                    **overrides)


@contextlib.asynccontextmanager
async def started(server: FakeApiServer, operator_settings: Settings) -> AsyncIterator[Parts]:
    """The parts of an operator on ``server``, discovery loaded; stopped at the end (no reconciler runs them)."""
    parts = assemble(server.client(), operator_settings)
    await parts.discovery.refresh()
    try:
        yield parts
    finally:
        await parts.healer.stop()
        parts.refresher.halt()
        await parts.tracker.close()
        parts.work_pool.shutdown()
