"""Teardown alone, on the in-memory API server and in virtual time: a deleted KfDef's stack deleted as its identity,
or let go without deleting anything, and the outcome left to report (the Events, whether the stack is released,
which removes the finalizer, or when the teardown is retried). The stack is applied first by an ApplyStep run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kfdef_operator.api.names import FINALIZER
from kfdef_operator.controller.outcome import Retry, RunOutcome, StatusWrite
from kfdef_operator.controller.teardown import ORPHAN_FINALIZER
from kfdef_operator.controller.wiring import Parts
from kfdef_operator.runtime.stack import Stack
from tests import virtual_time
from tests.fake_kube import FakeApiServer
from tests.fake_operator import CM_COLLECTION, KFDEF, NAMESPACE, cluster, kfdef, settings, source, started

FIRST = f"{CM_COLLECTION}/first"
SERVICE_ACCOUNT = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/deployer"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return source(tmp_path)


def torn_down(server: FakeApiServer, repo: Path, *, body: dict[str, Any] | None = None,
              finalizers: list[str] | None = None, before: Any = None
              ) -> tuple[Stack, RunOutcome, list[tuple[str, bool] | None]]:
    """Apply the KfDef (``body``), delete it, run ``before(server)``, then one teardown of its stack: the stack,
    the outcome and the teardown message at each of the run's status writes. ``finalizers``: the KfDef's
    finalizers as the teardown sees them (default: as the server holds them)."""
    async def main() -> tuple[Stack, RunOutcome, list[tuple[str, bool] | None]]:
        server.put(body or kfdef(repo))
        async with started(server, settings(repo, teardown_wave_timeout=5.0)) as parts:
            await applied(parts, server)
            await server.client().request("DELETE", KFDEF)
            if before is not None:
                before(server)
            deleted = server.get(KFDEF)
            assert deleted is not None and deleted["metadata"].get("deletionTimestamp")
            if finalizers is not None:
                deleted["metadata"]["finalizers"] = finalizers
            stack = parts.registry.stack_for(deleted)
            writes: list[tuple[str, bool] | None] = []

            async def write_status() -> bool:
                writes.append(stack.teardown)
                return await parts.registry.writers[stack.key].update()

            return stack, await parts.teardown.run(stack, deleted, write_status), writes

    return virtual_time.run(main())


async def applied(parts: Parts, server: FakeApiServer) -> None:
    body = server.get(KFDEF)
    assert body is not None
    stack = parts.registry.stack_for(body)
    writer = parts.registry.writers[stack.key]
    outcome = await parts.apply_step.run(stack, body, writer.update)
    assert outcome.failure is None and await writer.update()


def test_a_deleted_kfdef_has_its_objects_deleted_and_its_stack_released_to_the_report(repo) -> None:
    server = cluster()
    stack, outcome, writes = torn_down(server, repo)

    assert writes == [("deleting 3 objects", False)], "said before the waves start"
    assert server.objects("ConfigMap") == [] and not stack.inventory
    assert outcome.released and outcome.status is StatusWrite.ATTEMPT and outcome.next_run is None
    assert [(e.type, e.reason, e.message) for e in outcome.events] == [
        ("Normal", "Deleted", "deleted 3 objects, released 0 that were not the stack's to delete")]
    assert FINALIZER in server.get(KFDEF)["metadata"]["finalizers"], "removed by the report, after the status"


def test_an_object_held_by_a_finalizer_makes_the_teardown_retry_with_its_own_backoff(repo) -> None:
    def held(server: FakeApiServer) -> None:
        server.modify(FIRST, lambda obj: obj["metadata"].__setitem__("finalizers", ["example.com/hold"]))

    server = cluster()
    stack, outcome, _ = torn_down(server, repo, before=held)

    assert not outcome.released and outcome.next_run == Retry(5.0, cap=120.0)
    [event] = outcome.events
    assert (event.type, event.reason) == ("Warning", "TeardownStuck") and "example.com/hold" in event.message
    assert stack.teardown == (event.message, True), "the status the report writes says it is stuck"


def test_a_kfdef_without_the_finalizer_is_left_alone(repo) -> None:
    server = cluster()
    stack, outcome, writes = torn_down(server, repo, finalizers=["someone.else/finalizer"])

    assert outcome == RunOutcome(StatusWrite.NONE) and writes == []
    assert len(server.objects("ConfigMap")) == 2 and stack.inventory


def test_a_kfdef_deleted_with_cascade_orphan_is_released_with_its_objects_left_in_place(repo) -> None:
    server = cluster()
    stack, outcome, writes = torn_down(server, repo, finalizers=[ORPHAN_FINALIZER, FINALIZER])

    assert outcome.released and outcome.status is StatusWrite.NONE and writes == []
    assert [(e.reason, e.message) for e in outcome.events] == [
        ("Orphaned", "the KfDef was deleted with --cascade=orphan: its 3 objects were left in place")]
    assert len(server.objects("ConfigMap")) == 2 and not stack.inventory


def test_a_kfdef_whose_service_account_is_gone_is_released_without_deleting_anything(repo) -> None:
    server = cluster()
    server.put({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer",
                                                                          "namespace": NAMESPACE}})
    body = kfdef(repo)
    body["spec"]["serviceAccountName"] = "deployer"
    stack, outcome, writes = torn_down(server, repo, body=body, before=lambda s: s.remove(SERVICE_ACCOUNT))

    assert outcome.released and outcome.status is StatusWrite.NONE and writes == []
    [event] = outcome.events
    assert (event.type, event.reason) == ("Warning", "Orphaned")
    assert "so the operator deletes none of its objects; left in place: " in event.message
    assert len(server.objects("ConfigMap")) == 2 and not stack.inventory
