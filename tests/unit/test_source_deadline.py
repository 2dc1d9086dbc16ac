"""The total deadline of a fetch: its arithmetic, and how it wakes a read blocked on a socket."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from kfdef_operator.source.deadline import Deadline, DeadlineExceeded


def test_waits_are_shortened_to_what_is_left_and_refused_after_it():
    now = [100.0]
    deadline = Deadline(10, clock=lambda: now[0])
    assert deadline.remaining() == 10 and deadline.bound(60) == 10 and deadline.bound(2) == 2
    now[0] = 106.5
    assert deadline.remaining() == 3.5 and deadline.bound(60) == 3.5 and not deadline.expired
    now[0] = 110.0
    assert deadline.remaining() == 0 and deadline.expired
    with pytest.raises(DeadlineExceeded, match="10 s deadline"):
        deadline.bound(1)
    now[0] = 200.0
    assert deadline.remaining() == 0  # never negative


def test_expiry_wakes_a_read_blocked_on_a_socket():
    reader, writer = socket.socketpair()
    received: list[bytes] = []
    with Deadline(0.3) as deadline:
        deadline.on_expiry(lambda: reader.shutdown(socket.SHUT_RDWR))
        started = time.monotonic()
        thread = threading.Thread(target=lambda: received.append(reader.recv(10)))
        thread.start()
        thread.join(5)
    assert not thread.is_alive() and received == [b""], "the blocked read did not return at the deadline"
    assert 0.25 <= time.monotonic() - started < 2
    late = threading.Event()
    deadline.on_expiry(late.set)  # registered after expiry: runs at once
    assert late.is_set()
    reader.close()
    writer.close()


def test_nothing_fires_once_the_fetch_is_over():
    fired = threading.Event()
    with Deadline(0.2) as deadline:
        deadline.on_expiry(fired.set)
    assert not fired.wait(0.5)
