"""Objects the API server refuses for their content: told apart from transient failures, reported once, not resent.

A refusal for content (invalid, malformed, a value of the wrong type) comes back the same for the same object, so
sending it again only writes: it waits for a new generation, new source revisions or the resync. Anything that
depends on something besides the object (a conflict, throttling, permissions, a webhook that cannot be called, a
policy's denial) is retried with backoff as before.
"""

from __future__ import annotations

import asyncio

import pytest

from kfdef_operator.runtime.ownership import Owner
from kfdef_operator.runtime.stack import Stack
from kfdef_operator.runtime.status import settled_refusals
from kfdef_operator.ssa.apply import TYPED_PATCH_REFUSAL, Applier, ApplyOptions, is_content_refusal
from kfdef_operator.ssa.changeset import REFUSED_NOTE, Action, Change, refusal
from kfdef_operator.ssa.client import KubeApiError
from kfdef_operator.ssa.inventory import ref_of

OWNER = Owner("kf", "kubeflow", "kfdef-uid")
SERVICE = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bad-port", "namespace": "apps"},
           "spec": {"ports": [{"port": 70000}]}}
REF = ref_of(SERVICE)
OTHER = ref_of({**SERVICE, "metadata": {"name": "other", "namespace": "apps"}})
SOURCES = [{"name": "manifests", "uri": "/repo", "revision": "dir-sha256:1"}]
NOW = 1_000.0


def api_error(status: int, message: str, reason: str = "") -> KubeApiError:
    return KubeApiError(status, "PATCH", "/api/v1/namespaces/apps/services/bad-port",
                        {"reason": reason, "message": message})


@pytest.mark.parametrize(("status", "message"), [
    (422, 'Service "bad-port" is invalid: spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535'),
    (400, "the object provided is unrecognized (must be of type Service)"),
    (413, "Request entity too large: limit is 3145728"),
    (500, f"{TYPED_PATCH_REFUSAL} (/v1, Kind=Service) apps/bad-type: .spec.ports[0].port: expected numeric, got "
          "string"),
])
def test_refusals_for_content(status, message):
    assert is_content_refusal(api_error(status, message))


@pytest.mark.parametrize(("status", "message"), [
    (409, "Operation cannot be fulfilled on services \"bad-port\": the object has been modified"),
    (429, "too many requests"),
    (401, "Unauthorized"),
    (403, 'services "bad-port" is forbidden: User "system:serviceaccount:apps:deployer" cannot patch resource'),
    (404, 'namespaces "apps" not found'),
    (500, 'Internal error occurred: failed calling webhook "check.example.io": failed to call webhook: Post '
          '"https://check.apps.svc:443/validate": dial tcp 10.0.0.1:443: connect: connection refused'),
    (500, "etcdserver: request timed out"),
    (503, "the server is currently unable to handle the request"),
    (504, "Timeout: request did not complete within requested timeout"),
    (400, 'admission webhook "deny.example.io" denied the request: not today'),
    (422, "ValidatingAdmissionPolicy 'ports' with binding 'ports' denied request: failed expression"),
])
def test_transient_failures_and_policy_denials_are_no_refusal_for_content(status, message):
    assert not is_content_refusal(api_error(status, message))


def test_a_refusal_is_told_by_its_message_which_status_keeps():
    refused = refusal(REF, "422 Invalid: spec.ports[0].port: Invalid value: 70000")
    assert refused.refused and refused.action is Action.FAILED
    assert refused.message.startswith(REFUSED_NOTE) and refused.message.endswith("70000")
    assert Change(REF, Action.FAILED, refused.message).refused  # read back from status.failures
    assert not Change(REF, Action.FAILED, "409 Conflict: the object has been modified").refused


def test_a_settled_object_is_reported_without_being_sent():
    applier = Applier(None, None, None, None)  # type: ignore[arg-type]  # nothing may be called
    change = asyncio.run(applier.apply_one(None, SERVICE, None, None,  # type: ignore[arg-type]
                                           ApplyOptions(settled={REF: f"{REFUSED_NOTE}: 422 Invalid"})))
    assert change == Change(REF, Action.FAILED, f"{REFUSED_NOTE}: 422 Invalid")


def reported_stack(*, sources: list | None = None) -> Stack:
    """A stack whose status (as read from the API server) reports one refusal and one transient failure."""
    stack = Stack(OWNER, 3)
    stack.want({REF: SERVICE, OTHER: {**SERVICE, "metadata": {"name": "other", "namespace": "apps"}}})
    stack.reported["sources"] = SOURCES
    stack.status = {"observedGeneration": 3, "sources": SOURCES if sources is None else sources,
                    "failures": [{"object": str(REF), "message": f"{REFUSED_NOTE}: 422 Invalid: port 70000"},
                                 {"object": str(OTHER), "message": "409 Conflict: the object has been modified"}]}
    return stack


def settled(stack: Stack, *, announce: bool = False) -> dict:
    return settled_refusals(stack, announce=announce, now=NOW)


def test_a_reported_refusal_is_not_sent_again_for_the_same_generation_and_sources():
    # The first run since a start (no resync scheduled yet) included: a restart sends nothing new.
    assert settled(reported_stack()) == {REF: f"{REFUSED_NOTE}: 422 Invalid: port 70000"}


def test_a_reported_refusal_is_sent_again_when_the_generation_sources_or_resync_call_for_it():
    assert settled(reported_stack(), announce=True) == {}  # a new generation, or the run after a failed one
    assert settled(reported_stack(sources=[{**SOURCES[0], "revision": "dir-sha256:2"}])) == {}
    resynced = reported_stack()
    resynced.resync_at = NOW - 1
    assert settled(resynced) == {}
    waiting = reported_stack()
    waiting.resync_at = NOW + 600
    assert REF in settled(waiting)

