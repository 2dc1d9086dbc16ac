"""KfDef conditions and verdicts (kfdef_operator.runtime.conditions), and the health deadline read from status."""

from __future__ import annotations

import re

import pytest

from kfdef_operator.runtime import conditions as st
from kfdef_operator.runtime.conditions import (
    DEGRADED,
    MAX_MESSAGE,
    READY,
    RECONCILING,
    applied,
    conditions_equal,
    failed,
    list_objects,
    progressing,
    set_condition,
    terminating,
    truncate,
)
from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.runtime.status import health_clock, health_deadline_in, health_overdue

T0, T1, T2 = "2024-01-01T00:00:00Z", "2024-01-01T00:01:00Z", "2024-01-01T00:02:00Z"


def only(conditions: list[dict], type_: str) -> dict:
    (condition,) = [c for c in conditions if c["type"] == type_]
    return condition


# --------------------------------------------------------------------------------------------------------------------
# set_condition


def test_new_condition_gets_both_timestamps():
    (condition,) = set_condition([], READY, True, "Ready", "all good", 3, T0)
    assert condition == {"type": READY, "status": "True", "reason": "Ready", "message": "all good",
                         "observedGeneration": 3, "lastTransitionTime": T0, "lastUpdateTime": T0}


def test_unchanged_condition_keeps_both_timestamps():
    first = set_condition([], READY, True, "Ready", "all good", 1, T0)
    second = set_condition(first, READY, True, "Ready", "all good", 2, T1)
    condition = only(second, READY)
    assert (condition["lastTransitionTime"], condition["lastUpdateTime"]) == (T0, T0)
    assert condition["observedGeneration"] == 2


@pytest.mark.parametrize("reason, message", [("Ready", "all 4 objects ready"), ("Other", "all good")])
def test_same_status_new_reason_or_message_moves_only_last_update_time(reason, message):
    first = set_condition([], READY, True, "Ready", "all good", 1, T0)
    condition = only(set_condition(first, READY, True, reason, message, 1, T1), READY)
    assert (condition["lastTransitionTime"], condition["lastUpdateTime"]) == (T0, T1)
    assert (condition["reason"], condition["message"]) == (reason, message)


def test_status_flip_moves_both_timestamps():
    first = set_condition([], READY, True, "Ready", "all good", 1, T0)
    flipped = only(set_condition(first, READY, False, "Ready", "all good", 1, T1), READY)
    assert (flipped["status"], flipped["lastTransitionTime"], flipped["lastUpdateTime"]) == ("False", T1, T1)
    back = only(set_condition([flipped], READY, True, "Ready", "all good", 1, T2), READY)
    assert (back["lastTransitionTime"], back["lastUpdateTime"]) == (T2, T2)


def test_other_conditions_are_untouched_and_the_set_one_moves_last():
    degraded = {"type": DEGRADED, "status": "False", "reason": "AsExpected", "message": "", "lastTransitionTime": T0}
    conditions = set_condition([], READY, True, "Ready", "ok", 1, T0) + [degraded]
    updated = set_condition(conditions, READY, False, "Waiting", "not yet", 1, T1)
    assert updated[0] is degraded
    assert [c["type"] for c in updated] == [DEGRADED, READY]


def test_no_generation_means_no_observed_generation():
    (condition,) = set_condition([], READY, True, "Ready", "ok", None, T0)
    assert "observedGeneration" not in condition


def test_long_messages_are_truncated_and_compare_stably():
    long = "x" * (MAX_MESSAGE + 100)
    first = set_condition([], DEGRADED, True, "Attention", long, 1, T0)
    assert len(only(first, DEGRADED)["message"]) == MAX_MESSAGE
    # The stored (truncated) message equals the truncated new one: not an update.
    again = only(set_condition(first, DEGRADED, True, "Attention", long, 1, T1), DEGRADED)
    assert again["lastUpdateTime"] == T0


def test_default_timestamp_is_now_in_rfc3339():
    (condition,) = set_condition([], READY, True, "Ready", "ok", 1)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", condition["lastTransitionTime"])
    assert condition["lastTransitionTime"] == condition["lastUpdateTime"]


def test_set_condition_does_not_mutate_its_input():
    conditions = set_condition([], READY, True, "Ready", "ok", 1, T0)
    snapshot = [dict(c) for c in conditions]
    set_condition(conditions, READY, False, "Nope", "bad", 2, T1)
    assert conditions == snapshot


# --------------------------------------------------------------------------------------------------------------------
# conditions_equal


def test_conditions_equal_ignores_timestamps_and_order():
    a = set_condition(set_condition([], READY, True, "Ready", "ok", 1, T0), DEGRADED, False, "AsExpected", "", 1, T0)
    b = set_condition(set_condition([], DEGRADED, False, "AsExpected", "", 1, T2), READY, True, "Ready", "ok", 1, T1)
    assert conditions_equal(a, b)


