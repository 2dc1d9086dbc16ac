"""DesiredStateBuilder alone, on the in-memory API server: the Build it returns (the desired state and the Plan the
stack takes in one call), the steps it announces, what it refuses, and that it writes nothing anywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kfdef_operator.api.kfdef import parse_kfdef
from kfdef_operator.api.names import API_UPGRADE_ANNOTATION
from kfdef_operator.build.render import RenderError
from kfdef_operator.controller.builder import Build, quietly
from kfdef_operator.controller.failures import Fail
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.ssa.discovery import Resource
from kfdef_operator.ssa.inventory import ObjectRef
from kfdef_operator.ssa.webhooks import Webhook
from tests import virtual_time
from tests.fake_kube import FakeApiServer
from tests.fake_operator import NAME, NAMESPACE, CannedRender, cluster, kfdef, settings, source, started

OWNER = Owner(NAME, NAMESPACE, "uid-of-the-kfdef")
NAMESPACE_REF = ObjectRef("", "Namespace", "", "apps")
FIRST = ObjectRef("", "ConfigMap", "apps", "first")
JOB = ObjectRef("batch", "Job", "apps", "migrate")
GUARD = ObjectRef("admissionregistration.k8s.io", "ValidatingWebhookConfiguration", "", "guard")
WIDGET = ObjectRef("example.com", "Widget", "apps", "w")

OBJECTS = (
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}},
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "first", "namespace": "apps"}, "data": {"k": "1"}},
    {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate", "namespace": "apps"},
     "spec": {"ttlSecondsAfterFinished": 60, "template": {"spec": {"containers": []}}}},
    {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
     "metadata": {"name": "guard"},
     "webhooks": [{"name": "guard.example.com", "failurePolicy": "Fail",
                   "clientConfig": {"service": {"name": "guard", "namespace": "apps"}}}]},
    # Rendered twice: the later one wins, and the status notes it.
    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "first", "namespace": "apps"}, "data": {"k": "2"}},
    # No CRD serves it, in the cluster or in the stack: never sent.
    {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "apps"}},
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return source(tmp_path)


def with_jobs() -> FakeApiServer:
    server = cluster()
    server.serve(Resource("batch", "v1", "Job", "jobs", True))
    return server


def build(server: FakeApiServer, repo: Path, *, renderer: Any = None, **annotations: str
          ) -> tuple[Build, list[tuple[str, str]], list[bool]]:
    """A build of the KfDef rendering :data:`OBJECTS`: its result, the steps it announced, and whether the builder
    said it was building at each step."""
    operator_settings = settings(repo, OBJECTS, renderer=renderer)
    body = kfdef(repo, annotations=annotations)
    steps: list[tuple[str, str]] = []
    building: list[bool] = []

    async def scenario() -> Build:
        async with started(server, operator_settings) as parts:
            async def step(reason: str, message: str) -> None:
                steps.append((reason, message))
                building.append(parts.builder.building(OWNER.key))

            built = await parts.builder.build(OWNER, parse_kfdef(body), body, step)
            assert not parts.builder.building(OWNER.key)
            return built

    return virtual_time.run(scenario()), steps, building


def test_a_build_returns_the_plan_of_the_generation_announces_its_steps_and_writes_nothing(repo) -> None:
    server = with_jobs()
    built, steps, building = build(server, repo)

    assert steps == [("FetchingSources", "fetching 1 source"), ("Rendering", "rendering 1 application")]
    assert building == [True, True], "a new generation can interrupt the fetch and the render"
    assert server.received(writes_only=True) == []
    plan = built.plan
    assert list(plan.objects) == [NAMESPACE_REF, JOB, GUARD, FIRST], "render order, a duplicate in the later place"
    assert plan.objects[FIRST]["data"] == {"k": "2"}
    assert built.desired.objects == plan.objects
    assert set(plan.resources) == set(plan.objects) and plan.resources[JOB].plural == "jobs"
    assert plan.application_of == dict.fromkeys(plan.objects, "app") and plan.applications == ["app"]
    assert plan.run_once == {JOB}
    assert plan.webhooks == {"guard.example.com": Webhook("ValidatingWebhookConfiguration guard",
                                                          "guard.example.com", "service apps/guard")}
    assert [change.ref for change in plan.rejected] == [WIDGET]
    assert "example.com/v1 is not served by this cluster" in plan.rejected[0].message
    assert plan.reported["sources"] == [{"name": "manifests", "uri": str(repo),
                                         "revision": plan.reported["sources"][0]["revision"]}]
    assert plan.reported["warnings"] == ["rendered twice (last wins): ConfigMap apps/first"]
    assert plan.reported["upgrades"] == {"count": 0, "kinds": [], "notes": []} and built.upgraded == ""


def test_the_stack_takes_the_plan_in_one_call(repo) -> None:
    built, _, _ = build(with_jobs(), repo)
    stack = Stack(OWNER, 1)
    stack.reported["kept"] = "what the builder does not report stays"

    stack.take(built.plan)

    assert list(stack.desired) == list(built.plan.objects) and stack.desired[FIRST]["data"] == {"k": "2"}
    assert stack.resources is built.desired.resources, "served kinds added by the apply are the desired state's"
    assert (stack.application_of, stack.applications, stack.run_once, stack.webhooks, stack.rejected) == (
        built.plan.application_of, ["app"], {JOB}, built.plan.webhooks, built.plan.rejected)
    assert stack.reported == {"kept": "what the builder does not report stays", **built.plan.reported}


def test_render_warnings_are_reported_under_their_application(repo) -> None:
    built, _, _ = build(with_jobs(), repo, renderer=CannedRender(objects=OBJECTS, warnings=("a note",)))
    assert built.plan.reported["warnings"] == ["rendered twice (last wins): ConfigMap apps/first",
                                               "application 'app': a note"]


class FailingRender(CannedRender):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RenderError("app", "accumulating resources: no such file")


def test_what_cannot_be_built_fails_with_its_reason_and_whether_a_retry_can_help(repo) -> None:
    with pytest.raises(Fail) as render:
        build(with_jobs(), repo, renderer=FailingRender())
    assert (render.value.failure.reason, render.value.failure.retrying, render.value.base) == (
        "RenderFailed", True, 30.0)

    with pytest.raises(Fail) as unserved:
        build(with_jobs(), repo, **{API_UPGRADE_ANNOTATION: "off"})
    assert (unserved.value.failure.reason, unserved.value.failure.retrying) == ("UnservedApiVersions", False)

    with pytest.raises(Fail) as policy:
        build(with_jobs(), repo, **{API_UPGRADE_ANNOTATION: "sometimes"})
    assert (policy.value.failure.reason, policy.value.failure.retrying) == ("InvalidSpec", False)


def test_a_standby_builds_quietly(repo) -> None:
    server = with_jobs()
    body = kfdef(repo)

    async def scenario() -> Build:
        async with started(server, settings(repo, OBJECTS)) as parts:
            return await parts.builder.build(OWNER, parse_kfdef(body), body, quietly)

    assert FIRST in virtual_time.run(scenario()).plan.objects
    assert server.received(writes_only=True) == []
