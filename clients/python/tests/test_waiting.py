"""Waiting in the server's FIFO queue (WAIT, never polling), handoff, and
the wait budget."""

from __future__ import annotations

import threading
import time

import pytest

import dlock
from harness import calls, holder, wait_until, waiters


@pytest.fixture
def locker(server):
    with dlock.Locker(server.conn()) as lk:
        yield lk


def _in_thread(f):
    out = []
    t = threading.Thread(target=lambda: out.append(f()), daemon=True)
    t.start()
    return t, out


def test_a_waiter_is_handed_the_lock_on_release_in_fifo_order(server, locker):
    c = server.conn()
    before = calls(c, "dlock.acquire")
    first = locker.lock("res", ttl=30).acquire(blocking=False)
    order = []
    threads = []
    for i in range(3):
        def take(i=i):
            lease = locker.lock("res", ttl=30, wait=20).acquire()
            order.append(i)
            time.sleep(0.05)
            lease.release()
            return lease

        t, out = _in_thread(take)
        threads.append((t, out))
        wait_until(10, f"waiter {i} queued", lambda i=i: waiters(c, "res") == i + 1)
    assert first.release()
    for t, _ in threads:
        t.join(20)
    assert order == [0, 1, 2], "strict FIFO"
    fences = [out[0].fence for _, out in threads]
    assert fences == sorted(fences) and fences[0] > first.fence
    # Each waiter sent one ACQUIRE: no polling (the refresh is an EXTEND).
    assert calls(c, "dlock.acquire") == before + 1 + 3
    assert holder(c, "res") is None


def test_a_handed_over_lease_is_budgeted_from_the_send_or_refreshed(server, locker):
    c = server.conn()
    # A quick handoff: counted from the ACQUIRE's send (before the
    # server's handoff), no refresh.
    held = locker.lock("res", ttl=30).acquire(blocking=False)
    extends = calls(c, "dlock.extend")
    t, out = _in_thread(lambda: locker.lock("res", ttl=5, wait=10).acquire())
    wait_until(10, "the waiter queued", lambda: waiters(c, "res") == 1)
    time.sleep(0.2)
    held.release()
    t.join(10)
    lease = out[0]
    assert lease is not None
    assert calls(c, "dlock.extend") == extends, "no refresh"
    pttl = c.pttl("res")  # before the clock, as in test_kinds: a slow reply cannot fail the bound
    assert lease.deadline <= time.monotonic() + pttl / 1000 + 0.001
    assert 4.5 < lease.remaining() <= 5 - 0.2
    # A handoff after a third of the ttl: refreshed, and counted from the
    # refresh's send.
    extends = calls(c, "dlock.extend")
    t, out = _in_thread(lambda: locker.lock("res", ttl=1.5, wait=10).acquire())
    wait_until(10, "the waiter queued", lambda: waiters(c, "res") == 1)
    time.sleep(0.7)
    lease.release()
    t.join(10)
    late = out[0]
    assert late is not None
    assert calls(c, "dlock.extend") == extends + 1, "one refresh after the handoff"
    pttl = c.pttl("res")  # before the clock, as in test_kinds: a slow reply cannot fail the bound
    assert late.deadline <= time.monotonic() + pttl / 1000 + 0.001
    assert 1.2 < late.remaining() <= 1.5
    late.release()


def test_the_wait_budget_bounds_the_call_and_leaves_no_waiter(server, locker):
    c = server.conn()
    held = locker.lock("res", ttl=30).acquire(blocking=False)
    t0 = time.monotonic()
    assert locker.lock("res", wait=0.5).acquire() is None
    took = time.monotonic() - t0
    assert 0.45 <= took < 0.5 + 1.0, took
    assert waiters(c, "res") == 0
    with pytest.raises(dlock.NotAcquired):
        with locker.lock("res", wait=0.2):
            pass
    held.release()


def test_a_zero_wait_is_a_single_try_never_wait_0(server, locker):
    c = server.conn()
    held = locker.lock("res", ttl=30).acquire(blocking=False)
    for w in (0, 0.0004):
        t0 = time.monotonic()
        assert locker.lock("res", wait=w).acquire() is None
        assert time.monotonic() - t0 < 1.0, "WAIT 0 would wait forever"
    assert locker.lock("res").acquire(blocking=False) is None
    assert waiters(c, "res") == 0
    held.release()


