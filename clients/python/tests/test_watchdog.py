"""The watchdog: renewal over several ttls, loss signalled within a third
of the ttl of an admin's DEL, never a renewal after release, and loss
signals without a watchdog."""

from __future__ import annotations

import time

import pytest

import dlock
from harness import calls, holder


@pytest.fixture
def locker(server):
    with dlock.Locker(server.conn()) as lk:
        yield lk


def test_the_watchdog_renews_across_several_ttls(server, locker):
    c = server.conn()
    with locker.lock("res", ttl=0.6) as lease:  # a with block renews by default
        time.sleep(3.0)  # five ttls: without renewal it would be gone after one
        assert holder(c, "res") == (lease.token, lease.fence)
        assert not lease.lost and lease.remaining() > 0
        assert calls(c, "dlock.extend") >= 4, "renewed at about ttl/3"
    assert holder(c, "res") is None


def test_loss_after_an_admin_del_is_signalled_within_a_third_of_the_ttl(server, locker):
    c = server.conn()
    called = []
    ttl = 3.0
    lease = locker.lock("res", ttl=ttl, watchdog=True, on_lost=called.append).acquire(blocking=False)
    c.delete("res")
    deleted = time.monotonic()
    # The next renewal (within ttl/3) is answered 0; slack for a loaded CI.
    assert lease.lost_event.wait(ttl / 3 + 0.7), "loss signalled"
    assert time.monotonic() - deleted <= ttl / 3 + 0.7
    assert lease.lost and called == [lease], "the callback ran first, with the lease"
    other = locker.lock("res").acquire(blocking=False)
    assert lease.release() is False, "lost for good"
    assert holder(c, "res") == (other.token, other.fence), "nobody else's lock was touched"
    other.release()


def test_leaving_a_with_block_whose_lease_was_lost_raises(server, locker):
    c = server.conn()
    with pytest.raises(dlock.LockLost):
        with locker.lock("res", ttl=1.5) as lease:
            c.delete("res")
            assert lease.wait_lost(1.5)
    # Not raised over the block's own exception, and not when told not to.
    with pytest.raises(KeyError):
        with locker.lock("res2", ttl=1.5):
            c.delete("res2")
            time.sleep(0.8)
            raise KeyError("mine")
    with locker.lock("res3", ttl=1.5, raise_on_lost=False) as lease:
        c.delete("res3")
        lease.wait_lost(1.5)


def test_the_watchdog_never_renews_after_release(server, locker):
    c = server.conn()
    lease = locker.lock("res", ttl=0.3, watchdog=True).acquire(blocking=False)
    time.sleep(0.25)
    assert lease.release()
    n = calls(c, "dlock.extend")
    # A renewal after the release would create nothing (EXTEND of a free
    # lock answers 0) but would show here.
    time.sleep(0.5)
    assert calls(c, "dlock.extend") == n
    assert holder(c, "res") is None


def test_without_a_watchdog_the_budget_passing_is_a_loss(server, locker):
    lease = locker.lock("res", ttl=0.4, watchdog=False).acquire(blocking=False)
    seen = []
    lease.add_lost_callback(seen.append)
    t0 = time.monotonic()
    assert lease.lost_event.wait(2.0)
    assert 0.3 < time.monotonic() - t0 < 1.5
    assert seen == [lease] and lease.lost
    assert lease.extend(5) is False, "a passed budget is never revived"
    assert lease.release() is False


def test_a_shortened_lease_is_renewed_on_the_new_schedule(server, locker):
    c = server.conn()
    lease = locker.lock("res", ttl=30, watchdog=True).acquire(blocking=False)
    n = calls(c, "dlock.extend")
    assert lease.extend(0.6)
    time.sleep(1.5)
    assert calls(c, "dlock.extend") >= n + 1 + 3, "renewed every 0.2 s now"
    assert not lease.lost and holder(c, "res") == (lease.token, lease.fence)
    # wait_lost follows the change of deadline: an admin DEL is found by
    # the next renewal.
    c.delete("res")
    assert lease.wait_lost(2.0)
    assert lease.release() is False


def test_an_abandoned_lease_is_not_renewed_forever(server, locker):
    import gc
    import warnings

    c = server.conn()
    lease = locker.lock("res", ttl=0.5, watchdog=True).acquire(blocking=False)
    tok = lease.token
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        del lease
        gc.collect()
    assert any(issubclass(x.category, ResourceWarning) for x in w)
    time.sleep(1.2)
    assert holder(c, "res") is None, f"{tok} ended with its ttl"


def test_an_abandoned_lease_with_a_callback_is_not_renewed_forever(server, locker):
    import gc
    import warnings

    c = server.conn()
    seen = []
    lease = locker.lock("res", ttl=0.5, watchdog=True, on_lost=seen.append).acquire(blocking=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        del lease
        gc.collect()
    time.sleep(1.2)
    assert holder(c, "res") is None, "ended with its ttl"


def test_an_on_lost_callback_may_release_or_extend_its_lease(server, locker):
    c = server.conn()
    done = []

    def on_lost(lease):
        done.append((lease.extend(5), lease.release()))

    lease = locker.lock("res", ttl=0.9, watchdog=True, on_lost=on_lost).acquire(blocking=False)
    c.delete("res")
    assert lease.lost_event.wait(0.9 / 3 + 0.7)
    assert done == [(False, False)], "no deadlock on the renewing thread"
