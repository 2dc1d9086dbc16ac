"""How the HA tests read kube-apiserver's audit log: which writes to an object took effect.

A replica killed while it waits for an answer leaves a 504 in the log whether or not the server stored the write
(seen: a killed leader's create of a Deployment recorded as 504, then the standby's apply created it, HTTP 201).
"""

from tests.reliability.replicas import Write, landed


def write(user: str, verb: str, code: int, at: float) -> Write:
    return Write(user, verb, "deployments", "", "stack", "operator", code, at)


def test_an_unanswered_create_followed_by_a_create_did_not_take_effect():
    lost = write("replica-0", "create", 504, 1.0)
    healed = write("replica-1", "patch", 201, 4.0)
    assert landed([healed, lost], "replica-0") == [healed]


def test_an_unanswered_write_with_no_later_create_counts_as_stored():
    stored = write("replica-0", "patch", 504, 1.0)
    again = write("replica-1", "patch", 200, 4.0)
    assert landed([stored, again], "replica-0") == [stored, again]


def test_a_delete_in_between_means_both_creates_took_effect():
    first = write("replica-0", "create", 504, 1.0)
    deleted = write("replica-1", "delete", 200, 2.0)
    second = write("replica-1", "patch", 201, 3.0)
    assert landed([first, deleted, second], "replica-0") == [first, deleted, second]


def test_only_the_killed_replicas_timeouts_are_guessed_at():
    failed = write("replica-1", "patch", 504, 1.0)
    refused = write("replica-0", "patch", 409, 2.0)
    assert landed([failed, refused], "replica-0") == []