def test_blocking_without_a_wait_waits_until_granted(server, locker):
    c = server.conn()
    held = locker.lock("res", ttl=30).acquire(blocking=False)
    t, out = _in_thread(lambda: locker.lock("res").acquire())
    wait_until(10, "the waiter queued", lambda: waiters(c, "res") == 1)
    time.sleep(0.3)
    assert t.is_alive()
    held.release()
    t.join(10)
    assert out[0] is not None and holder(c, "res") == (out[0].token, out[0].fence)
    out[0].release()


def test_an_expiring_lease_is_handed_to_the_waiter(server, locker):
    c = server.conn()
    held = locker.lock("res", ttl=0.3, watchdog=False).acquire(blocking=False)
    t0 = time.monotonic()
    lease = locker.lock("res", ttl=10, wait=5).acquire()
    assert lease is not None and lease.fence > held.fence
    assert time.monotonic() - t0 < 2.0
    assert held.release() is False, "its lease had ended"
    assert holder(c, "res") == (lease.token, lease.fence)
    lease.release()


def test_a_waiting_acquire_does_not_delay_another_leases_renewal(server, locker):
    c = server.conn()
    other = dlock.Locker(server.url)
    busy = other.lock("b").acquire(blocking=False)
    a = locker.lock("a").acquire(blocking=False)
    t, out = _in_thread(lambda: locker.lock("b", ttl=1, wait=3).acquire())
    wait_until(10, "the waiter queued", lambda: waiters(c, "b") == 1)
    t0 = time.monotonic()
    assert a.extend(30) and a.release()
    assert time.monotonic() - t0 < 1.0, "queued behind the waiting acquire"
    assert t.is_alive()
    t.join(10)
    assert out == [None]
    busy.release()


def test_a_higher_priority_waiter_is_handed_the_lock_first(server, locker):
    # An aging of an hour: the later, higher request is ahead whatever the
    # machine's speed.
    c = server.conn()
    c.config_set("dlock.priority-aging-ms", 3_600_000)
    first = locker.lock("res", ttl=30).acquire(blocking=False)
    order = []
    threads = []
    for i, p in enumerate((None, 9)):
        def take(p=p):
            lease = locker.lock("res", ttl=30, wait=20, priority=p).acquire()
            order.append(p)
            lease.release()
            return lease

        t, out = _in_thread(take)
        threads.append(t)
        wait_until(10, f"waiter {i} queued", lambda i=i: waiters(c, "res") == i + 1)
    assert first.release()
    for t in threads:
        t.join(20)
    assert order == [9, None]
    with pytest.raises(dlock.InvalidRequest):
        locker.lock("res", priority=1001)


def test_a_weighted_lease_holds_all_of_its_permits(server, locker):
    big = locker.lock("pool", ttl=30, limit=4, permits=3).acquire(blocking=False)
    assert big is not None
    assert locker.lock("pool", ttl=30, limit=4, permits=2).acquire(blocking=False) is None, "3 + 2 of 4"
    one = locker.lock("pool", ttl=30, limit=4).acquire(blocking=False)
    assert one is not None, "3 + 1 of 4"
    assert big.release()
    again = locker.lock("pool", ttl=30, limit=4, permits=3).acquire(blocking=False)
    assert again is not None, "all 3 given back"
    assert one.release() and again.release()
    with pytest.raises(dlock.InvalidRequest):
        locker.lock("pool", limit=4, permits=5)


def test_resize_grows_a_held_semaphore(server, locker):
    take = lambda: locker.lock("pool", ttl=30, limit=2).acquire(blocking=False)  # noqa: E731
    a, b = take(), take()
    assert a is not None and b is not None
    assert take() is None, "full"
    assert locker.resize("pool", 3) == 2
    c = take()
    assert c is not None, "3 of 3, under the old limit"
    assert locker.resize("free", 3) is None
    for bad in (0, 1, 2**20 + 1, True, "3"):
        with pytest.raises(dlock.InvalidRequest):
            locker.resize("pool", bad)
    assert a.release() and b.release() and c.release()