@pytest.mark.parametrize("field, value", [
    ("status", "False"), ("reason", "Other"), ("message", "changed"), ("observedGeneration", 2), ("type", "Other"),
])
def test_conditions_equal_sees_every_other_field(field, value):
    a = set_condition([], READY, True, "Ready", "ok", 1, T0)
    b = [{**a[0], field: value}]
    assert not conditions_equal(a, b)


def test_conditions_equal_sees_a_missing_condition():
    a = set_condition([], READY, True, "Ready", "ok", 1, T0)
    assert not conditions_equal(a, [])
    assert conditions_equal([], [])


# --------------------------------------------------------------------------------------------------------------------
# verdicts


def as_conditions(verdict: st.Verdict) -> dict[str, dict]:
    return {c["type"]: c for c in verdict.apply_to([], 4)}


def test_applied_all_ready():
    verdict = applied(5, [], [], [])
    assert verdict.ready == (True, "Ready", "all 5 objects applied and ready")
    assert verdict.reconciling[0] is False
    assert verdict.degraded == st.NOT_DEGRADED


def test_applied_waiting_for_health_lists_unhealthy_objects():
    verdict = applied(5, [], [("Deployment kubeflow/web", "1/2 replicas ready"), ("CRD x", "not Established yet")], [])
    status, reason, message = verdict.ready
    assert (status, reason) == (False, "WaitingForHealth")
    assert message.startswith("2 of 5 objects not ready: ")
    assert "Deployment kubeflow/web (1/2 replicas ready)" in message and "CRD x (not Established yet)" in message
    assert verdict.degraded[0] is False


def test_applied_failures_are_degraded_apply_failed():
    failures = [(f"ConfigMap n/c{i}", "forbidden") for i in range(5)]
    verdict = applied(10, failures, [("Deployment n/web", "not ready")], [])
    assert verdict.degraded[:2] == (True, "ApplyFailed")
    assert verdict.ready[:2] == (False, "ApplyFailed")
    message = verdict.degraded[2]
    assert message.startswith("5 of 10 objects not applied: ConfigMap n/c0 (forbidden)")
    assert "c2" in message and "c3" not in message  # the first three only
    assert message.endswith("; see status.failures for all")
    assert verdict.ready[2] == message


def test_applied_three_failures_need_no_pointer_to_the_list():
    verdict = applied(3, [("a", "x"), ("b", "y"), ("c", "z")], [], [])
    assert "see status.failures" not in verdict.degraded[2]


def test_applied_problems_are_degraded_attention_while_ready():
    verdict = applied(2, [], [], ["fight: ConfigMap n/c healed 5 times", "render: duplicate object"])
    assert verdict.degraded == (True, "Attention", "fight: ConfigMap n/c healed 5 times; render: duplicate object")
    assert verdict.ready[0] is True


def test_failures_take_precedence_over_problems():
    verdict = applied(2, [("a", "x")], [], ["some problem"])
    assert verdict.degraded[1] == "ApplyFailed"


def test_verdict_apply_to_writes_three_conditions_with_one_timestamp():
    conditions = as_conditions(applied(1, [], [], []))
    assert set(conditions) == {READY, RECONCILING, DEGRADED}
    assert [conditions[t]["status"] for t in (READY, RECONCILING, DEGRADED)] == ["True", "False", "False"]
    assert len({c["lastTransitionTime"] for c in conditions.values()}) == 1
    assert all(c["observedGeneration"] == 4 for c in conditions.values())


def test_progressing_names_the_step_in_ready_too():
    verdict = progressing("Rendering", "rendering 3 applications")
    assert verdict.ready == (False, "Rendering", "rendering 3 applications")  # kubectl get's Status column
    assert verdict.reconciling == (True, "Rendering", "rendering 3 applications")
    assert verdict.degraded[0] is False


@pytest.mark.parametrize("retrying, hint", [(True, "Retrying with backoff."), (False, "Fix the KfDef to retry.")])
def test_failed(retrying, hint):
    verdict = failed("SourceFailed", "cannot fetch", retrying=retrying)
    assert verdict.ready == (False, "SourceFailed", f"cannot fetch {hint}")
    assert verdict.reconciling == (retrying, "SourceFailed", f"cannot fetch {hint}")
    assert verdict.degraded == (True, "SourceFailed", f"cannot fetch {hint}")


def test_failed_keeps_its_hint_when_the_message_is_cut():
    verdict = failed("RenderFailed", "kustomize said: " + "x" * 3000, retrying=True)
    for _, _, message in (verdict.ready, verdict.reconciling, verdict.degraded):
        assert len(message) == MAX_MESSAGE and message.endswith("x… Retrying with backoff.")
    conditions = as_conditions(verdict)  # the condition writer's own cut must not take it either
    assert conditions[READY]["message"].endswith("Retrying with backoff.")


