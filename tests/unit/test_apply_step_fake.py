"""ApplyStep alone, on the in-memory API server and in virtual time: what a run does to the cluster and to the stack,
which status it writes while it goes (the steps, the inventory ahead of the apply), and the outcome it leaves to
report (the changes, the Events, when the next run is due). No reconciler runs it: the tests play the report's
status write where a next run depends on it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kfdef_operator.api.names import FINALIZER, SUSPEND_ANNOTATION
from kfdef_operator.controller.failures import Fail
from kfdef_operator.controller.outcome import Event, Retry, RunOutcome, StatusWrite
from kfdef_operator.controller.wiring import Parts
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.ssa.changeset import Action
from tests import virtual_time
from tests.fake_kube import FakeApiServer
from tests.fake_operator import CM_COLLECTION, EVENTS, KFDEF, OBJECTS, cluster, kfdef, settings, source, started

SECOND = f"{CM_COLLECTION}/second"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return source(tmp_path)


class StatusWrites:
    """The ``write_status`` a run is given: the stack's writer, each call noted with the step and inventory size."""

    def __init__(self, parts: Parts, stack: Stack, *, refuse: bool = False) -> None:
        self._writer = parts.registry.writers[stack.key]
        self._stack = stack
        self._refuse = refuse
        self.calls: list[tuple[str | None, int]] = []

    async def __call__(self) -> bool:
        self.calls.append((self._stack.step[0] if self._stack.step else None, len(self._stack.inventory)))
        return False if self._refuse else await self._writer.update()


async def run(parts: Parts, server: FakeApiServer, *, refuse: bool = False) -> tuple[Stack, RunOutcome, StatusWrites]:
    """One run of the KfDef as the server holds it now."""
    body = server.get(KFDEF)
    assert body is not None
    stack = parts.registry.stack_for(body)
    writes = StatusWrites(parts, stack, refuse=refuse)
    return stack, await parts.apply_step.run(stack, body, writes), writes


async def reported(parts: Parts, stack: Stack) -> None:
    """The report's status write (what the next run reads)."""
    assert await parts.registry.writers[stack.key].update()


def scenario(server: FakeApiServer, repo: Path, body: dict[str, Any],
             steps: Callable[[Parts], Awaitable[Any]], objects: tuple[dict[str, Any], ...] = OBJECTS) -> Any:
    """Run ``steps`` on the parts of an operator, the KfDef ``body`` created first, in virtual time."""
    async def main() -> Any:
        server.put(body)
        async with started(server, settings(repo, objects)) as parts:
            return await steps(parts)

    return virtual_time.run(main())


def test_a_new_generation_is_applied_its_steps_written_as_they_go_and_its_outcome_left_to_report(repo) -> None:
    server = cluster()

    async def steps(parts: Parts) -> tuple[Stack, RunOutcome, StatusWrites]:
        return await run(parts, server)

    stack, outcome, writes = scenario(server, repo, kfdef(repo), steps)
    assert writes.calls == [("FetchingSources", 0), ("Rendering", 0), ("Applying", 3)], \
        "the steps, the last one with the inventory of the objects about to be created"
    assert FINALIZER in server.get(KFDEF)["metadata"]["finalizers"]
    assert {o["metadata"]["name"] for o in server.objects("ConfigMap")} == {"first", "second"}
    assert outcome.status is StatusWrite.REQUIRED
    assert outcome.events == (Event("Normal", "Applied", "3 created"),)
    assert [change.action for change in outcome.changes] == [Action.CREATED] * 3
    assert outcome.failure is None and not outcome.released
    assert isinstance(outcome.next_run, float) and 540 <= outcome.next_run <= 660, "the resync, jittered"
    assert server.received("POST", EVENTS) == [], "the run posts no Event: the report does"
    assert server.get(KFDEF)["status"]["conditions"][0]["reason"] == "Applying", "nor writes its result"
    assert stack.applied and set(stack.changes) == set(stack.desired)


def test_a_run_with_nothing_to_do_writes_nothing_and_tells_nothing(repo) -> None:
    server = cluster()

    async def steps(parts: Parts) -> tuple[RunOutcome, StatusWrites, int]:
        stack, _, _ = await run(parts, server)
        await reported(parts, stack)
        writes_before = len(server.received(writes_only=True))
        _, outcome, writes = await run(parts, server)
        return outcome, writes, len(server.received(writes_only=True)) - writes_before

    outcome, writes, writes_sent = scenario(server, repo, kfdef(repo), steps)
    assert writes.calls == [] and writes_sent == 0
    assert outcome.events == () and [c.action for c in outcome.changes] == [Action.UNCHANGED] * 3
    assert isinstance(outcome.next_run, float)


