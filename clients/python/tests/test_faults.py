"""Faults on one server: lost replies (a dropping proxy), a paused server,
a restart, replicas acknowledgement."""

from __future__ import annotations

import time

import pytest

import dlock
from harness import holder, dead_url


def dlock_writes(args):
    name = args[0].upper() if args else b""
    return name in (b"DLOCK.ACQUIRE", b"DLOCK.EXTEND", b"DLOCK.RELEASE")


def test_lost_replies_are_retried_with_the_same_token_and_leave_no_orphan(server, make_proxy):
    proxy = make_proxy(server.port, 13, 300, dlock_writes)
    locker = dlock.Locker(proxy.url, retry_for=10)
    c = server.conn()
    for i in range(60):
        lease = locker.lock("res", ttl=30).acquire(blocking=False)
        assert lease is not None, f"cycle {i}: free, so granted"
        # The hold is this lease's: a lost reply was retried with the same
        # token (the same fence), never a second hold.
        assert holder(c, "res") == (lease.token, lease.fence), f"cycle {i}"
        assert lease.extend(30), f"cycle {i}"
        assert lease.release(), f"cycle {i}: released, whether or not a reply was lost"
        assert holder(c, "res") is None, f"cycle {i}"
    acquires = proxy.dropped_named("DLOCK.ACQUIRE")
    assert len(acquires) >= 5, f"too few lost ACQUIRE replies to prove anything: {len(acquires)}"
    assert all(d.reply[0] == b":" for d in acquires), "every lost ACQUIRE reply was a grant"
    assert proxy.dropped_named("DLOCK.RELEASE"), "a RELEASE reply was lost too"


def test_a_retried_release_is_judged_by_when_the_first_was_sent(server, make_proxy):
    # Every RELEASE reply is lost once: the retry finds nothing held. The
    # first attempt ran (its connection answered before it): released.
    dropped_once = set()

    def first_release(args):
        if args and args[0].upper() == b"DLOCK.RELEASE" and args[2] not in dropped_once:
            dropped_once.add(args[2])
            return True
        return False

    proxy = make_proxy(server.port, 1, 1000, first_release)
    locker = dlock.Locker(proxy.url)
    c = server.conn()
    lease = locker.lock("res", ttl=30).acquire(blocking=False)
    assert lease.release() is True
    assert len(proxy.dropped_named("DLOCK.RELEASE")) == 1
    assert holder(c, "res") is None
    # The same after the budget passed: the RELEASE (of nothing) is sent,
    # and the answer is "lost".
    lease = locker.lock("res2", ttl=0.2, watchdog=False).acquire(blocking=False)
    time.sleep(0.3)
    assert lease.release() is False


def test_a_release_on_a_connection_the_server_closed_is_not_mistaken(server):
    # After a restart (no persistence) the lock is gone: the pooled
    # connection is dead, the RELEASE never ran, and the answer is "lost",
    # not "released".
    locker = dlock.Locker(server.url)
    lease = locker.lock("res", ttl=30).acquire(blocking=False)
    server.restart()
    assert lease.release() is False
    assert lease.lost


def test_a_paused_server_costs_at_most_the_io_timeout(server):
    locker = dlock.Locker(server.url, io_timeout=0.3, retry_for=0.3)
    warm = locker.lock("warm").acquire(blocking=False)
    warm.release()
    server.stop()
    try:
        for lock in (locker.lock("res", ttl=10, blocking=False), locker.lock("res2", ttl=10, wait=1.0)):
            t0 = time.monotonic()
            with pytest.raises(dlock.Unavailable):
                lock.acquire()
            took = time.monotonic() - t0
            # The wait (if any), an io timeout, the abandon's margin; room
            # for a loaded machine.
            assert took < 3.0, took
    finally:
        server.cont()
    # The ACQUIREs buffered while it was paused run now, and the RELEASE
    # that gave them up could not reach it: an orphan bounded by its ttl,
    # never a second holder.
    info = locker.info("res")
    assert info is None or 0 < info["ttl"] <= 10_000


def test_extend_and_release_give_up_on_a_paused_server_and_keep_the_budget(server):
    locker = dlock.Locker(server.url, io_timeout=0.3, retry_for=0.3)
    lease = locker.lock("job", ttl=60).acquire(blocking=False)
    before = lease.deadline
    server.stop()
    try:
        t0 = time.monotonic()
        with pytest.raises(dlock.Unavailable):
            lease.extend(60)
        assert time.monotonic() - t0 < 2.0
        assert lease.deadline == before and not lease.lost
        t0 = time.monotonic()
        with pytest.raises(dlock.Unavailable):
            locker.release_token("job", lease.token)
        assert time.monotonic() - t0 < 2.0
    finally:
        server.cont()
    assert lease.extend(60)
    assert lease.release()


def test_an_unreachable_server_is_unavailable_after_the_retry_budget():
    locker = dlock.Locker(dead_url(), retry_for=0.5)
    retries = []
    t0 = time.monotonic()
    with pytest.raises(dlock.Unavailable):
        locker.lock("res", on_retry=retries.append).acquire(blocking=False)
    assert time.monotonic() - t0 < 3.0
    assert retries and all(isinstance(e, dlock.Unavailable) for e in retries)


def test_min_replicas_confirms_grants_and_refuses_unconfirmed_ones(make_server):
    master = make_server()
    replica = make_server("--replicaof", "127.0.0.1", str(master.port))
    from harness import info_field, wait_until

    rc = replica.conn()
    wait_until(20, "replica sync", lambda: info_field(rc, "replication", "master_link_status") == "up")
    # An honest margin for the acknowledgement on a loaded machine; the
    # refusal below uses a short timeout (no acknowledgement can come).
    locker = dlock.Locker(master.url, min_replicas=1, replicas_timeout=5)
    short = dlock.Locker(master.url, min_replicas=1, replicas_timeout=0.3)
    lease = locker.lock("res", ttl=30).acquire(blocking=False)
    assert holder(rc, "res") == (lease.token, lease.fence), "the replica has it"
    assert lease.extend(30)
    replica.kill9()
    with pytest.raises(dlock.TooFewReplicas) as e:
        short.lock("other", ttl=30).acquire(blocking=False)
    assert (e.value.acked, e.value.wanted) == (0, 1)
    assert holder(master.conn(), "other") is None, "an unconfirmed grant is released"
    # A renewal without acknowledgement keeps the last acknowledged budget.
    before = lease.deadline
    with pytest.raises(dlock.TooFewReplicas):
        lease.extend(60)
    assert lease.deadline == before and not lease.lost
    # WAIT n 0 would block forever: a zero timeout waits 1 ms.
    t0 = time.monotonic()
    with pytest.raises(dlock.TooFewReplicas):
        dlock.Locker(master.url, min_replicas=1, replicas_timeout=0).lock("z").acquire(blocking=False)
    assert time.monotonic() - t0 < 1.0


def test_quarantine_is_its_own_error(make_server):
    # A server restarted from an AOF that may have lost acknowledged grants
    # refuses new grants for a while: dlock.Quarantined, not "busy".
    s = make_server("--appendonly", "yes", "--appendfsync", "everysec")
    locker = dlock.Locker(s.url)
    lease = locker.lock("res", ttl=5).acquire(blocking=False)
    assert lease is not None
    time.sleep(1.2)  # the AOF has the grant (everysec)
    s.restart()
    try:
        got = locker.lock("other", ttl=5).acquire(blocking=False)
    except dlock.Quarantined as e:
        assert "QUARANTINE" in str(e)
    else:
        pytest.skip(f"this server did not quarantine after a crash ({got})")