def test_applied_keeps_the_pointer_to_the_failure_list_when_messages_are_long():
    failures = [(f"ConfigMap n/c{i}", "refused: " + "y" * 900) for i in range(5)]
    message = applied(10, failures, [], []).ready[2]
    assert len(message) <= MAX_MESSAGE and message.endswith("; see status.failures for all")


def test_waiting_for_health_keeps_the_count_of_objects_not_listed():
    unhealthy = [(f"Deployment n/web-{i}", "0/1 replicas available; " + "z" * 300) for i in range(12)]
    message = applied(12, [], unhealthy, []).ready[2]
    assert len(message) <= MAX_MESSAGE and message.startswith("12 of 12 objects not ready: ")
    assert re.search(r" and \d+ more$", message)


@pytest.mark.parametrize("stuck", [True, False])
def test_terminating(stuck):
    verdict = terminating("deleting 3 objects", stuck)
    assert verdict.ready == (False, "Terminating", "deleting 3 objects")
    assert verdict.reconciling == (True, "Terminating", "deleting 3 objects")
    assert verdict.degraded == ((True, "TeardownStuck", "deleting 3 objects") if stuck else st.NOT_DEGRADED)


# --------------------------------------------------------------------------------------------------------------------
# truncate, list_objects


@pytest.mark.parametrize("text, limit, expected", [
    ("short", 10, "short"),
    ("exactly10!", 10, "exactly10!"),
    ("eleven char", 10, "eleven ch…"),
    ("", 1, ""),
])
def test_truncate(text, limit, expected):
    assert truncate(text, limit) == expected
    assert len(truncate(text, limit)) <= limit


def test_truncate_default_limit():
    assert len(truncate("y" * 5000)) == MAX_MESSAGE


@pytest.mark.parametrize("text, limit, expected", [
    ("short", 20, "short. Do this."),
    ("a long message", 14, "a l…. Do this."),
    ("a long message", 10, "…. Do this"),
])
def test_truncate_cuts_the_text_before_the_hint(text, limit, expected):
    assert truncate(text, limit, hint=". Do this.") == expected
    assert len(truncate(text, limit, hint=". Do this.")) <= limit


@pytest.mark.parametrize("count, expected", [(0, "0 objects"), (1, "1 object"), (2, "2 objects")])
def test_counted(count, expected):
    assert st.counted(count, "object") == expected


@pytest.mark.parametrize("items, expected", [
    ([], ""),
    (["a"], "a"),
    (list("abcdefgh"), "a, b, c, d, e, f, g, h"),
    (list("abcdefghij"), "a, b, c, d, e, f, g, h and 2 more"),
])
def test_list_objects(items, expected):
    assert list_objects(iter(items)) == expected


# --- the health deadline, from status alone (issue 39, item 8) ------------------------------------------------------

def stack_with(*conditions: tuple[str, str, str, int, str]) -> Stack:
    """A stack of generation 2 whose status holds ``conditions``: (type, status, reason, generation, timestamp)."""
    stack = Stack(Owner("kf", "kubeflow", "u"), 2)
    stack.status = {"conditions": [{"type": t, "status": s, "reason": r, "message": "", "observedGeneration": g,
                                    "lastTransitionTime": at, "lastUpdateTime": at} for t, s, r, g, at in conditions]}
    return stack


def test_the_health_deadline_runs_from_the_reconcile_status_recorded_done_for_the_generation():
    done_at = st.seconds_of("2026-01-01T00:00:00Z")
    assert done_at is not None and st.seconds_of("soon") is None
    done = stack_with((RECONCILING, "False", "Done", 2, "2026-01-01T00:00:00Z"))
    assert health_clock(done) == done_at
    assert health_deadline_in(done, health_timeout=300, now=done_at + 100) == 200
    assert not health_overdue(done, health_timeout=300, now=done_at + 300)
    assert health_overdue(done, health_timeout=300, now=done_at + 301)
    assert health_deadline_in(done, health_timeout=300, now=done_at + 400) == 0
    for not_started in (stack_with((RECONCILING, "True", "Applying", 2, "2026-01-01T00:00:00Z")),
                        stack_with((RECONCILING, "False", "Done", 1, "2026-01-01T00:00:00Z")), stack_with()):
        assert health_clock(not_started) is None
        assert health_deadline_in(not_started, health_timeout=300, now=done_at + 1000) == 300
        assert not health_overdue(not_started, health_timeout=300, now=done_at + 1000)


def test_a_deadline_status_says_has_passed_stays_passed():
    suspended = stack_with((RECONCILING, "False", "Suspended", 2, "2026-01-01T00:10:00Z"),
                           (DEGRADED, "True", "HealthCheckTimeout", 2, "2026-01-01T00:05:00Z"))
    assert health_overdue(suspended, health_timeout=300, now=0)
    older = stack_with((DEGRADED, "True", "HealthCheckTimeout", 1, "2026-01-01T00:05:00Z"))
    assert not health_overdue(older, health_timeout=300, now=st.seconds_of("2026-01-01T01:00:00Z") or 0)
