"""A blocking Locker's connection slots under exceptions raised by a signal
handler (``KeyboardInterrupt``, a timeout alarm) at any instant: a caller
unwound while it holds a slot (a connection taken, a place in line) gives
the slot back with its frame, so a client capped by ``max_connections``
(redis-py 8.1 caps its pools at 100 by default) never runs out of slots
nobody holds; and the cap still holds against callers that are alive."""

from __future__ import annotations

import gc
import signal
import threading
import time

import pytest
import redis

import dlock
from dlock.errors import Failure
from harness import holder

CAP = 2


class Interrupted(BaseException):
    """Raised by the signal handler, as ``KeyboardInterrupt`` would be."""


def _raise(signum, frame):
    raise Interrupted()


def capped_locker(server) -> dlock.Locker:
    return dlock.Locker(redis.Redis(port=server.port, max_connections=CAP))


def test_a_caller_unwound_holding_a_connection_gives_its_slot_back(server):
    """A connection taken and dropped without being handed back (what an
    exception between taking it and the ``try`` that returns it leaves),
    many times the cap: every slot comes back, and two connections can
    still be had at once."""
    lk = capped_locker(server)
    node = lk.topology.single
    for _ in range(5 * CAP):
        conn = node.get(1.0)
        del conn
    taken = [node.get(1.0) for _ in range(CAP)]
    for conn in taken:
        node.give_back(conn)
    with lk.lock("after-leaks", ttl=5) as lease:
        assert holder(server.conn(), "after-leaks") == (lease.token, lease.fence)
    with node._lock:
        assert node._slots.open == len(node._slots.idle) + len(node._owners.out)


def test_a_caller_interrupted_in_line_for_a_connection_takes_no_slot(server):
    """A caller waiting in line (every slot in use) is interrupted; the
    slots freed after it are not handed to it: both can be had again."""
    lk = capped_locker(server)
    node = lk.topology.single
    taken = [node.get(1.0) for _ in range(CAP)]
    old = signal.signal(signal.SIGALRM, _raise)
    try:
        with pytest.raises(Interrupted):
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            node.get(30.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    for conn in taken:
        node.give_back(conn)
    again = [node.get(1.0) for _ in range(CAP)]
    for conn in again:
        node.give_back(conn)
    with node._lock:
        assert node._slots.short_q == type(node._slots.short_q)()
        assert node._slots.open == CAP and len(node._owners.out) == 0


def test_the_cap_holds_against_callers_alive(server):
    """Taking back slots only ever takes those nobody holds: with the cap's
    connections held, another caller waits in line and gets none."""
    lk = capped_locker(server)
    node = lk.topology.single
    taken = [node.get(1.0) for _ in range(CAP)]
    gc.collect()
    with pytest.raises(Failure, match="no connection free"):
        node.get(0.3)
    with node._lock:
        assert node._slots.open == CAP
    for conn in taken:
        node.give_back(conn)
    assert lk.lock("after-cap", ttl=5).acquire() is not None


def test_a_slot_its_owner_dropped_reaches_a_caller_already_in_line(server):
    """A caller stands in line (every slot in use); a holder is unwound
    without handing its connection back: the caller gets that slot before
    its time runs out, rather than an error."""
    lk = capped_locker(server)
    node = lk.topology.single
    held = [node.get(1.0) for _ in range(CAP)]
    got: list = []

    def caller() -> None:
        try:
            node.give_back(node.get(3.0))
            got.append("a connection")
        except Exception as e:
            got.append(repr(e))

    t = threading.Thread(target=caller)
    t.start()
    deadline = time.monotonic() + 30
    while not node._slots.short_q:
        assert time.monotonic() < deadline, "the caller never stood in line"
        time.sleep(0.005)
    held.pop()  # dropped without being handed back
    t.join(30)
    assert not t.is_alive()
    for conn in held:
        node.give_back(conn)
    assert got == ["a connection"]


def test_a_caller_interrupted_in_line_lets_go_while_the_exception_is_handled(server):
    """While an interrupt is being handled, the frames it unwound live on
    in its traceback: the interrupted caller's place in line is let go of
    at once, so a connection handed back meanwhile goes to the next caller,
    not to the unwound one."""
    lk = capped_locker(server)
    node = lk.topology.single
    held = [node.get(1.0) for _ in range(CAP)]
    old = signal.signal(signal.SIGALRM, _raise)
    got = None
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            node.get(30.0)
        except Interrupted:
            signal.setitimer(signal.ITIMER_REAL, 0)
            node.give_back(held.pop())
            got = node.get(1.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert got is not None
    node.give_back(got)
    for conn in held:
        node.give_back(conn)