def test_a_failed_object_is_retried_with_a_backoff_from_ten_seconds(repo) -> None:
    server = cluster()
    server.fail("PATCH", SECOND, 400, 'admission webhook "guard.example.com" denied the request: not yet')

    async def steps(parts: Parts) -> RunOutcome:
        return (await run(parts, server))[1]

    outcome = scenario(server, repo, kfdef(repo), steps)
    assert outcome.next_run == Retry(10.0)
    assert outcome.status is StatusWrite.REQUIRED
    [event] = outcome.events
    assert (event.type, event.reason) == ("Warning", "ApplyFailed") and "2 created, 1 failed" in event.message


def test_a_refusal_for_content_waits_for_the_resync_and_is_told_once(repo) -> None:
    server = cluster()
    server.fail("PATCH", SECOND, 422, "data: Invalid value: refused", reason="Invalid", times=None)

    async def steps(parts: Parts) -> tuple[RunOutcome, RunOutcome, int]:
        stack, first, _ = await run(parts, server)
        await reported(parts, stack)
        _, again, _ = await run(parts, server)
        return first, again, len(server.received("PATCH", SECOND))

    first, again, sent = scenario(server, repo, kfdef(repo), steps)
    assert isinstance(first.next_run, float), "nothing a retry can change: the resync sends it again"
    assert [e.reason for e in first.events] == ["ApplyFailed"]
    assert again.events == (), "status.failures reports it already: nothing new to tell"
    assert isinstance(again.next_run, float) and sent == 1, "and it is not sent again before the resync"


def test_objects_no_longer_rendered_are_pruned_and_the_prune_told_in_the_outcome(repo) -> None:
    server = cluster()

    async def applied(parts: Parts) -> None:
        stack, _, _ = await run(parts, server)
        await reported(parts, stack)

    async def rerendered(parts: Parts) -> RunOutcome:
        return (await run(parts, server))[1]

    scenario(server, repo, kfdef(repo), applied)

    async def main() -> RunOutcome:  # the same KfDef, rendered without "second" (a new source revision, say)
        async with started(server, settings(repo, OBJECTS[:2])) as parts:
            return await rerendered(parts)

    outcome = virtual_time.run(main())
    assert server.get(SECOND) is None
    assert outcome.events == (Event("Normal", "Pruned", "pruned objects no longer rendered: 1 deleted"),)


def test_a_suspended_kfdef_gets_its_finalizer_and_nothing_else(repo) -> None:
    server = cluster()

    async def steps(parts: Parts) -> tuple[RunOutcome, StatusWrites]:
        _, outcome, writes = await run(parts, server)
        return outcome, writes

    outcome, writes = scenario(server, repo, kfdef(repo, annotations={SUSPEND_ANNOTATION: "true"}), steps)
    assert outcome == RunOutcome(), "its status written, no Event, no next run but on a change"
    assert writes.calls == [] and server.objects("ConfigMap") == []
    assert FINALIZER in server.get(KFDEF)["metadata"]["finalizers"]


def test_an_invalid_kfdef_fails_for_good_before_anything_is_written(repo) -> None:
    server = cluster()
    body = kfdef(repo)
    body["spec"]["applications"] = "all of them"

    async def steps(parts: Parts) -> None:
        await run(parts, server)

    with pytest.raises(Fail) as failure:
        scenario(server, repo, body, steps)
    assert (failure.value.failure.reason, failure.value.failure.retrying) == ("InvalidSpec", False)
    assert [r for r in server.received(writes_only=True) if r.path.startswith(KFDEF)] == []


def test_nothing_is_applied_before_the_inventory_is_recorded(repo) -> None:
    server = cluster()

    async def steps(parts: Parts) -> None:
        await run(parts, server, refuse=True)

    with pytest.raises(Fail) as failure:
        scenario(server, repo, kfdef(repo), steps)
    assert (failure.value.failure.reason, failure.value.failure.retrying) == ("StatusNotWritten", True)
    assert server.objects("ConfigMap") == []
